/**
 * Ferry's IP pools and every node's blocks as the watches of `IPPool` and `IPBlock` objects
 * deliver them (`ipam.mode: pool`). Blocks are kept stripped to name, CIDR, owner and pool: their
 * allocations change with every ADD somewhere in the cluster and matter only to the owning node,
 * which reads its own blocks itself. Listeners hear of changes that move routes or the masquerade
 * table (a pool's spec, a block appearing, moving or going), not of allocations. Pure: the watches
 * feed it. Pools for NAD networks (`spec.use: networks`, named by NADs' `ferry` IPAM) are not the
 * default network's: {@link PoolMap.pool}, {@link PoolMap.pools} and {@link PoolMap.poolCidrs}
 * leave them out (no node claims blocks of them, they are neither routed nor pod space);
 * {@link PoolMap.allPools} has them.
 *
 * @module
 */
import type { BlockSummary, PoolView } from "./block_ipam.ts";
import type { IpBlockObject, IpPoolObject } from "./ip_pools.ts";
import { NETWORKS_USE } from "./nad_ferry_ipam.ts";

/** Whether `obj` is a pool of the default network's pods (not one for NAD networks). */
const forPods = (obj: IpPoolObject) => obj.spec?.use !== NETWORKS_USE;

/**
 * The map.
 *
 * @example
 * ```ts
 * const pools = new PoolMap();
 * pools.onChange(() => reconcile());
 * pools.upsertBlock(blockObject);
 * pools.blocksByNode().get("n2"); // ["10.244.3.0/26"]
 * ```
 */
export class PoolMap implements PoolView {
  readonly #pools = new Map<string, IpPoolObject>();
  readonly #blocks = new Map<string, BlockSummary>();
  readonly #listeners = new Set<() => void>();
  readonly #removed = new Set<(name: string) => void>();
  readonly #upserted = new Set<(block: BlockSummary) => void>();
  #synced = false;

  /** Records a pool seen by the watch. */
  upsertPool(obj: IpPoolObject): void {
    const name = obj.metadata?.name ?? "";
    const before = this.#pools.get(name);
    this.#pools.set(name, obj);
    if (JSON.stringify(before?.spec) !== JSON.stringify(obj.spec)) this.#changed();
  }

  /** Forgets a deleted pool. */
  removePool(obj: IpPoolObject): void {
    if (this.#pools.delete(obj.metadata?.name ?? "")) this.#changed();
  }

  /** Records a block seen by the watch (stripped). */
  upsertBlock(obj: IpBlockObject): void {
    const name = obj.metadata?.name ?? "";
    const block: BlockSummary = {
      name,
      cidr: obj.spec?.cidr ?? "",
      node: obj.spec?.node ?? "",
      pool: obj.spec?.pool ?? "",
    };
    const before = this.#blocks.get(name);
    this.#blocks.set(name, block);
    if (JSON.stringify(before) !== JSON.stringify(block)) {
      for (const fn of this.#upserted) fn(block);
      this.#changed();
    }
  }

  /** Forgets a deleted block. */
  removeBlock(obj: IpBlockObject): void {
    const name = obj.metadata?.name ?? "";
    if (!this.#blocks.delete(name)) return;
    for (const fn of this.#removed) fn(name);
    this.#changed();
  }

  /** Calls `fn` with every block added or changed from now on. */
  onBlockUpserted(fn: (block: BlockSummary) => void): void {
    this.#upserted.add(fn);
  }

  /** Calls `fn` with the name of every block deleted from now on. */
  onBlockRemoved(fn: (name: string) => void): void {
    this.#removed.add(fn);
  }

  /** Marks both first lists delivered. */
  markSynced(): void {
    this.#synced = true;
    this.#changed();
  }

  /** Whether both watches have delivered their first list. */
  get synced(): boolean {
    return this.#synced;
  }

  /** The pool of the default network called `name`. */
  pool(name: string): IpPoolObject | undefined {
    const obj = this.#pools.get(name);
    return obj && forPods(obj) ? obj : undefined;
  }

  /** Every pool of the default network. */
  pools(): IpPoolObject[] {
    return [...this.#pools.values()].filter(forPods);
  }

  /** Every pool, those of NAD networks too. */
  allPools(): IpPoolObject[] {
    return [...this.#pools.values()];
  }

  /** Every default network pool's CIDRs (pod address space: never masqueraded between pods). */
  poolCidrs(): string[] {
    return this.pools().flatMap((p) => p.spec?.cidrs ?? []);
  }

  /** Every block. */
  blocks(): BlockSummary[] {
    return [...this.#blocks.values()].filter((b) => b.cidr && b.node);
  }

  /** Each node's block CIDRs, sorted. */
  blocksByNode(): Map<string, string[]> {
    const byNode = new Map<string, string[]>();
    for (const b of this.blocks()) {
      const list = byNode.get(b.node) ?? [];
      list.push(b.cidr);
      byNode.set(b.node, list);
    }
    for (const list of byNode.values()) list.sort();
    return byNode;
  }

  /** Calls `fn` after every change; returns the function that stops it. */
  onChange(fn: () => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  #changed(): void {
    for (const fn of this.#listeners) fn();
  }
}
