/**
 * The node's blocks of `ipam.mode: pool` as the parts of `BlockIpam` (`block_ipam.ts`)
 * share them: each block held (its directory, its object as last read, its writer), who owns its
 * addresses, the counters, and whether the IPAM is closing. The allocator (`block_ipam.ts`), the
 * claims (`block_claims.ts`) and the reconciliation with the API (`block_sync.ts`) each take it as
 * their collaborator.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { PodRef } from "../../lib/cni/args.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { Lease } from "./allocator.ts";
import { type Cidr, formatCidr, formatIp } from "./cidr.ts";
import {
  blockName,
  blockRange,
  type IpBlockObject,
  parsePool,
  type PoolFamily,
} from "./ip_pools.ts";
import { LocalPool, type Owner, type PoolRange } from "./local_pool.ts";
import { DirtyLoop } from "../runtime/dirty_loop.ts";
import type { BlockApi, PoolView } from "./block_api.ts";
import type { IpamClock } from "./quarantine.ts";
import type { PodMeta } from "./claim_protocol.ts";

/** What `BlockIpam` (`block_ipam.ts`) needs. */
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
  /** The clock of that quarantine and of the waits for it (the system's by default). */
  clock?: IpamClock;
  /** Where to log. */
  logger: Logger;
  /**
   * The pod an owner's attachment record names (the node's durable record of it): a block's
   * allocations name their pods from it when nothing else here knows them (after a restart whose
   * block object was lost).
   */
  podOf?: (owner: Owner) => PodRef | undefined;
}

/** A block this node holds. */
export interface OwnedBlock {
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

/** Waits `ms`. */
export const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A block's whole range (no exclusions). */
export function plainRange(cidr: Cidr): PoolRange {
  return blockRange(cidr) ?? (() => {
    throw new Error(`block ${formatCidr(cidr)} hands out nothing`);
  })();
}

/** A block's gateway as `address/prefix`. */
export function gatewayOf(block: OwnedBlock): string {
  return `${formatIp(block.local.range.gateway)}/${block.cidr.prefix}`;
}

/** The lease of `ip` in a block. */
export function leaseOf(block: OwnedBlock, ip: string): Lease {
  return { ip, prefix: block.cidr.prefix, gateway: formatIp(block.local.range.gateway) };
}

/** The node's blocks and what the parts of the block IPAM share of them. */
export class NodeBlocks {
  /** The IPAM's collaborators. */
  readonly d: BlockIpamDeps;
  /** The blocks held, by name. */
  readonly blocks = new Map<string, OwnedBlock>();
  /** Who each owner's allocation is for (by {@link ownerKey}). */
  readonly meta = new Map<string, PodMeta>();
  /** Owners whose addresses were adopted from block objects at start (no record here). */
  readonly adopted = new Set<string>();
  /** Blocks being claimed or adopted now (their watch events are this node's own). */
  readonly claimingNames = new Set<string>();
  /** Aborted at close: ends the back-off sleeps of writers early. */
  readonly closing = new AbortController();
  /** Counters for `/v1/stats`. */
  readonly stats = {
    claims: 0,
    claimRaces: 0,
    released: 0,
    writes: 0,
    conflicts: 0,
    overlapsYielded: 0,
  };
  /** Pools that overlap another pool, as last seen by a claim. */
  overlappingPools: string[] = [];
  /** Set at close: nothing more is written, claimed or given back. */
  closed = false;
  readonly #write: (block: OwnedBlock) => Promise<void>;

  /** The blocks of `deps`; `write` writes one block's object (its writer's pass). */
  constructor(deps: BlockIpamDeps, write: (block: OwnedBlock) => Promise<void>) {
    this.d = deps;
    this.#write = write;
  }

  /** Where the blocks' directories are. */
  get dir(): string {
    return `${this.d.stateDir}/ipam/blocks`;
  }

  /** Opens (creating) a block's directory and records the block as this node's. */
  async openBlock(pool: string, cidr: Cidr, obj: IpBlockObject | undefined): Promise<OwnedBlock> {
    const name = blockName(cidr);
    const dir = `${this.dir}/${name}`;
    await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
    const text = formatCidr(cidr);
    await Deno.writeTextFile(`${dir}/.block.json`, JSON.stringify({ pool, cidr: text }));
    const range = this.rangeOf(pool, cidr);
    const block: OwnedBlock = {
      name,
      pool,
      cidr,
      text,
      family: cidr.network.family,
      local: await LocalPool.open(dir, range, {
        reuseDelayMs: this.d.reuseDelayMs,
        clock: this.d.clock,
      }),
      obj,
      writer: undefined!,
      retiring: false,
      claimedAt: Date.now(),
      failures: 0,
    };
    block.writer = new DirtyLoop(
      () => this.#write(block),
      () => !this.closed && this.blocks.get(block.name) === block,
    );
    this.blocks.set(name, block);
    return block;
  }

  /** The range of a block: the pool's exclusions apply while the pool exists. */
  rangeOf(pool: string, cidr: Cidr): PoolRange {
    const obj = this.d.view.pool(pool);
    let family: PoolFamily | undefined;
    try {
      family = obj ? parsePool(obj).find((f) => f.family === cidr.network.family) : undefined;
    } catch { /* a broken pool: no exclusions known */ }
    return blockRange(cidr, family?.excluded ?? []) ?? plainRange(cidr);
  }

  /** The blocks of `family`, oldest claim first. */
  of(family: 4 | 6): OwnedBlock[] {
    return [...this.blocks.values()].filter((b) => b.family === family)
      .sort((a, b) => a.claimedAt - b.claimedAt);
  }

  /**
   * The blocks new addresses come from: not being given back, not lost, and of a pool that exists
   * and that the node's config names (a block of a pool it no longer uses keeps its addresses until they are
   * released, then is given back).
   */
  usable(family: 4 | 6): OwnedBlock[] {
    return this.of(family).filter((b) =>
      !b.retiring && !b.lost && this.d.poolNames.includes(b.pool) && !!this.d.view.pool(b.pool)
    );
  }

  /** Has the block's object written (not for a lost block, nor once closed). */
  markDirty(block: OwnedBlock): void {
    if (block.lost || this.closed) return;
    block.writer.kick();
  }

  /** The code-101 error for `family`, saying `why` and the blocks held. */
  exhausted(family: 4 | 6, why: string): CniError {
    const { nodeName, poolNames } = this.d;
    const held = this.of(family).map((b) => b.text);
    return new CniError(
      CNI_ERROR.ADDRESSES_EXHAUSTED,
      `no free IPv${family} address for node ${nodeName} in IPPool ${poolNames.join(", ")}`,
      `${why}; the node's blocks (${held.join(", ") || "none"}) are full`,
    );
  }
}
