/**
 * Blocks as the cluster knows them, apart from any node: the API side of `IPBlock` objects
 * ({@link BlockApi}, claims serialized on one counter: {@link ClaimTurn}) and what the watches
 * show of pools and blocks ({@link PoolView}). Implemented over the API by `pool_api.ts` and
 * `pool_map.ts`; used by the node's blocks (`block_ipam.ts`) and the dead nodes' reclaim.
 *
 * @module
 */
import { cidrsOverlap, formatCidr } from "./cidr.ts";
import { type IpBlockObject, type IpPoolObject, parsePool, type PoolFamily } from "./ip_pools.ts";

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
