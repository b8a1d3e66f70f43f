/**
 * `ipam.mode: pool`: this node's share of Ferry's cluster pools. The node holds blocks (`IPBlock`
 * objects whose `spec.node` is this node) and allocates only inside them:
 *
 * - **Claiming**: when its blocks are full (or it has none), the node picks a block no node holds
 *   ({@link nextFreeBlock}) and creates its object; the object's name is the block's CIDR, so of
 *   two nodes claiming one block exactly one create succeeds (the other gets AlreadyExists and
 *   tries the next). The object is created before anything local, so a crash leaves at worst a
 *   block the node adopts at its next start.
 * - **Allocating** is node-local and fast: one file per address in the block's directory under
 *   the state dir ({@link LocalPool}), written before the ADD answers. The block object's
 *   `allocations` follow behind the answers: one writer per block coalesces every change since its
 *   last write into one update with the object's resourceVersion as precondition, re-reading and
 *   retrying on 409, so a burst of ADDs costs at most one write each and usually far fewer.
 * - **Giving back**: a block empty for `releaseAfterMs` is deleted (with uid and resourceVersion
 *   preconditions, so a block that changed meanwhile stays), its gateway taken off the bridge and
 *   its directory removed. The node keeps its first block of each family, claimed at start.
 * - **Pools the node no longer uses** (its config named another before): their blocks are
 *   adopted like any other, so the pods in them keep their addresses and routes, but nothing new
 *   is allocated in them, and each is given back once empty; new pods get addresses from the
 *   configured pools, whose first block is claimed at start.
 * - **At start** the node's blocks in the API and its block directories are reconciled: a block
 *   with a directory keeps the directory's allocations (they are written first, so they are the
 *   newer truth) and the object is brought in line; a block without one (state lost) adopts the
 *   object's allocations, so no address it records is handed out twice; a directory whose block
 *   object is gone is claimed again when it still holds addresses (and reported as lost when
 *   another node got the block meanwhile), or removed when empty.
 *
 * The parts: the blocks as the cluster knows them (`block_api.ts`), the node's blocks they share
 * (`owned_blocks.ts`), claims (`block_claims.ts`), the reconciliation with the API
 * (`block_sync.ts`), both over the claim protocol NAD networks' blocks share
 * (`claim_protocol.ts`); this module is the allocator the default network draws from.
 *
 * @module
 */
import type { PodRef } from "../../lib/cni/args.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { FamilyAllocator, Lease } from "./allocator.ts";
import { parsePool } from "./ip_pools.ts";
import type { Owner } from "./local_pool.ts";
import { earlier, SYSTEM_CLOCK, waitOutQuarantine } from "./quarantine.ts";
import { BlockClaims } from "./block_claims.ts";
import { BlockSync } from "./block_sync.ts";
import { errorText, ownerKey, releaseAdoptedOfGonePods } from "./claim_protocol.ts";
import { type BlockIpamDeps, gatewayOf, leaseOf, NodeBlocks, pause } from "./owned_blocks.ts";

export type { BlockApi, BlockSummary, ClaimTurn, PoolView } from "./block_api.ts";
export { overlappingPools } from "./block_api.ts";
export type { BlockIpamDeps } from "./owned_blocks.ts";

/** Counters, for `/v1/stats`. */
export interface BlockIpamStats {
  /** The blocks held now (CIDRs). */
  blocks: string[];
  /** Blocks claimed since start. */
  claims: number;
  /** Claims lost to another node (AlreadyExists). */
  claimRaces: number;
  /** Blocks given back since start. */
  released: number;
  /** Block updates written. */
  writes: number;
  /** Updates refused with 409 Conflict (then re-read and retried). */
  conflicts: number;
  /** Blocks whose allocations are not yet written. */
  pending: number;
  /** Blocks this node holds addresses in but another node owns (see the log). */
  lost: string[];
  /** Blocks this node created and gave back at once, because another node's block overlapped. */
  overlapsYielded: number;
  /** Pools that overlap another pool (`a overlaps b`), as last seen by a claim. */
  overlappingPools: string[];
}

