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
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { PodRef } from "../../lib/cni/args.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import { KubeApiError } from "../k8s/errors.ts";
import type { FamilyAllocator, Lease } from "./allocator.ts";
import { type Cidr, cidrsOverlap, formatCidr, formatIp, parseCidr } from "./cidr.ts";
import {
  type BlockAllocation,
  blockName,
  blockRange,
  type IpBlockObject,
  type IpPoolObject,
  nextFreeBlock,
  parsePool,
  type PoolFamily,
} from "./ip_pools.ts";
import { LocalPool, type Owner, type PoolRange } from "./local_pool.ts";
import { DirtyLoop } from "../runtime/dirty_loop.ts";
import { sleep } from "../runtime/sleep.ts";

/** The API side of blocks (`IPBlock` objects). */
export interface BlockApi {
  /** Creates a block; a name that exists throws `KubeApiError` with `isAlreadyExists`. */
  create(block: IpBlockObject): Promise<IpBlockObject>;
  /** Replaces a block; a stale resourceVersion throws `KubeApiError` with `isConflict`. */
  update(block: IpBlockObject): Promise<IpBlockObject>;
  /** Reads a block; undefined when it does not exist. */
  get(name: string): Promise<IpBlockObject | undefined>;
  /** Deletes a block if its uid and resourceVersion still match (409 `Conflict` otherwise). */
  delete(name: string, uid: string, resourceVersion: string): Promise<void>;
  /** Every block, read from the server's storage (never a cache that may lag it). */
  list(): Promise<IpBlockObject[]>;
  /**
   * Takes a turn to claim: reads the cluster's one claim counter (created when absent). Claims
   * are serialized on it: see {@link ClaimTurn}.
   */
  claimTurn(): Promise<ClaimTurn>;
}

/**
 * One reading of the cluster's claim counter. A node that created a block lists every block
 * after reading the counter, and hands out addresses of its block only once no other block
 * overlaps it and `commit` (the counter's update, with the read version as precondition)
 * succeeded. Two claims that read the same version cannot both commit; a claim that reads a later
 * version lists after the earlier claim's block existed, and so sees it. Hence of two overlapping
 * blocks (whatever their pools and sizes) at most one is ever used, and it is the one committed
 * first.
 */
export interface ClaimTurn {
  /** Bumps the counter; false when another claim committed since this turn was read. */
  commit(): Promise<boolean>;
}

/** A block as the cluster-wide watch keeps it. */
export interface BlockSummary {
  /** Object name. */
  name: string;
  /** `spec.cidr`. */
  cidr: string;
  /** `spec.node`. */
  node: string;
  /** `spec.pool`. */
  pool: string;
}

/** What the watches know of pools and blocks. */
export interface PoolView {
  /** The pool called `name`, if it exists. */
  pool(name: string): IpPoolObject | undefined;
  /** Every block of the cluster. */
  blocks(): BlockSummary[];
  /** Every pool (to report pools that overlap). */
  pools?(): IpPoolObject[];
  /** Calls `fn` with the name of every block the watch sees deleted. */
  onBlockRemoved?(fn: (name: string) => void): void;
  /** Calls `fn` with every block the watch sees added or changed. */
  onBlockUpserted?(fn: (block: BlockSummary) => void): void;
}

/** What {@link BlockIpam} needs. */
export interface BlockIpamDeps {
  /** This node. */
  nodeName: string;
  /** The pools it draws from, in order of preference. */
  poolNames: string[];
  /** The API. */
  api: BlockApi;
  /** The watched pools and blocks. */
  view: PoolView;
  /** The daemon's state directory (blocks live under `ipam/blocks/`). */
  stateDir: string;
  /** Puts a block's gateway (`address/prefix`) on the bridge, and takes it off again. */
  gateways: { add(cidr: string): Promise<void>; remove(cidr: string): Promise<void> };
  /** How long a block stays empty before it is given back (ms). */
  releaseAfterMs: number;
  /** How long a released address stays out of use (ms). */
  reuseDelayMs?: number;
  /** Where to log. */
  logger: Logger;
  /**
   * The pod an owner's attachment record names (the node's durable record of it): a block's
   * allocations name their pods from it when nothing else here knows them (after a restart whose
   * block object was lost).
   */
  podOf?: (owner: Owner) => PodRef | undefined;
}

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

interface PodMeta {
  uid: string;
  namespace?: string;
  name?: string;
}

interface OwnedBlock {
  name: string;
  pool: string;
  cidr: Cidr;
  text: string;
  family: 4 | 6;
  local: LocalPool;
  /** The object as last read or written. */
  obj?: IpBlockObject;
  /** Writes the block's allocations; kicked on every change. */
  writer: DirtyLoop;
  emptySince?: number;
  retiring: boolean;
  /** Why the block is not this node's any more, when it is not. */
  lost?: string;
  claimedAt: number;
  failures: number;
}

