/**
 * The node's blocks of NAD networks' address spaces as the parts of `NadNetworkIpam`
 * (`nad_network_ipam.ts`) share them: the API of `NetworkBlock` objects, each block held (its
 * directory, its object as last read, its writer), who owns its addresses, the counters, the
 * timers and whether the IPAM is closing. The claims (`nad_block_claims.ts`), the claims ahead
 * of need (`nad_claims_ahead.ts`), the reconciliation with the API (`nad_block_sync.ts`), the
 * quarantine waits (`nad_quarantine_waits.ts`), the allocation in a range
 * (`nad_range_allocation.ts`) and static addresses (`nad_static_addresses.ts`) each take it as
 * their collaborator.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { DirtyLoop } from "../runtime/dirty_loop.ts";
import type { ClaimTurn } from "./block_api.ts";
import { type Cidr, formatCidr, formatIp, parseCidr, parseIp } from "./cidr.ts";
import type { PodMeta } from "./claim_protocol.ts";
import { LocalPool, type Owner, type PoolRange } from "./local_pool.ts";
import {
  networkBlockName,
  type NetworkBlockObject,
  networkBlockRange,
  rangeId,
  STATIC_RANGE,
} from "./nad_blocks.ts";
import type { NadRange } from "./nad_ipam.ts";
import { type IpamClock, SYSTEM_CLOCK } from "./quarantine.ts";

/** The API side of NAD blocks (`NetworkBlock` objects). */
export interface NetworkBlockApi {
  /** Creates a block; a name that exists throws `KubeApiError` with `isAlreadyExists`. */
  create(block: NetworkBlockObject): Promise<NetworkBlockObject>;
  /** Replaces a block; a stale resourceVersion throws `KubeApiError` with `isConflict`. */
  update(block: NetworkBlockObject): Promise<NetworkBlockObject>;
  /** Reads a block; undefined when it does not exist. */
  get(name: string): Promise<NetworkBlockObject | undefined>;
  /** Deletes a block if its uid and resourceVersion still match (409 otherwise). */
  delete(name: string, uid: string, resourceVersion: string): Promise<void>;
  /**
   * The blocks of a space, or of a node, read from the server's storage; with `cached`, any
   * recent version will do (a real server answers from its watch cache, without reading and
   * decoding every block from etcd).
   */
  list(
    filter: { network?: string; node?: string; cached?: boolean },
  ): Promise<NetworkBlockObject[]>;
  /** Takes a turn to claim (see {@link ClaimTurn}). */
  claimTurn(): Promise<ClaimTurn>;
}

/**
 * A block's writer waits this long after a change before it writes (ms): during a burst of ADDs
 * each write of the object (and its fan-out to every node's watch) carries many allocations
 * instead of one or two (`bench:multinet`: a 200-pod burst with a NAD 1.40x the default
 * network's time without it, 1.21x with 200 ms).
 */
export const WRITE_DELAY_MS = 250;

/** What `NadNetworkIpam` (`nad_network_ipam.ts`) needs. */
export interface NadNetworkIpamDeps {
  /** This node. */
  nodeName: string;
  /** The API. */
  api: NetworkBlockApi;
  /** The daemon's state directory (blocks live under `ipam/networks/`). */
  stateDir: string;
  /** How long a block stays empty before it is given back (ms). */
  releaseAfterMs: number;
  /** How long a released address stays out of use (ms). */
  reuseDelayMs?: number;
  /** The clock of that quarantine and of the waits for it (the system's by default). */
  clock?: IpamClock;
  /**
   * How long a block's writer waits after a change before it writes the block (ms; default
   * {@link WRITE_DELAY_MS}): the changes of a burst of ADDs and DELs meanwhile go in the same
   * write. Uniqueness never waits for it: a block is this node's alone from its claim, and its
   * allocations are on disk before an ADD answers; only readers of the object (`ipam check`,
   * the sweep, other nodes' reclaim) see them that much later.
   */
  writeDelayMs?: number;
  /**
   * Spread of the start of claims ahead of need (ms; default
   * {@link import("./nad_claims_ahead.ts").AHEAD_SPREAD_MS}).
   */
  aheadSpreadMs?: number;
  /** Where to log. */
  logger: Logger;
  /**
   * The live pod another IPAM (whereabouts, before the migration) gave `ip`, if any: such an
   * address is set aside (held for that pod, recorded in its block) instead of handed out, and
   * released by the sweep once that pod is gone.
   */
  foreign?: (ip: string) => { namespace: string; name: string } | undefined;
  /**
   * Whether an attachment record names `owner` (the daemon's store). At open no ADD of this
   * process runs yet, so an allocation no record names was made by an ADD that died with the
   * daemon before it recorded (SIGKILL mid-ADD): its pod is asked about by the sweep when the
   * block object names it, else it is released (quarantined by `reuseDelayMs`).
   */
  recorded?: (owner: Owner) => boolean;
}

/** A NAD block this node holds. */
export interface NadBlock {
  /** Its object's name ({@link networkBlockName}). */
  name: string;
  /** Its address space. */
  network: string;
  /** The range it was claimed for ({@link rangeId}, or {@link STATIC_RANGE}). */
  range: string;
  /** Its CIDR. */
  cidr: Cidr;
  /** Its addresses on disk. */
  local: LocalPool;
  /** The object as last read or written. */
  obj?: NetworkBlockObject;
  /** Writes the block's allocations; kicked on every change. */
  writer: DirtyLoop;
  /** Since when it holds no address. */
  emptySince?: number;
  /** Failed writes in a row. */
  failures: number;
  /**
   * Why the block is not this node's any more, when it is not (`recreateObject`): its pods keep
   * their addresses until their DEL, nothing new is allocated in it, its object is not written,
   * and it is dropped here once empty.
   */
  lost?: string;
}