/**
 * The node's blocks.
 *
 * @example
 * ```ts
 * const ipam = await BlockIpam.open({ nodeName: "n1", poolNames: ["default"], api, view,
 *   stateDir, gateways, releaseAfterMs: 300_000, logger });
 * const [v4] = ipam.allocators();
 * await v4.allocate({ containerId: "c1", ifname: "eth0" });
 * ```
 */
export class BlockIpam {
  readonly #b: NodeBlocks;
  readonly #claims: BlockClaims;
  readonly #sync: BlockSync;

  private constructor(deps: BlockIpamDeps) {
    this.#b = new NodeBlocks(deps, (block) => this.#sync.writePass(block));
    this.#claims = new BlockClaims(this.#b);
    this.#sync = new BlockSync(this.#b, this.#claims);
  }

  /**
   * Reconciles the node's blocks in the API with its block directories (see the module doc) and
   * returns the IPAM. The watches must have delivered their first lists.
   */
  static async open(deps: BlockIpamDeps): Promise<BlockIpam> {
    const ipam = new BlockIpam(deps);
    deps.view.onBlockRemoved?.((name) => ipam.#sync.blockDeleted(name));
    deps.view.onBlockUpserted?.((block) => ipam.#sync.blockGiven(block));
    await ipam.#sync.reconcile();
    // One block per family from the start: other nodes route to it before the first pod comes,
    // and the overlay takes its address from it. A pool with none free is said, not fatal.
    for (const a of ipam.allocators()) {
      if (ipam.#b.usable(a.family).length) continue;
      await ipam.#claims.claim(a.family).catch((e) =>
        deps.logger.error("{error}", {
          error: e instanceof CniError ? `${e.message} (${e.details})` : errorText(e),
        })
      );
    }
    return ipam;
  }

  /** One allocator per family the configured pools have. */
  allocators(): FamilyAllocator[] {
    const families = new Set<4 | 6>();
    for (const name of this.#b.d.poolNames) {
      const obj = this.#b.d.view.pool(name);
      if (!obj) continue;
      try {
        for (const f of parsePool(obj)) families.add(f.family);
      } catch { /* reported by the caller */ }
    }
    for (const b of this.#b.blocks.values()) families.add(b.family);
    return [...families].sort().map((family) => this.#allocator(family));
  }

  #allocator(family: 4 | 6): FamilyAllocator {
    // deno-lint-ignore no-this-alias
    const ipam = this;
    return {
      family,
      allocate: (owner, pod, wait) =>
        waitOutQuarantine(
          () => ipam.#allocate(family, owner, pod),
          () => ipam.#quarantineEndsAt(family),
          wait,
          ipam.#b.d.clock ?? SYSTEM_CLOCK,
        ),
      release: (owner) => ipam.#release(family, owner),
      addressOf: (owner) => {
        for (const b of ipam.#b.of(family)) {
          const ip = b.local.addressOf(owner);
          if (ip) return ip;
        }
        return undefined;
      },
      allocations: () => ipam.#b.of(family).flatMap((b) => b.local.allocations()),
      adopted: (owner) => ipam.#b.adopted.has(ownerKey(owner)),
      async repair(holders) {
        const restored: string[] = [];
        const freed: string[] = [];
        for (const b of ipam.#b.of(family)) {
          const r = await b.local.repair(holders);
          restored.push(...r.restored);
          freed.push(...r.freed);
          if (r.restored.length || r.freed.length) ipam.#b.markDirty(b);
        }
        return { restored, freed };
      },
      get free() {
        return ipam.#b.usable(family).reduce((n, b) => n + b.local.free, 0);
      },
      subnets: () => ipam.#b.of(family).map((b) => b.text),
      usage: () =>
        ipam.#b.of(family).map((b) => ({ range: b.text, used: b.local.held, free: b.local.free })),
      gateways: () => ipam.#b.of(family).map(gatewayOf),
    };
  }

  async #allocate(family: 4 | 6, owner: Owner, pod?: PodRef): Promise<Lease> {
    for (const b of this.#b.of(family)) {
      const ip = b.local.addressOf(owner);
      if (ip) return leaseOf(b, ip);
    }
    // A few rounds: a block claimed for this ADD may be filled by concurrent ones first.
    for (let round = 0; round < 8; round++) {
      for (const b of this.#b.usable(family)) {
        if (b.local.free <= 0) continue;
        let ip: string;
        try {
          ip = await b.local.allocate(owner);
        } catch (e) {
          if (e instanceof CniError && e.code === CNI_ERROR.ADDRESSES_EXHAUSTED) continue;
          throw e;
        }
        this.#b.meta.set(ownerKey(owner), {
          uid: pod?.uid ?? "",
          namespace: pod?.namespace,
          name: pod?.name,
        });
        b.emptySince = undefined;
        this.#b.markDirty(b);
        return leaseOf(b, ip);
      }
      await this.#claims.claim(family);
    }
    throw this.#b.exhausted(family, "blocks claimed for this ADD were filled by others first");
  }