const ownerKey = (o: Owner) => `${o.containerId}\n${o.ifname}`;
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
const errorText = (e: unknown) => e instanceof Error ? e.message : String(e);
const isApi = (e: unknown, test: (k: KubeApiError) => boolean) =>
  e instanceof KubeApiError && test(e);

function plainRange(cidr: Cidr): PoolRange {
  return blockRange(cidr) ?? (() => {
    throw new Error(`block ${formatCidr(cidr)} hands out nothing`);
  })();
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
  readonly #d: BlockIpamDeps;
  readonly #blocks = new Map<string, OwnedBlock>();
  readonly #meta = new Map<string, PodMeta>();
  /** Owners whose addresses were adopted from block objects at start (no record here). */
  readonly #adopted = new Set<string>();
  /** Blocks being claimed or adopted now (their watch events are this node's own). */
  readonly #claimingNames = new Set<string>();
  readonly #claiming = new Map<4 | 6, Promise<OwnedBlock>>();
  readonly #timers = new Set<ReturnType<typeof setTimeout>>();
  /** Aborted at close: ends the back-off sleeps of writers early. */
  readonly #closing = new AbortController();
  readonly #stats = {
    claims: 0,
    claimRaces: 0,
    released: 0,
    writes: 0,
    conflicts: 0,
    overlapsYielded: 0,
  };
  #overlappingPools: string[] = [];
  #closed = false;

  private constructor(deps: BlockIpamDeps) {
    this.#d = deps;
  }

  get #dir(): string {
    return `${this.#d.stateDir}/ipam/blocks`;
  }

  /**
   * Reconciles the node's blocks in the API with its block directories (see the module doc) and
   * returns the IPAM. The watches must have delivered their first lists.
   */
  static async open(deps: BlockIpamDeps): Promise<BlockIpam> {
    const ipam = new BlockIpam(deps);
    deps.view.onBlockRemoved?.((name) => ipam.#blockDeleted(name));
    deps.view.onBlockUpserted?.((block) => ipam.#blockGiven(block));
    await ipam.#reconcile();
    // One block per family from the start: other nodes route to it before the first pod comes,
    // and the overlay takes its address from it. A pool with none free is said, not fatal.
    for (const a of ipam.allocators()) {
      if (ipam.#usable(a.family).length) continue;
      await ipam.#claim(a.family).catch((e) =>
        deps.logger.error("{error}", {
          error: e instanceof CniError ? `${e.message} (${e.details})` : errorText(e),
        })
      );
    }
    return ipam;
  }

  async #reconcile(): Promise<void> {
    const { nodeName, view, api, logger } = this.#d;
    await Deno.mkdir(this.#dir, { recursive: true, mode: 0o700 });
    const local = new Map<string, { pool: string; cidr: string }>();
    for await (const entry of Deno.readDir(this.#dir)) {
      if (!entry.isDirectory) continue;
      const meta = await Deno.readTextFile(`${this.#dir}/${entry.name}/.block.json`)
        .then((t) => JSON.parse(t) as { pool: string; cidr: string })
        .catch(() => undefined);
      if (meta && typeof meta.cidr === "string" && blockName(parseCidr(meta.cidr)) === entry.name) {
        local.set(entry.name, meta);
      } else {
        logger.error("block directory {dir} has no readable .block.json; left alone", {
          dir: `${this.#dir}/${entry.name}`,
        });
      }
    }
    const mine = view.blocks().filter((b) => b.node === nodeName);
    for (const summary of mine) {
      const obj = await api.get(summary.name);
      if (!obj?.spec || obj.spec.node !== nodeName) continue;
      const hadLocal = local.delete(summary.name);
      const block = await this.#openBlock(obj.spec.pool, parseCidr(obj.spec.cidr), obj);
      const recorded = obj.spec.allocations ?? [];
      for (const a of recorded) {
        this.#meta.set(ownerKey({ containerId: a.containerID, ifname: a.ifname }), {
          uid: a.podUID,
          namespace: a.namespace,
          name: a.name,
        });
      }
      if (!hadLocal && recorded.length) {
        for (const a of recorded) {
          const owner = { containerId: a.containerID, ifname: a.ifname };
          await block.local.hold(a.ip, owner);
          this.#adopted.add(ownerKey(owner));
        }
        logger.warn(
          "block {cidr} had no directory here (state lost?): adopted the {n} allocations its " +
            "object records; they are kept until a DEL for their container releases them",
          { cidr: block.text, n: recorded.length },
        );
      }
      if (!this.#d.poolNames.includes(block.pool)) {
        logger.warn(
          "block {cidr} is of IPPool {pool}, which this node no longer uses: it keeps its {n} addresses, hands out no more, and is given back once empty",
          { cidr: block.text, pool: block.pool, n: block.local.held },
        );
      }
      this.#markDirty(block);
    }
    for (const [name, meta] of local) {
      const cidr = parseCidr(meta.cidr);
      const pool = await LocalPool.open(`${this.#dir}/${name}`, plainRange(cidr));
      if (pool.held === 0) {
        await Deno.remove(`${this.#dir}/${name}`, { recursive: true });
        logger.info("removed the directory of block {cidr}: no object, no addresses", {
          cidr: meta.cidr,
        });
        continue;
      }
      const block = await this.#openBlock(meta.pool, cidr, undefined);
      logger.warn("block {cidr} holds {n} addresses here but has no object; claiming it again", {
        cidr: meta.cidr,
        n: pool.held,
      });
      await this.#recreate(block);
    }
    for (const block of this.#blocks.values()) this.#checkEmpty(block);
  }

  /** Opens (creating) a block's directory and records the block as this node's. */
  async #openBlock(pool: string, cidr: Cidr, obj: IpBlockObject | undefined): Promise<OwnedBlock> {
    const name = blockName(cidr);
    const dir = `${this.#dir}/${name}`;
    await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
    const text = formatCidr(cidr);
    await Deno.writeTextFile(`${dir}/.block.json`, JSON.stringify({ pool, cidr: text }));
    const range = this.#rangeOf(pool, cidr);
    const block: OwnedBlock = {
      name,
      pool,
      cidr,
      text,
      family: cidr.network.family,
      local: await LocalPool.open(dir, range, { reuseDelayMs: this.#d.reuseDelayMs }),
      obj,
      writer: undefined!,
      retiring: false,
      claimedAt: Date.now(),
      failures: 0,
    };
    block.writer = new DirtyLoop(
      () => this.#writePass(block),
      () => !this.#closed && this.#blocks.get(block.name) === block,
    );
    this.#blocks.set(name, block);
    return block;
  }

  /** The range of a block: the pool's exclusions apply while the pool exists. */
  #rangeOf(pool: string, cidr: Cidr): PoolRange {
    const obj = this.#d.view.pool(pool);
    let family: PoolFamily | undefined;
    try {
      family = obj ? parsePool(obj).find((f) => f.family === cidr.network.family) : undefined;
    } catch { /* a broken pool: no exclusions known */ }
    return blockRange(cidr, family?.excluded ?? []) ?? plainRange(cidr);
  }

  /** One allocator per family the configured pools have. */
  allocators(): FamilyAllocator[] {
    const families = new Set<4 | 6>();
    for (const name of this.#d.poolNames) {
      const obj = this.#d.view.pool(name);
      if (!obj) continue;
      try {
        for (const f of parsePool(obj)) families.add(f.family);
      } catch { /* reported by the caller */ }
    }
    for (const b of this.#blocks.values()) families.add(b.family);
    return [...families].sort().map((family) => this.#allocator(family));
  }

  #allocator(family: 4 | 6): FamilyAllocator {
    // deno-lint-ignore no-this-alias
    const ipam = this;
    return {
      family,
      allocate: (owner, pod) => ipam.#allocate(family, owner, pod),
      release: (owner) => ipam.#release(family, owner),
      addressOf: (owner) => {
        for (const b of ipam.#of(family)) {
          const ip = b.local.addressOf(owner);
          if (ip) return ip;
        }
        return undefined;
      },
      allocations: () => ipam.#of(family).flatMap((b) => b.local.allocations()),
      adopted: (owner) => ipam.#adopted.has(ownerKey(owner)),
      async repair(holders) {
        const restored: string[] = [];
        const freed: string[] = [];
        for (const b of ipam.#of(family)) {
          const r = await b.local.repair(holders);
          restored.push(...r.restored);
          freed.push(...r.freed);
          if (r.restored.length || r.freed.length) ipam.#markDirty(b);
        }
        return { restored, freed };
      },
      get free() {
        return ipam.#usable(family).reduce((n, b) => n + b.local.free, 0);
      },
      subnets: () => ipam.#of(family).map((b) => b.text),
      usage: () =>
        ipam.#of(family).map((b) => ({ range: b.text, used: b.local.held, free: b.local.free })),
      gateways: () => ipam.#of(family).map(gatewayOf),
    };
  }

  #of(family: 4 | 6): OwnedBlock[] {
    return [...this.#blocks.values()].filter((b) => b.family === family)
      .sort((a, b) => a.claimedAt - b.claimedAt);
  }

  /**
   * The blocks new addresses come from: not being given back, not lost, and of a pool that exists
   * and that the node's config names (a block of a pool it no longer uses keeps its addresses until they are
   * released, then is given back).
   */
  #usable(family: 4 | 6): OwnedBlock[] {
    return this.#of(family).filter((b) =>
      !b.retiring && !b.lost && this.#d.poolNames.includes(b.pool) && !!this.#d.view.pool(b.pool)
    );
  }

  async #allocate(family: 4 | 6, owner: Owner, pod?: PodRef): Promise<Lease> {
    for (const b of this.#of(family)) {
      const ip = b.local.addressOf(owner);
      if (ip) return leaseOf(b, ip);
    }
    // A few rounds: a block claimed for this ADD may be filled by concurrent ones first.
    for (let round = 0; round < 8; round++) {
      for (const b of this.#usable(family)) {
        if (b.local.free <= 0) continue;
        let ip: string;
        try {
          ip = await b.local.allocate(owner);
        } catch (e) {
          if (e instanceof CniError && e.code === CNI_ERROR.ADDRESSES_EXHAUSTED) continue;
          throw e;
        }
        this.#meta.set(ownerKey(owner), {
          uid: pod?.uid ?? "",
          namespace: pod?.namespace,
          name: pod?.name,
        });
        b.emptySince = undefined;
        this.#markDirty(b);
        return leaseOf(b, ip);
      }
      await this.#claim(family);
    }
    throw this.#exhausted(family, "blocks claimed for this ADD were filled by others first");
  }

  async #release(family: 4 | 6, owner: Owner): Promise<string | undefined> {
    for (const b of this.#of(family)) {
      if (!b.local.addressOf(owner)) continue;
      const ip = await b.local.release(owner);
      this.#meta.delete(ownerKey(owner));
      this.#adopted.delete(ownerKey(owner));
      this.#markDirty(b);
      this.#checkEmpty(b);
      return ip;
    }
    return undefined;
  }

  /** Claims a block of `family` (one claim at a time per family; concurrent callers share it). */
  #claim(family: 4 | 6): Promise<OwnedBlock> {
    let claiming = this.#claiming.get(family);
    if (!claiming) {
      claiming = this.#claimNew(family).finally(() => this.#claiming.delete(family));
      this.#claiming.set(family, claiming);
    }
    return claiming;
  }

  async #claimNew(family: 4 | 6): Promise<OwnedBlock> {
    const { nodeName, view, api, logger } = this.#d;
    const lostRaces = new Set<string>();
    for (const poolName of this.#d.poolNames) {
      const obj = view.pool(poolName);
      if (!obj) continue;
      let fam: PoolFamily | undefined;
      try {
        fam = parsePool(obj).find((f) => f.family === family);
      } catch (e) {
        logger.error("{error}", { error: errorText(e) });
        continue;
      }
      if (!fam) continue;
      for (let attempt = 0; attempt < 32; attempt++) {
        const taken = [
          ...view.blocks().map((b) => parseCidr(b.cidr)),
          ...[...this.#blocks.values()].map((b) => b.cidr),
          ...[...lostRaces].map((c) => parseCidr(c)),
        ];
        const cidr = nextFreeBlock(fam, taken, nodeName);
        if (!cidr) break;
        const text = formatCidr(cidr);
        let created: IpBlockObject;
        let turn: ClaimTurn;
        this.#claimingNames.add(blockName(cidr));
        try {
          turn = await api.claimTurn();
          created = await api.create({
            metadata: {
              name: blockName(cidr),
              labels: { "ferry.dev/node": nodeName, "ferry.dev/pool": poolName },
            },
            spec: { pool: poolName, cidr: text, node: nodeName, allocations: [] },
          });
        } catch (e) {
          this.#claimingNames.delete(blockName(cidr));
          if (isApi(e, (k) => k.isAlreadyExists)) {
            // Another node was first (our watch had not shown its block yet): try the next.
            this.#stats.claimRaces++;
            lostRaces.add(text);
            continue;
          }
          throw new CniError(
            CNI_ERROR.TRY_AGAIN_LATER,
            `cannot claim a block of IPPool ${poolName} for node ${nodeName}`,
            errorText(e),
          );
        }
        let settled: boolean;
        try {
          settled = await this.#settleClaim(created, cidr, turn);
        } catch (e) {
          this.#claimingNames.delete(blockName(cidr));
          throw e;
        }
        if (!settled) {
          this.#claimingNames.delete(blockName(cidr));
          lostRaces.add(text);
          continue;
        }
        const block = await this.#openBlock(poolName, cidr, created)
          .finally(() => this.#claimingNames.delete(blockName(cidr)));
        try {
          await this.#d.gateways.add(gatewayOf(block));
        } catch (e) {
          this.#blocks.delete(block.name);
          await Deno.remove(`${this.#dir}/${block.name}`, { recursive: true }).catch(() => {});
          await api.delete(block.name, created.metadata!.uid!, created.metadata!.resourceVersion!)
            .catch(() => {});
          throw new CniError(
            CNI_ERROR.IO_FAILURE,
            `cannot put the gateway of block ${text} on the bridge`,
            errorText(e),
          );
        }
        this.#stats.claims++;
        logger.info("claimed block {cidr} of IPPool {pool} for node {node} ({free} addresses)", {
          cidr: text,
          pool: poolName,
          node: nodeName,
          free: block.local.free,
        });
        return block;
      }
    }
    throw this.#exhausted(family, this.#whyNoBlock(family));
  }

  /**
   * Settles a claim whose block object was just created (see {@link ClaimTurn}): true once the
   * block is this node's to use; false when another block overlaps it, which is then deleted
   * before any of its addresses was handed out.
   */
  async #settleClaim(created: IpBlockObject, cidr: Cidr, first: ClaimTurn): Promise<boolean> {
    const { api, logger, nodeName } = this.#d;
    const name = created.metadata!.name!;
    let turn = first;
    for (let attempt = 0; attempt < 32; attempt++) {
      const other = await this.#overlapping(name, cidr);
      if (other) {
        this.#stats.overlapsYielded++;
        await api.delete(name, created.metadata!.uid!, created.metadata!.resourceVersion!)
          .catch((e) => {
            if (!isApi(e, (k) => k.isNotFound)) throw e;
          });
        logger.warn(
          "block {cidr} overlaps block {other} of node {owner} (IPPool {pool}): gave it back " +
            "before handing out any of its addresses",
          {
            cidr: formatCidr(cidr),
            other: other.spec!.cidr,
            owner: other.spec!.node,
            pool: other.spec!.pool,
          },
        );
        return false;
      }
      if (await turn.commit()) return true;
      turn = await api.claimTurn();
    }
    throw new CniError(
      CNI_ERROR.TRY_AGAIN_LATER,
      `cannot settle the claim of block ${formatCidr(cidr)} for node ${nodeName}`,
      "other nodes kept claiming blocks meanwhile",
    );
  }

  /**
   * Settles a block object re-created from the node's own allocations: commits the claim unless
   * another block overlaps it (then says which: this node keeps its pods' addresses, since
   * giving them up would not take them off the pods).
   */
  async #settleRecreated(block: OwnedBlock, first: ClaimTurn): Promise<string | undefined> {
    let turn = first;
    for (let attempt = 0; attempt < 32; attempt++) {
      const other = await this.#overlapping(block.name, block.cidr);
      if (other) return `block ${other.spec!.cidr} of node ${other.spec!.node}`;
      if (await turn.commit()) return undefined;
      turn = await this.#d.api.claimTurn();
    }
    return undefined;
  }

  /**
   * The watch saw a block naming this node that the node does not hold (its `spec.node` edited by
   * hand to this node, or a node's blocks moved): it is adopted as at start, so that what its
   * object records is never handed out again, and its allocations of pods that are gone are
   * released by the sweep ({@link BlockIpam.releaseAdoptedOfGonePods}).
   */
  #blockGiven(summary: BlockSummary): void {
    if (this.#closed) return;
    const held = this.#blocks.get(summary.name);
    if (held && summary.node !== this.#d.nodeName && !held.lost && !held.retiring) {
      // Taken from this node (its spec.node edited): its pods keep their addresses, nothing new
      // is allocated in it, and its files go once they are released.
      held.lost = `block ${held.text} now names node ${summary.node}`;
      this.#d.logger.error(
        "{why}: {n} pods here keep their addresses ({ips}); nothing new is allocated in it",
        { why: held.lost, n: held.local.held, ips: held.local.allocations().map((a) => a.ip) },
      );
      this.#checkEmpty(held);
      return;
    }
    if (summary.node !== this.#d.nodeName) return;
    if (this.#blocks.has(summary.name) || this.#claimingNames.has(summary.name)) return;
    this.#claimingNames.add(summary.name);
    this.#adoptGiven(summary).catch((e) =>
      this.#d.logger.error("adopting block {cidr} failed: {error}", {
        cidr: summary.cidr,
        error: errorText(e),
      })
    ).finally(() => this.#claimingNames.delete(summary.name));
  }

  async #adoptGiven(summary: BlockSummary): Promise<void> {
    const obj = await this.#d.api.get(summary.name);
    if (this.#closed || !obj?.spec || obj.spec.node !== this.#d.nodeName) return;
    if (this.#blocks.has(summary.name)) return;
    const block = await this.#openBlock(obj.spec.pool, parseCidr(obj.spec.cidr), obj);
    const recorded = obj.spec.allocations ?? [];
    for (const a of recorded) {
      const owner = { containerId: a.containerID, ifname: a.ifname };
      if (block.local.addressOf(owner)) continue;
      await block.local.hold(a.ip, owner);
      this.#adopted.add(ownerKey(owner));
      this.#meta.set(ownerKey(owner), { uid: a.podUID, namespace: a.namespace, name: a.name });
    }
    this.#d.logger.warn(
      "block {cidr} names this node but was not claimed by it (its spec.node edited?): adopted " +
        "the {n} allocations its object records; new addresses come from it too",
      { cidr: block.text, n: recorded.length },
    );
    await this.#d.gateways.add(gatewayOf(block)).catch(() => {});
    this.#markDirty(block);
    this.#checkEmpty(block);
  }

  /**
   * The watch saw one of this node's blocks deleted (by hand, or by anyone but this node): the
   * object is written again at once from the node's allocations, so that no other node can
   * claim the block and hand out addresses its pods hold; an empty block is let go.
   */
  #blockDeleted(name: string): void {
    const block = this.#blocks.get(name);
    if (!block || block.retiring || block.lost || this.#closed) return;
    this.#d.logger.error(
      "block {cidr} of this node was deleted from the API while it holds {n} addresses; " +
        "writing it again from the node's allocations",
      { cidr: block.text, n: block.local.held },
    );
    block.obj = undefined;
    this.#markDirty(block);
  }

  /** The first block other than `name` that shares addresses with `cidr`, listed from storage. */
  async #overlapping(name: string, cidr: Cidr): Promise<IpBlockObject | undefined> {
    return (await this.#d.api.list()).find((b) =>
      b.metadata?.name !== name && b.spec?.cidr && cidrsOverlap(parseCidr(b.spec.cidr), cidr)
    );
  }

  /** Why no block of `family` can be claimed: pools missing, broken, full; overlaps reported. */
  #whyNoBlock(family: 4 | 6): string {
    const { view, poolNames, logger } = this.#d;
    const reasons: string[] = [];
    for (const name of poolNames) {
      const obj = view.pool(name);
      if (!obj) {
        reasons.push(`IPPool ${name} does not exist`);
        continue;
      }
      try {
        if (!parsePool(obj).some((f) => f.family === family)) {
          reasons.push(`IPPool ${name} has no IPv${family} CIDR`);
        } else reasons.push(`IPPool ${name} has no free block left`);
      } catch (e) {
        reasons.push(errorText(e));
      }
    }
    const overlapping = overlappingPools(view);
    if (overlapping.join() !== this.#overlappingPools.join()) {
      this.#overlappingPools = overlapping;
      for (const o of overlapping) {
        logger.error("{overlap}: their blocks are claimed one at a time, never both", {
          overlap: o,
        });
      }
    }
    return reasons.join("; ") || "no pool is configured";
  }

  #exhausted(family: 4 | 6, why: string): CniError {
    const { nodeName, poolNames } = this.#d;
    const held = this.#of(family).map((b) => b.text);
    return new CniError(
      CNI_ERROR.ADDRESSES_EXHAUSTED,
      `no free IPv${family} address for node ${nodeName} in IPPool ${poolNames.join(", ")}`,
      `${why}; the node's blocks (${held.join(", ") || "none"}) are full`,
    );
  }

  /** Re-creates the object of a block that holds addresses here but has none. */
  async #recreate(block: OwnedBlock): Promise<void> {
    const { api, nodeName, logger } = this.#d;
    if (this.#closed) return;
    try {
      const turn = await api.claimTurn();
      block.obj = await api.create({
        metadata: {
          name: block.name,
          labels: { "ferry.dev/node": nodeName, "ferry.dev/pool": block.pool },
        },
        spec: {
          pool: block.pool,
          cidr: block.text,
          node: nodeName,
          allocations: this.#allocationsOf(block),
        },
      });
      this.#stats.writes++;
      const overlap = await this.#settleRecreated(block, turn);
      if (overlap) {
        block.lost =
          `block ${block.text} overlaps ${overlap}, claimed while its object was missing`;
        logger.error(
          "{why}: {n} pods here keep their addresses ({ips}), nothing new is allocated in it; " +
            "`ipam check` shows whether any address is held twice",
          { why: block.lost, n: block.local.held, ips: block.local.allocations().map((a) => a.ip) },
        );
      }
    } catch (e) {
      if (!isApi(e, (k) => k.isAlreadyExists)) throw e;
      const other = await api.get(block.name);
      if (other?.spec?.node === nodeName) {
        block.obj = other;
        this.#markDirty(block);
        return;
      }
      block.lost = `block ${block.text} now belongs to node ${other?.spec?.node}`;
      logger.error(
        "{why}, but {n} pods here still hold addresses in it ({ips}); they keep them until " +
          "deleted, and nothing new is allocated in it",
        { why: block.lost, n: block.local.held, ips: block.local.allocations().map((a) => a.ip) },
      );
    }
  }

  #allocationsOf(block: OwnedBlock): BlockAllocation[] {
    return block.local.allocations().map(({ ip, owner }) => {
      const recorded = this.#d.podOf?.(owner);
      const meta = this.#meta.get(ownerKey(owner)) ??
        (recorded &&
          { uid: recorded.uid ?? "", namespace: recorded.namespace, name: recorded.name });
      const a: BlockAllocation = {
        ip,
        podUID: meta?.uid ?? "",
        containerID: owner.containerId,
        ifname: owner.ifname,
      };
      if (meta?.namespace) a.namespace = meta.namespace;
      if (meta?.name) a.name = meta.name;
      return a;
    }).sort((a, b) => a.ip.localeCompare(b.ip));
  }

  #markDirty(block: OwnedBlock): void {
    if (block.lost || this.#closed) return;
    block.writer.kick();
  }

  /** One write of a block; a failure marks it dirty again and backs off. */
  async #writePass(block: OwnedBlock): Promise<void> {
    try {
      await this.#write(block);
      block.failures = 0;
    } catch (e) {
      block.writer.kick();
      block.failures++;
      const wait = Math.min(30_000, 250 * 2 ** Math.min(block.failures, 7));
      this.#d.logger.warn("writing block {cidr} failed ({error}); again in {ms} ms", {
        cidr: block.text,
        error: errorText(e),
        ms: wait,
      });
      await sleep(wait, this.#closing.signal, { unref: true });
    }
  }

  async #write(block: OwnedBlock): Promise<void> {
    const { api, nodeName } = this.#d;
    for (let attempt = 0; attempt < 16; attempt++) {
      if (this.#closed) return;
      const desired = this.#allocationsOf(block);
      const base = block.obj ?? await api.get(block.name);
      if (this.#closed) return;
      if (!base?.spec) {
        block.obj = undefined;
        if (block.local.held === 0) return await this.#forget(block, "its object was deleted");
        return await this.#recreate(block);
      }
      if (base.spec.node !== nodeName) {
        block.obj = base;
        return await this.#recreate(block);
      }
      if (sameAllocations(base.spec.allocations ?? [], desired)) {
        block.obj = base;
        return;
      }
      try {
        block.obj = await api.update({ ...base, spec: { ...base.spec, allocations: desired } });
        this.#stats.writes++;
        return;
      } catch (e) {
        if (isApi(e, (k) => k.isConflict)) {
          this.#stats.conflicts++;
          block.obj = undefined;
          continue;
        }
        if (isApi(e, (k) => k.isNotFound)) {
          block.obj = undefined;
          continue;
        }
        throw e;
      }
    }
    throw new Error(`block ${block.text}: still conflicting after 16 attempts`);
  }

  #checkEmpty(block: OwnedBlock): void {
    if (block.local.held > 0) return;
    if (block.lost) {
      // Another node's now: nothing of it is this node's to give back, only its files here.
      void this.#forget(block, `${block.lost}; no pod here holds an address of it any more`);
      return;
    }
    block.emptySince ??= Date.now();
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      this.#retire(block).catch((e) =>
        this.#d.logger.warn("giving back block {cidr} failed: {error}", {
          cidr: block.text,
          error: errorText(e),
        })
      );
    }, this.#d.releaseAfterMs + 10);
    Deno.unrefTimer(timer);
    this.#timers.add(timer);
  }

  async #retire(block: OwnedBlock): Promise<void> {
    if (this.#closed || this.#blocks.get(block.name) !== block) return;
    if (block.local.held > 0 || block.retiring || block.emptySince === undefined) return;
    if (Date.now() - block.emptySince < this.#d.releaseAfterMs) return;
    // The node's first block of a family stays (the VXLAN device's address comes from it).
    if (this.#usable(block.family)[0] === block) return;
    block.retiring = true;
    try {
      await block.writer.idle();
      if (this.#closed) {
        block.retiring = false;
        return;
      }
      const { api } = this.#d;
      for (let attempt = 0; attempt < 4; attempt++) {
        const obj = block.obj ?? await api.get(block.name);
        if (!obj?.metadata?.uid || obj.spec?.node !== this.#d.nodeName) break;
        try {
          await api.delete(block.name, obj.metadata.uid, obj.metadata.resourceVersion ?? "");
          break;
        } catch (e) {
          if (isApi(e, (k) => k.isNotFound)) break;
          if (!isApi(e, (k) => k.isConflict)) throw e;
          block.obj = undefined;
        }
      }
      await this.#forget(block, `empty for ${Math.round(this.#d.releaseAfterMs / 1000)} s`);
      this.#stats.released++;
    } catch (e) {
      block.retiring = false;
      this.#checkEmpty(block);
      throw e;
    }
  }

  /** Drops an empty block here: gateway off the bridge, directory removed. */
  async #forget(block: OwnedBlock, why: string): Promise<void> {
    this.#blocks.delete(block.name);
    await this.#d.gateways.remove(gatewayOf(block)).catch((e) =>
      this.#d.logger.warn("taking gateway {gw} off the bridge failed: {error}", {
        gw: gatewayOf(block),
        error: errorText(e),
      })
    );
    await Deno.remove(`${this.#dir}/${block.name}`, { recursive: true }).catch(() => {});
    this.#d.logger.info("gave back block {cidr} ({why})", { cidr: block.text, why });
  }

  /**
   * Releases the adopted allocations (see {@link BlockIpam.open}) whose pod is gone: `gone` asks
   * the API about the pod the block object named. An adopted allocation names a pod this node
   * never plugged (its block object was taken over: state lost, `spec.node` edited), so no DEL of
   * the runtime will ever release it here. Returns the addresses released.
   */
  async releaseAdoptedOfGonePods(
    gone: (pod: { uid: string; namespace: string; name: string }) => Promise<boolean>,
  ): Promise<string[]> {
    const released: string[] = [];
    for (const key of [...this.#adopted]) {
      const meta = this.#meta.get(key);
      if (!meta?.namespace || !meta.name || this.#closed) continue;
      if (!(await gone({ uid: meta.uid, namespace: meta.namespace, name: meta.name }))) continue;
      const [containerId, ifname] = key.split("\n");
      for (const family of [4, 6] as const) {
        const ip = await this.#release(family, { containerId, ifname });
        if (ip) released.push(ip);
      }
      this.#adopted.delete(key);
      this.#d.logger.info(
        "released the adopted allocation of {pod} ({ips}): the pod is gone",
        { pod: `${meta.namespace}/${meta.name}`, ips: released.join(", ") },
      );
    }
    return released;
  }

  /** Settles once every block's allocations are written (or `signal` aborts). */
  async flush(signal?: AbortSignal): Promise<void> {
    while (!signal?.aborted) {
      const busy = [...this.#blocks.values()].filter((b) => b.writer.busy);
      if (!busy.length) return;
      await Promise.race([...busy.map((b) => b.writer.idle()), pause(100)]);
    }
  }

  /** Counters. */
  stats(): BlockIpamStats {
    const blocks = [...this.#blocks.values()];
    return {
      ...this.#stats,
      blocks: blocks.filter((b) => !b.lost).map((b) => b.text),
      pending: blocks.filter((b) => b.writer.busy).length,
      lost: blocks.filter((b) => b.lost).map((b) => b.text),
      overlappingPools: [...this.#overlappingPools],
    };
  }

  /**
   * Stops writing and giving back (what is written stays; the next start picks up the rest). A
   * write already sent to the API finishes, and nothing is sent after it: no update, no block
   * re-created or deleted. Settles once no write is under way (which may take as long as the API
   * takes to answer the last request).
   */
  async close(): Promise<void> {
    this.#closed = true;
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
    this.#closing.abort();
    await Promise.all([...this.#blocks.values()].map((b) => b.writer.idle()));
  }
}

function gatewayOf(block: OwnedBlock): string {
  return `${formatIp(block.local.range.gateway)}/${block.cidr.prefix}`;
}

function leaseOf(block: OwnedBlock, ip: string): Lease {
  return { ip, prefix: block.cidr.prefix, gateway: formatIp(block.local.range.gateway) };
}

function sameAllocations(a: BlockAllocation[], b: BlockAllocation[]): boolean {
  if (a.length !== b.length) return false;
  const key = (x: BlockAllocation) =>
    `${x.ip}|${x.podUID}|${x.containerID}|${x.ifname}|${x.namespace ?? ""}|${x.name ?? ""}`;
  const set = new Set(a.map(key));
  return b.every((x) => set.has(key(x)));
}

/** Pools of the view whose CIDRs overlap another's, as `IPPool a overlaps IPPool b (cidr)`. */
export function overlappingPools(view: PoolView): string[] {
  const families: PoolFamily[] = [];
  for (const obj of view.pools?.() ?? []) {
    try {
      families.push(...parsePool(obj));
    } catch { /* a broken pool is reported where it is used */ }
  }
  const out: string[] = [];
  for (let i = 0; i < families.length; i++) {
    for (let j = i + 1; j < families.length; j++) {
      const [a, b] = [families[i], families[j]];
      if (a.pool !== b.pool && cidrsOverlap(a.cidr, b.cidr)) {
        out.push(
          `IPPool ${a.pool} (${formatCidr(a.cidr)}) overlaps IPPool ${b.pool} (${
            formatCidr(b.cidr)
          })`,
        );
      }
    }
  }
  return out.sort();
}
