/**
 * Reclaims the blocks of nodes that no longer exist (pool IPAM, and NAD networks served natively:
 * their `NetworkBlock`s): a deleted node's pods are gone with it, so its blocks go back to the
 * pool or the network's address space. One daemon at a time does it, the holder of a Lease;
 * a block is deleted only when its node is in neither the node watch nor the API (a GET answers
 * 404: a node that was just created, or that the watch has not delivered yet, keeps its blocks),
 * and with uid and resourceVersion preconditions, so a block that changed meanwhile stays.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { BlockApi, PoolView } from "../ipam/block_ipam.ts";
import { KubeApiError } from "../k8s/errors.ts";
import type { LeaderLease } from "../k8s/leader_lease.ts";
import type { NetworkBlockApi } from "../ipam/nad_network_ipam.ts";

/** What the reclaimer needs. */
export interface DeadNodeBlocksDeps {
  /** The Lease this daemon competes for. */
  lease: LeaderLease;
  /**
   * The watched blocks (and whether their watch has delivered its first list; until it has, and
   * without pool IPAM, the pool blocks are listed from storage through `api`).
   */
  pools?: PoolView & { synced: boolean };
  /** NAD networks' blocks (listed from storage at each look), when they are served natively. */
  networks?: Pick<NetworkBlockApi, "list" | "delete">;
  /** Whether the node watch knows `name` (and has delivered its first list). */
  nodeKnown: (name: string) => boolean;
  /** Whether the node watch has delivered its first list. */
  nodesSynced: () => boolean;
  /** Whether the API has a Node called `name` (a GET; 404 is false). */
  nodeExists: (name: string) => Promise<boolean>;
  /** The pool blocks' API; without it (a reclaimer of NAD networks' blocks only) none are looked at. */
  api?: BlockApi;
  /** How often it looks (ms). */
  intervalMs: number;
  /** Where to log. */
  logger: Logger;
}

/** Counters. */
export interface DeadNodeBlocksStats {
  /** Whether this daemon held the Lease at its last look. */
  leader: boolean;
  /** Blocks of dead nodes deleted by this daemon. */
  reclaimed: number;
}

/**
 * The reclaimer.
 *
 * @example
 * ```ts
 * const reclaimer = new DeadNodeBlocks({ lease, pools, nodeKnown, nodesSynced, nodeExists, api,
 *   intervalMs: 30_000, logger });
 * reclaimer.start();
 * ```
 */
export class DeadNodeBlocks {
  readonly #d: DeadNodeBlocksDeps;
  readonly #stats: DeadNodeBlocksStats = { leader: false, reclaimed: 0 };
  #timer?: ReturnType<typeof setInterval>;
  #running?: Promise<void>;

  /** Creates the reclaimer. */
  constructor(deps: DeadNodeBlocksDeps) {
    this.#d = deps;
  }

  /** Looks every interval. */
  start(): void {
    this.#timer = setInterval(() => void this.tick(), this.#d.intervalMs);
    Deno.unrefTimer(this.#timer as unknown as number);
  }

  /** One look (one at a time): take or renew the Lease, then reclaim what is dead. */
  tick(): Promise<void> {
    this.#running ??= this.#tick().catch((e) =>
      this.#d.logger.warn("reclaiming dead nodes' blocks failed: {error}", {
        error: e instanceof Error ? e.message : String(e),
      })
    ).finally(() => (this.#running = undefined));
    return this.#running;
  }

  async #tick(): Promise<void> {
    const { pools, lease, api, logger } = this.#d;
    if (!this.#d.nodesSynced()) return;
    this.#stats.leader = await lease.acquireOrRenew();
    if (!this.#stats.leader) return;
    // Pool blocks from their watch once it has listed; else (no pool IPAM on this node, as in
    // auto mode on a node with podCIDRs, or its watch not listed yet) from storage: whichever
    // daemon holds the Lease reclaims every kind. NAD networks' blocks are listed from storage.
    const poolBlocks = !api
      ? []
      : pools?.synced
      ? pools.blocks()
      : await this.#storedPoolBlocks(api);
    for (const b of poolBlocks) {
      if (this.#d.nodeKnown(b.node) || await this.#d.nodeExists(b.node)) continue;
      const obj = await api!.get(b.name);
      if (!obj?.spec || obj.spec.node !== b.node || !obj.metadata?.uid) continue;
      try {
        await api!.delete(b.name, obj.metadata.uid, obj.metadata.resourceVersion ?? "");
      } catch (e) {
        if (e instanceof KubeApiError && (e.isNotFound || e.isConflict)) continue;
        throw e;
      }
      this.#stats.reclaimed++;
      logger.info(
        "reclaimed block {cidr} of node {node}, which no longer exists ({n} allocations dropped)",
        { cidr: obj.spec.cidr, node: b.node, n: obj.spec.allocations?.length ?? 0 },
      );
    }
    await this.#reclaimNetworks();
  }

  /** The pool blocks in storage (none where the IPBlock CRD is not installed). */
  async #storedPoolBlocks(api: BlockApi): Promise<{ name: string; node: string }[]> {
    try {
      return (await api.list()).flatMap((o) =>
        o.metadata?.name && o.spec?.node ? [{ name: o.metadata.name, node: o.spec.node }] : []
      );
    } catch (e) {
      if (e instanceof KubeApiError && e.isNotFound) return [];
      throw e;
    }
  }

  /** Deletes the NAD networks' blocks whose node is gone (uid and resourceVersion preconditions). */
  async #reclaimNetworks(): Promise<void> {
    const { networks, logger } = this.#d;
    if (!networks) return;
    const dead = new Map<string, boolean>();
    for (const obj of await networks.list({})) {
      const node = obj.spec?.node;
      if (!node || !obj.metadata?.uid || !obj.metadata.name) continue;
      if (!dead.has(node)) {
        dead.set(node, !this.#d.nodeKnown(node) && !(await this.#d.nodeExists(node)));
      }
      if (!dead.get(node)) continue;
      try {
        await networks.delete(
          obj.metadata.name,
          obj.metadata.uid,
          obj.metadata.resourceVersion ?? "",
        );
      } catch (e) {
        if (e instanceof KubeApiError && (e.isNotFound || e.isConflict)) continue;
        throw e;
      }
      this.#stats.reclaimed++;
      logger.info(
        "reclaimed NAD block {cidr} of network {network} of node {node}, which no longer exists ({n} allocations dropped)",
        {
          cidr: obj.spec!.cidr,
          network: obj.spec!.network,
          node,
          n: obj.spec!.allocations?.length ?? 0,
        },
      );
    }
  }

  /** Counters. */
  stats(): DeadNodeBlocksStats {
    return { ...this.#stats };
  }

  /** Stops looking, and gives the Lease up if this daemon holds it (the next holder need not wait). */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.#running;
    if (this.#stats.leader) await this.#d.lease.release();
  }
}
