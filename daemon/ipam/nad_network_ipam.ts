/**
 * Cluster-wide IPAM for NAD networks (whereabouts configs served natively): an address of a NAD
 * network's space ({@link spaceKey}) is live on at most one pod of the cluster. It is the pool
 * IPAM's design ({@link import("./block_ipam.ts").BlockIpam}) brought to every network:
 *
 * - **Claiming**: a node allocates only inside `NetworkBlock` objects that name it. When its
 *   blocks of a range are full (or it has none), it picks a block of the range no block of the
 *   space overlaps ({@link nextFreeNetworkBlock}, sized to the range: see `nad_blocks.ts`),
 *   creates its object (the name is the space's hash and the CIDR: of two nodes claiming one
 *   block exactly one create succeeds), and settles the claim on the cluster's claim counter as
 *   pool blocks are ({@link ClaimTurn}: of two overlapping blocks at most one is used, the one
 *   committed first). Claims are rare; allocating is in memory.
 * - **Allocating**: one file per address in the block's directory under
 *   `<stateDir>/ipam/networks/` ({@link LocalPool}), written before the ADD answers; the object's
 *   `allocations` follow behind (one writer per block coalescing changes, resourceVersion as
 *   precondition). A pod's static address (`ips` of its selection) is reserved in the same
 *   space: in the node's own block when one holds it, else as a single-address block of its own;
 *   an address another pod or another node's block holds is refused.
 * - **Giving back**: a block empty for `releaseAfterMs` is deleted (uid and resourceVersion
 *   preconditions) and its directory removed; a single address's block (a static address, a
 *   small range's) once its quarantine (`reuseDelayMs`) is over, so another node may use it.
 * - **At start** the node's blocks in the API and its directories are reconciled: a directory
 *   is the newer truth (the object is brought in line), an object without one (state lost) has its
 *   allocations adopted so nothing it records is handed out twice, a directory without an object
 *   that still holds addresses has its object written again.
 *
 * The parts: the node's blocks they share (`nad_node_blocks.ts`), claims (`nad_block_claims.ts`,
 * over the claim protocol shared with pool blocks, `claim_protocol.ts`), claims ahead of need
 * (`nad_claims_ahead.ts`), the allocation in a range (`nad_range_allocation.ts`), static
 * addresses (`nad_static_addresses.ts`), the quarantine waits (`nad_quarantine_waits.ts`) and the
 * reconciliation with the API (`nad_block_sync.ts`); this module is the IPAM a NAD's ADD and DEL
 * call.
 *
 * @module
 */
import type { PodRef } from "../../lib/cni/args.ts";
import { formatCidr, formatIp } from "./cidr.ts";
import { ownerKey, releaseAdoptedOfGonePods } from "./claim_protocol.ts";
import type { Owner } from "./local_pool.ts";
import { NadBlockClaims } from "./nad_block_claims.ts";
import { NadBlockSync } from "./nad_block_sync.ts";
import { NadClaimsAhead } from "./nad_claims_ahead.ts";
import { type NadIpamConfig, type NadRoute, spaceKey } from "./nad_ipam.ts";
import { type NadNetworkIpamDeps, NodeNadBlocks } from "./nad_node_blocks.ts";
import { NadQuarantineWaits } from "./nad_quarantine_waits.ts";
import { NadRangeAllocation } from "./nad_range_allocation.ts";
import { reserveStatic } from "./nad_static_addresses.ts";
import { type AllocationWait, waitOutQuarantine } from "./quarantine.ts";

export type { NadNetworkIpamDeps, NetworkBlockApi } from "./nad_node_blocks.ts";
export { WRITE_DELAY_MS } from "./nad_node_blocks.ts";
export { AHEAD_SPREAD_MS } from "./nad_claims_ahead.ts";

/** The IPAM part of an ADD's result on a NAD network. */
export interface NadIpamResult {
  /** The addresses (`address/prefix`), with the gateway of their range. */
  ips: { address: string; gateway?: string }[];
  /** The config's routes. */
  routes: NadRoute[];
  /** The config's DNS. */
  dns?: Record<string, unknown>;
}

/** Counters, for `/v1/stats`. */
export interface NadNetworkIpamStats {
  /** Blocks held now, as `space cidr`. */
  blocks: string[];
  /** Blocks claimed since start. */
  claims: number;
  /** Of those, claimed ahead of need (this node's blocks of the range down to half a block free). */
  claimsAhead: number;
  /** Claims lost to another node or yielded to an overlapping block. */
  claimRaces: number;
  /** Blocks given back since start. */
  released: number;
  /** Block updates written. */
  writes: number;
}