/** What a block's directory records of it (`.block.json`). */
export interface NadBlockMeta {
  network: string;
  range: string;
  cidr: string;
  pool: { subnet: string; start: string; end: string; excluded: [string, string][] };
}

/** The container ID prefix of an address set aside for another IPAM's pod (whereabouts'). */
export const SET_ASIDE = "whereabouts-";

/** The key of a range of a space (its claim under way, its quarantine waits). */
export function claimKey(space: string, range: NadRange): string {
  return `${space}\n${rangeId(range)}`;
}

/** Whether `cidr` is a single address. */
export function isSingle(cidr: Cidr): boolean {
  return cidr.prefix === (cidr.network.family === 4 ? 32 : 128);
}

/** The node's NAD blocks and what the parts of the NAD IPAM share of them. */
export class NodeNadBlocks {
  /** The IPAM's collaborators. */
  readonly d: NadNetworkIpamDeps;
  /** The blocks held, by name. */
  readonly blocks = new Map<string, NadBlock>();
  /** Who each owner's allocation is for (by `ownerKey`). */
  readonly meta = new Map<string, PodMeta>();
  /** Owners whose addresses were adopted from block objects at start (state lost here). */
  readonly adopted = new Set<string>();
  /** Timers (give-backs, writes' back-offs), cleared at close. */
  readonly timers = new Set<ReturnType<typeof setTimeout>>();
  /** Counters for `/v1/stats`. */
  readonly stats = { claims: 0, claimsAhead: 0, claimRaces: 0, released: 0, writes: 0 };
  /** Set at close: nothing more is written, claimed ahead or given back. */
  closed = false;
  readonly #write: (block: NadBlock) => Promise<void>;

  /** The blocks of `deps`; `write` is one pass of a block's writer. */
  constructor(deps: NadNetworkIpamDeps, write: (block: NadBlock) => Promise<void>) {
    this.d = deps;
    this.#write = write;
  }

  /** Where the blocks' directories are. */
  get dir(): string {
    return `${this.d.stateDir}/ipam/networks`;
  }

  /** The quarantine's clock. */
  get clock(): IpamClock {
    return this.d.clock ?? SYSTEM_CLOCK;
  }

  /** Opens (creating) a block's directory and records the block as this node's. */
  async open(
    network: string,
    range: string,
    cidr: Cidr,
    pool: PoolRange,
    obj: NetworkBlockObject | undefined,
  ): Promise<NadBlock> {
    const name = networkBlockName(network, cidr);
    const dir = `${this.dir}/${name}`;
    await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
    const fam = cidr.network.family;
    const t = (v: bigint) => formatIp({ family: fam, value: v });
    const meta: NadBlockMeta = {
      network,
      range,
      cidr: formatCidr(cidr),
      pool: {
        subnet: formatCidr(pool.subnet),
        start: formatIp(pool.start),
        end: formatIp(pool.end),
        excluded: (pool.excluded ?? []).map((x) => [t(x.start), t(x.end)]),
      },
    };
    await Deno.writeTextFile(`${dir}/.block.json`, JSON.stringify(meta));
    const held: NadBlock = {
      name,
      network,
      range,
      cidr,
      local: await LocalPool.open(dir, pool, {
        reuseDelayMs: this.d.reuseDelayMs,
        clock: this.d.clock,
      }),
      obj,
      writer: undefined!,
      failures: 0,
    };
    held.writer = new DirtyLoop(
      () => this.#write(held),
      () => !this.closed && this.blocks.get(name) === held,
    );
    this.blocks.set(name, held);
    return held;
  }

  /** Has the block's object written (not for a lost block, nor once closed). */
  kick(held: NadBlock): void {
    if (!this.closed && !held.lost) held.writer.kick();
  }

  /** Runs `fn` after `ms` on an unref'd timer that close clears. */
  after(ms: number, fn: () => void): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      fn();
    }, ms);
    Deno.unrefTimer(timer);
    this.timers.add(timer);
  }
}

/** The pool of a block as its directory records it. */
export function poolOfMeta(meta: NadBlockMeta): PoolRange {
  const start = parseIp(meta.pool.start);
  return {
    subnet: parseCidr(meta.pool.subnet),
    start,
    end: parseIp(meta.pool.end),
    gateway: meta.range === STATIC_RANGE
      ? { family: start.family, value: start.value ^ 1n }
      : parseCidr(meta.pool.subnet).network,
    excluded: meta.pool.excluded.map(([s, e]) => ({
      start: parseIp(s).value,
      end: parseIp(e).value,
    })),
  };
}

/** The pool of a block known only from its object (its `range` is a {@link rangeId}). */
export function poolOfObject(obj: NetworkBlockObject): PoolRange | undefined {
  const spec = obj.spec!;
  try {
    const cidr = parseCidr(spec.cidr);
    if (spec.range === STATIC_RANGE) {
      return {
        subnet: cidr,
        start: cidr.network,
        end: cidr.network,
        gateway: { family: cidr.network.family, value: cidr.network.value ^ 1n },
      };
    }
    const m = /^(\S+) (\S+?)-(\S+?)(?: excluding (\S+))?$/.exec(spec.range);
    if (!m) return undefined;
    const range: NadRange = {
      cidr: parseCidr(m[1]),
      start: parseIp(m[2]),
      end: parseIp(m[3]),
      excluded: (m[4] ? m[4].split(",") : []).map((x) => {
        const [s, e] = x.split("-");
        return { start: parseIp(s).value, end: parseIp(e ?? s).value };
      }),
    };
    return networkBlockRange(range, cidr);
  } catch {
    return undefined;
  }
}