  /**
   * When the earliest quarantined address of the blocks new addresses come from comes out: an
   * allocation that found them full and no block left to claim may wait for it.
   */
  #quarantineEndsAt(family: 4 | 6): number | undefined {
    return this.#b.usable(family).reduce<number | undefined>(
      (first, b) => earlier(first, b.local.quarantineEndsAt()),
      undefined,
    );
  }

  async #release(family: 4 | 6, owner: Owner): Promise<string | undefined> {
    for (const b of this.#b.of(family)) {
      if (!b.local.addressOf(owner)) continue;
      const ip = await b.local.release(owner);
      this.#b.meta.delete(ownerKey(owner));
      this.#b.adopted.delete(ownerKey(owner));
      this.#b.markDirty(b);
      this.#sync.checkEmpty(b);
      return ip;
    }
    return undefined;
  }

  /**
   * Releases the adopted allocations (see {@link BlockIpam.open}) whose pod is gone: `gone` asks
   * the API about the pod the block object named. An adopted allocation names a pod this node
   * never plugged (its block object was taken over: state lost, `spec.node` edited), so no DEL of
   * the runtime will ever release it here. Returns the addresses released.
   */
  releaseAdoptedOfGonePods(
    gone: (pod: { uid: string; namespace: string; name: string }) => Promise<boolean>,
  ): Promise<string[]> {
    return releaseAdoptedOfGonePods(this.#b, gone, async (owner) => {
      const ips: string[] = [];
      for (const family of [4, 6] as const) {
        const ip = await this.#release(family, owner);
        if (ip) ips.push(ip);
      }
      this.#b.adopted.delete(ownerKey(owner));
      return ips;
    }, (pod, ips) =>
      this.#b.d.logger.info(
        "released the adopted allocation of {pod} ({ips}): the pod is gone",
        { pod: `${pod.namespace}/${pod.name}`, ips: ips.join(", ") },
      ));
  }

  /** Settles once every block's allocations are written (or `signal` aborts). */
  async flush(signal?: AbortSignal): Promise<void> {
    while (!signal?.aborted) {
      const busy = [...this.#b.blocks.values()].filter((b) => b.writer.busy);
      if (!busy.length) return;
      await Promise.race([...busy.map((b) => b.writer.idle()), pause(100)]);
    }
  }

  /** Counters. */
  stats(): BlockIpamStats {
    const blocks = [...this.#b.blocks.values()];
    return {
      ...this.#b.stats,
      blocks: blocks.filter((b) => !b.lost).map((b) => b.text),
      pending: blocks.filter((b) => b.writer.busy).length,
      lost: blocks.filter((b) => b.lost).map((b) => b.text),
      overlappingPools: [...this.#b.overlappingPools],
    };
  }

  /**
   * Stops writing and giving back (what is written stays; the next start picks up the rest). A
   * write already sent to the API finishes, and nothing is sent after it: no update, no block
   * re-created or deleted. Settles once no write is under way (which may take as long as the API
   * takes to answer the last request).
   */
  async close(): Promise<void> {
    this.#b.closed = true;
    this.#sync.stopTimers();
    this.#b.closing.abort();
    await Promise.all([...this.#b.blocks.values()].map((b) => b.writer.idle()));
  }
}