/**
 * One node's share of every NAD network's address space.
 *
 * @example
 * ```ts
 * const ipam = await NadNetworkIpam.open({ nodeName: "n1", api, stateDir, releaseAfterMs: 300_000,
 *   logger });
 * const { ips } = await ipam.add(parseWhereabouts(conf.ipam, where), "default/macvlan-a",
 *   { containerId: "c1", ifname: "net1" });
 * ```
 */
export class NadNetworkIpam {
  readonly #b: NodeNadBlocks;
  readonly #sync: NadBlockSync;
  readonly #claims: NadBlockClaims;
  readonly #waits: NadQuarantineWaits;
  readonly #ranges: NadRangeAllocation;

  private constructor(deps: NadNetworkIpamDeps) {
    this.#b = new NodeNadBlocks(deps, (held) => this.#sync.writePass(held));
    this.#sync = new NadBlockSync(this.#b);
    this.#waits = new NadQuarantineWaits(this.#b);
    this.#claims = new NadBlockClaims(
      this.#b,
      (space, range, listed) => this.#waits.noteEmptyElsewhere(space, range, listed),
      (held) => this.#sync.checkEmpty(held),
    );
    this.#ranges = new NadRangeAllocation(
      this.#b,
      this.#claims,
      new NadClaimsAhead(this.#b, this.#claims),
    );
  }

  /** Reconciles the node's blocks in the API with its directories and returns the IPAM. */
  static async open(deps: NadNetworkIpamDeps): Promise<NadNetworkIpam> {
    const ipam = new NadNetworkIpam(deps);
    await ipam.#sync.reconcile();
    await ipam.#unrecorded();
    return ipam;
  }

  /** Allocations left by ADDs that died before they recorded (see `recorded`). */
  async #unrecorded(): Promise<void> {
    const { recorded, logger } = this.#b.d;
    if (!recorded) return;
    for (const { ip, owner } of this.allocations()) {
      const key = ownerKey(owner);
      if (recorded(owner) || this.#b.adopted.has(key)) continue;
      const meta = this.#b.meta.get(key);
      if (meta?.namespace && meta.name) {
        this.#b.adopted.add(key); // released by the sweep once its pod is gone
        continue;
      }
      await this.release(owner);
      logger.warn("released NAD address {ip} of {owner}: no attachment records it (its ADD died)", {
        ip,
        owner: `${owner.containerId}/${owner.ifname}`,
      });
    }
  }

  /**
   * Allocates one address from each range of `config` for `owner` (the same ones again for an
   * owner that holds them), after reserving `statics` (`address/prefix`, a pod's `ips`): a
   * family a static address covers gets no address of a range. `network` names the network in
   * errors (the NAD, `namespace/name`). When a range's only free addresses are in the reuse
   * quarantine (on this node, or in blocks other nodes are about to give back), or a static
   * address is, it waits for them to come out as `wait` allows (see `quarantine.ts`).
   *
   * @throws {CniError} 101 naming the network and the range when the range is full (before the
   * deadline of `wait`); 7 when a static address is held by another pod or lies in another node's
   * block; 11 when a static address is still in quarantine at the deadline.
   */
  async add(
    config: NadIpamConfig,
    network: string,
    owner: Owner,
    pod?: PodRef,
    statics: string[] = [],
    wait?: AllocationWait,
  ): Promise<NadIpamResult> {
    const ips: NadIpamResult["ips"] = [];
    // A repeated ADD gets the same addresses; a failed one gives back only what it took.
    const before = new Set(this.addressesOf(owner));
    this.#b.meta.set(ownerKey(owner), {
      uid: pod?.uid ?? "",
      namespace: pod?.namespace,
      name: pod?.name,
    });
    try {
      const families = new Set<number>();
      for (const text of statics) {
        const ip = await reserveStatic(this.#b, this.#waits, config, network, owner, text, wait);
        families.add(ip.family);
        const gw = config.ranges.find((r) => r.gateway?.family === ip.family)?.gateway;
        ips.push({ address: text, ...(gw ? { gateway: formatIp(gw) } : {}) });
      }
      for (const range of config.ranges) {
        if (families.has(range.cidr.network.family)) continue;
        const space = spaceKey(config, range);
        const ip = await waitOutQuarantine(
          () => this.#ranges.allocate(config, range, network, owner),
          () => this.#waits.endsAt(space, range),
          wait,
          this.#b.clock,
        );
        ips.push({
          address: `${ip}/${range.cidr.prefix}`,
          ...(range.gateway ? { gateway: formatIp(range.gateway) } : {}),
        });
      }
    } catch (e) {
      for (const b of [...this.#b.blocks.values()]) {
        const ip = b.local.addressOf(owner);
        if (!ip || before.has(ip)) continue;
        await b.local.release(owner).catch(() => {});
        this.#b.kick(b);
        this.#sync.checkEmpty(b);
      }
      throw e;
    }
    for (const a of config.addresses) ips.push(a);
    return { ips, routes: config.routes, ...(config.dns ? { dns: config.dns } : {}) };
  }

  /** Releases every address `owner` holds on NAD networks; returns them. */
  async release(owner: Owner): Promise<string[]> {
    const out: string[] = [];
    for (const b of [...this.#b.blocks.values()]) {
      if (!b.local.addressOf(owner)) continue;
      const ip = await b.local.release(owner);
      if (ip) out.push(ip);
      this.#b.kick(b);
      this.#sync.checkEmpty(b);
    }
    this.#b.meta.delete(ownerKey(owner));
    this.#b.adopted.delete(ownerKey(owner));
    return out;
  }

  /**
   * Releases the adopted allocations (see {@link NadNetworkIpam.open}) whose pod is gone: `gone`
   * asks the API about the pod the block object named. Such an allocation has no attachment record
   * on this node (its state was lost), so no DEL will ever release it. Returns the addresses.
   */
  releaseAdoptedOfGonePods(
    gone: (pod: { uid: string; namespace: string; name: string }) => Promise<boolean>,
  ): Promise<string[]> {
    return releaseAdoptedOfGonePods(
      this.#b,
      gone,
      (owner) => this.release(owner),
      (pod, ips) =>
        this.#b.d.logger.info(
          "released the adopted NAD allocation of {pod} ({ips}): the pod is gone",
          { pod: `${pod.namespace}/${pod.name}`, ips: ips.join(", ") },
        ),
    );
  }

  /** The addresses `owner` holds on NAD networks. */
  addressesOf(owner: Owner): string[] {
    return [...this.#b.blocks.values()].flatMap((b) => {
      const ip = b.local.addressOf(owner);
      return ip ? [ip] : [];
    });
  }

  /** Every allocation held on this node: space, address, owner. */
  allocations(): { network: string; ip: string; owner: Owner }[] {
    return [...this.#b.blocks.values()].flatMap((b) =>
      b.local.allocations().map((a) => ({ network: b.network, ...a }))
    );
  }

  /**
   * Every allocation held on this node with its block's CIDR, and whether its owner was adopted
   * (from a block object, or set aside for another IPAM's pod: no record here by design). For the
   * node's self-check.
   */
  held(): { network: string; cidr: string; ip: string; owner: Owner; adopted: boolean }[] {
    return [...this.#b.blocks.values()].flatMap((b) =>
      b.local.allocations().map((a) => ({
        network: b.network,
        cidr: formatCidr(b.cidr),
        ...a,
        adopted: this.#b.adopted.has(ownerKey(a.owner)),
      }))
    );
  }

  /** Settles once every block's allocations are written (or `signal` aborts). */
  async flush(signal?: AbortSignal): Promise<void> {
    while (!signal?.aborted) {
      const busy = [...this.#b.blocks.values()].filter((b) => b.writer.busy);
      if (!busy.length) return;
      await Promise.race([
        ...busy.map((b) => b.writer.idle()),
        new Promise((r) => setTimeout(r, 50)),
      ]);
    }
  }

  /** Counters. */
  stats(): NadNetworkIpamStats {
    return {
      ...this.#b.stats,
      blocks: [...this.#b.blocks.values()].map((b) => `${b.network} ${formatCidr(b.cidr)}`),
    };
  }

  /** Stops writing and giving back; settles once no write is under way. */
  async close(): Promise<void> {
    this.#b.closed = true;
    for (const t of this.#b.timers) clearTimeout(t);
    this.#b.timers.clear();
    await this.#claims.close();
    await Promise.all([...this.#b.blocks.values()].map((b) => b.writer.idle()));
  }
}
