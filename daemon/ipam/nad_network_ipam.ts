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
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { PodRef } from "../../lib/cni/args.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import { KubeApiError } from "../k8s/errors.ts";
import { DirtyLoop } from "../runtime/dirty_loop.ts";
import type { ClaimTurn } from "./block_ipam.ts";
import {
  type Cidr,
  cidrContains,
  cidrsOverlap,
  formatCidr,
  formatIp,
  parseCidr,
  parseIp,
} from "./cidr.ts";
import type { BlockAllocation } from "./ip_pools.ts";
import { LocalPool, type Owner, type PoolRange } from "./local_pool.ts";
import {
  mayClaimAhead,
  networkBlockName,
  type NetworkBlockObject,
  networkBlockRange,
  networkHash,
  nextFreeNetworkBlock,
  rangeId,
  STATIC_RANGE,
  wantsBlockAhead,
} from "./nad_blocks.ts";
import { type NadIpamConfig, type NadRange, type NadRoute, spaceKey } from "./nad_ipam.ts";
import {
  type AllocationWait,
  earlier,
  type IpamClock,
  SYSTEM_CLOCK,
  waitOutQuarantine,
} from "./quarantine.ts";

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

/**
 * A claim ahead of need starts within this long after it is asked for (ms, uniformly at random),
 * so that the nodes of a burst, which reach half a block together, do not contend for the claim
 * turn all at once: each commit lost to another claim lists the space again (`bench:multinet`,
 * 500 pods over 10 nodes, ~13 claims: 127 lists of the space's blocks without a spread, 67 with
 * 2 s, 35 with 5 s). An ADD that needs the block meanwhile starts it at once.
 */
export const AHEAD_SPREAD_MS = 5000;

/**
 * An ADD waiting for another node to give back an empty single-address block (at the end of its
 * quarantine, and of the write that showed it empty) looks again this long after it is due, and
 * then as often (ms)...
 */
const GIVE_BACK_MARGIN_MS = 1000;
/** ...until this long after it was due: its node is gone or stuck, and it is not waited for. */
const GIVE_BACK_GRACE_MS = 10_000;

/** After a claim ahead of need declined, the range is not asked again for this long (ms). */
const AHEAD_DECLINED_MS = 30_000;

/** What {@link NadNetworkIpam} needs. */
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
  /** Spread of the start of claims ahead of need (ms; default {@link AHEAD_SPREAD_MS}). */
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

interface Held {
  name: string;
  network: string;
  range: string;
  cidr: Cidr;
  local: LocalPool;
  obj?: NetworkBlockObject;
  writer: DirtyLoop;
  emptySince?: number;
  failures: number;
}

interface BlockMeta {
  network: string;
  range: string;
  cidr: string;
  pool: { subnet: string; start: string; end: string; excluded: [string, string][] };
}

const ownerKey = (o: Owner) => `${o.containerId}\n${o.ifname}`;
/** The container ID prefix of an address set aside for another IPAM's pod (whereabouts'). */
const SET_ASIDE = "whereabouts-";
const errorText = (e: unknown) => e instanceof Error ? e.message : String(e);
const isApi = (e: unknown, test: (k: KubeApiError) => boolean) =>
  e instanceof KubeApiError && test(e);

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
  readonly #d: NadNetworkIpamDeps;
  readonly #blocks = new Map<string, Held>();
  readonly #meta = new Map<string, { uid: string; namespace?: string; name?: string }>();
  /** Owners whose addresses were adopted from block objects at start (state lost here). */
  readonly #adopted = new Set<string>();
  /** When a claim ahead of need last declined, per range (see `AHEAD_DECLINED_MS`). */
  readonly #aheadDeclined = new Map<string, number>();
  /** The claim under way per range, whether it is one made ahead of need, and its start now. */
  readonly #claiming = new Map<
    string,
    { claim: Promise<Held | undefined>; ahead: boolean; hurry?: () => void }
  >();
  readonly #timers = new Set<ReturnType<typeof setTimeout>>();
  /**
   * Single-address blocks of a range other nodes hold empty (in their quarantine, given back at
   * its end), by name, with when this node first saw each so (on the IPAM's clock), as the last
   * claim that found the range full listed them.
   */
  readonly #emptyElsewhere = new Map<string, Map<string, number>>();
  readonly #stats = { claims: 0, claimsAhead: 0, claimRaces: 0, released: 0, writes: 0 };
  #closed = false;

  private constructor(deps: NadNetworkIpamDeps) {
    this.#d = deps;
  }

  get #dir(): string {
    return `${this.#d.stateDir}/ipam/networks`;
  }

  get #clock(): IpamClock {
    return this.#d.clock ?? SYSTEM_CLOCK;
  }

  /** Reconciles the node's blocks in the API with its directories and returns the IPAM. */
  static async open(deps: NadNetworkIpamDeps): Promise<NadNetworkIpam> {
    const ipam = new NadNetworkIpam(deps);
    await ipam.#reconcile();
    await ipam.#unrecorded();
    return ipam;
  }

  /** Allocations left by ADDs that died before they recorded (see `recorded`). */
  async #unrecorded(): Promise<void> {
    const { recorded, logger } = this.#d;
    if (!recorded) return;
    for (const { ip, owner } of this.allocations()) {
      const key = ownerKey(owner);
      if (recorded(owner) || this.#adopted.has(key)) continue;
      const meta = this.#meta.get(key);
      if (meta?.namespace && meta.name) {
        this.#adopted.add(key); // released by the sweep once its pod is gone
        continue;
      }
      await this.release(owner);
      logger.warn("released NAD address {ip} of {owner}: no attachment records it (its ADD died)", {
        ip,
        owner: `${owner.containerId}/${owner.ifname}`,
      });
    }
  }

  async #reconcile(): Promise<void> {
    const { api, nodeName, logger } = this.#d;
    await Deno.mkdir(this.#dir, { recursive: true, mode: 0o700 });
    const local = new Map<string, BlockMeta>();
    for await (const entry of Deno.readDir(this.#dir)) {
      if (!entry.isDirectory) continue;
      const meta = await Deno.readTextFile(`${this.#dir}/${entry.name}/.block.json`)
        .then((t) => JSON.parse(t) as BlockMeta).catch(() => undefined);
      let named: string | undefined;
      try {
        named = meta && networkBlockName(meta.network, parseCidr(meta.cidr));
      } catch { /* reported below */ }
      if (meta && named === entry.name) {
        local.set(entry.name, meta);
      } else {
        logger.error("NAD block directory {dir} has no readable .block.json; left alone", {
          dir: `${this.#dir}/${entry.name}`,
        });
      }
    }
    for (const obj of await api.list({ node: nodeName })) {
      const spec = obj.spec;
      if (!spec || spec.node !== nodeName) continue;
      const name = obj.metadata!.name!;
      const meta = local.get(name);
      local.delete(name);
      const pool = meta ? poolOfMeta(meta) : poolOfObject(obj);
      if (!pool) {
        logger.error("NAD block {name} has a range that does not parse ({range}); left alone", {
          name,
          range: spec.range,
        });
        continue;
      }
      const held = await this.#open(spec.network, spec.range, parseCidr(spec.cidr), pool, obj);
      for (const a of spec.allocations ?? []) {
        const owner = { containerId: a.containerID, ifname: a.ifname };
        this.#meta.set(ownerKey(owner), { uid: a.podUID, namespace: a.namespace, name: a.name });
        // State lost here: what the object records stays taken until a DEL releases it, or the
        // sweep finds its pod gone (releaseAdoptedOfGonePods). An address set aside for another
        // IPAM's pod is released the same way, whatever the state.
        if (!meta && await held.local.hold(a.ip, owner)) this.#adopted.add(ownerKey(owner));
        if (a.containerID.startsWith(SET_ASIDE)) this.#adopted.add(ownerKey(owner));
      }
      this.#kick(held);
    }
    for (const [name, meta] of local) {
      const pool = poolOfMeta(meta);
      const held = await this.#open(
        meta.network,
        meta.range,
        parseCidr(meta.cidr),
        pool,
        undefined,
      );
      if (held.local.held === 0) {
        await this.#forget(held, "no object, no addresses");
        continue;
      }
      logger.warn("NAD block {name} holds {n} addresses here but has no object; writing it again", {
        name,
        n: held.local.held,
      });
      this.#kick(held);
    }
    for (const held of this.#blocks.values()) this.#checkEmpty(held);
  }

  async #open(
    network: string,
    range: string,
    cidr: Cidr,
    pool: PoolRange,
    obj: NetworkBlockObject | undefined,
  ): Promise<Held> {
    const name = networkBlockName(network, cidr);
    const dir = `${this.#dir}/${name}`;
    await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
    const fam = cidr.network.family;
    const t = (v: bigint) => formatIp({ family: fam, value: v });
    const meta: BlockMeta = {
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
    const held: Held = {
      name,
      network,
      range,
      cidr,
      local: await LocalPool.open(dir, pool, {
        reuseDelayMs: this.#d.reuseDelayMs,
        clock: this.#d.clock,
      }),
      obj,
      writer: undefined!,
      failures: 0,
    };
    held.writer = new DirtyLoop(
      () => this.#writePass(held),
      () => !this.#closed && this.#blocks.get(name) === held,
    );
    this.#blocks.set(name, held);
    return held;
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
    this.#meta.set(ownerKey(owner), {
      uid: pod?.uid ?? "",
      namespace: pod?.namespace,
      name: pod?.name,
    });
    try {
      const families = new Set<number>();
      for (const text of statics) {
        const ip = await this.#reserve(config, network, owner, text, wait);
        families.add(ip.family);
        const gw = config.ranges.find((r) => r.gateway?.family === ip.family)?.gateway;
        ips.push({ address: text, ...(gw ? { gateway: formatIp(gw) } : {}) });
      }
      for (const range of config.ranges) {
        if (families.has(range.cidr.network.family)) continue;
        const space = spaceKey(config, range);
        const ip = await waitOutQuarantine(
          () => this.#allocate(config, range, network, owner),
          () => this.#quarantineEndsAt(space, range),
          wait,
          this.#clock,
        );
        ips.push({
          address: `${ip}/${range.cidr.prefix}`,
          ...(range.gateway ? { gateway: formatIp(range.gateway) } : {}),
        });
      }
    } catch (e) {
      for (const b of [...this.#blocks.values()]) {
        const ip = b.local.addressOf(owner);
        if (!ip || before.has(ip)) continue;
        await b.local.release(owner).catch(() => {});
        this.#kick(b);
        this.#checkEmpty(b);
      }
      throw e;
    }
    for (const a of config.addresses) ips.push(a);
    return { ips, routes: config.routes, ...(config.dns ? { dns: config.dns } : {}) };
  }

  async #allocate(
    config: NadIpamConfig,
    range: NadRange,
    network: string,
    owner: Owner,
  ): Promise<string> {
    const space = spaceKey(config, range);
    const id = rangeId(range);
    const mine = () =>
      [...this.#blocks.values()].filter((b) => b.network === space && b.range === id);
    for (const b of mine()) {
      const ip = b.local.addressOf(owner);
      if (ip) return ip;
    }
    // Until nothing is free: every claim adds a block (there are finitely many), and concurrent
    // ADDs may fill a block claimed for this one before it gets its turn.
    for (;;) {
      for (const b of mine()) {
        while (b.local.free > 0) {
          // Given back while an earlier block's allocation awaited (the list is a snapshot): an
          // address reserved in it now would be in a block another node may claim.
          if (this.#blocks.get(b.name) !== b) break;
          let ip: string;
          try {
            ip = await b.local.allocate(owner);
          } catch (e) {
            if (e instanceof CniError && e.code === CNI_ERROR.ADDRESSES_EXHAUSTED) break;
            throw e;
          }
          const holder = this.#d.foreign?.(ip);
          if (holder) {
            await this.#setAside(b, ip, owner, holder);
            continue;
          }
          b.emptySince = undefined;
          this.#kick(b);
          this.#claimAhead(space, range, mine());
          return ip;
        }
      }
      const claimed = await this.#claim(space, range);
      if (!claimed) break;
    }
    throw new CniError(
      CNI_ERROR.ADDRESSES_EXHAUSTED,
      `network ${network}: range ${formatCidr(range.cidr)} (${formatIp(range.start)}-${
        formatIp(range.end)
      }) has no free address`,
      `address space ${JSON.stringify(space)}; this node's blocks of it: ${
        mine().map((b) => formatCidr(b.cidr)).join(", ") || "none"
      }, no free block left in the range`,
    );
  }

  /**
   * When the earliest address of `range` that is in quarantine comes out: in this node's blocks
   * of it, or in a single-address block another node holds empty (given back at the end of its
   * quarantine, which lasts `reuseDelayMs` from at latest when this node first saw it empty; one
   * still there `GIVE_BACK_GRACE_MS` after that, its node gone or stuck, is not waited for).
   */
  #quarantineEndsAt(space: string, range: NadRange): number | undefined {
    const id = rangeId(range);
    let first: number | undefined;
    for (const b of this.#blocks.values()) {
      if (b.network === space && b.range === id) first = earlier(first, b.local.quarantineEndsAt());
    }
    const now = this.#clock.now();
    for (const seen of this.#emptyElsewhere.get(claimKey(space, range))?.values() ?? []) {
      const due = seen + (this.#d.reuseDelayMs ?? 0) + (this.#d.writeDelayMs ?? WRITE_DELAY_MS);
      // Looked for again a second after it is due, then every second while its node may be late.
      if (now < due + GIVE_BACK_MARGIN_MS) first = earlier(first, due + GIVE_BACK_MARGIN_MS);
      else if (now < due + GIVE_BACK_GRACE_MS) first = earlier(first, now + GIVE_BACK_MARGIN_MS);
    }
    return first;
  }

  /** Records the single-address blocks of `range` that `listed` shows empty on other nodes. */
  #noteEmptyElsewhere(space: string, range: NadRange, listed: NetworkBlockObject[]): void {
    const key = claimKey(space, range);
    const before = this.#emptyElsewhere.get(key);
    const now = this.#clock.now();
    const seen = new Map<string, number>();
    for (const b of listed) {
      const spec = b.spec;
      const name = b.metadata?.name;
      if (!spec || !name || spec.node === this.#d.nodeName || spec.allocations?.length) continue;
      const cidr = parseCidr(spec.cidr);
      const single = cidr.prefix === (cidr.network.family === 4 ? 32 : 128);
      if (!single || !networkBlockRange(range, cidr)) continue;
      seen.set(name, before?.get(name) ?? now);
    }
    if (seen.size) this.#emptyElsewhere.set(key, seen);
    else this.#emptyElsewhere.delete(key);
  }

  /**
   * Gives `ip` back from `owner` and holds it for the live pod another IPAM gave it, as an
   * adopted allocation (released by the sweep once that pod is gone).
   */
  async #setAside(
    b: Held,
    ip: string,
    owner: Owner,
    holder: { namespace: string; name: string },
  ): Promise<void> {
    await b.local.release(owner);
    const other = { containerId: `${SET_ASIDE}${ip.replace(/[.:]/g, "-")}`, ifname: "whereabouts" };
    if (await b.local.hold(ip, other)) {
      this.#meta.set(ownerKey(other), { uid: "", ...holder });
      this.#adopted.add(ownerKey(other));
      this.#kick(b);
      this.#d.logger.info("left {ip} to {pod}, whose address it is in whereabouts' IPPool", {
        ip,
        pod: `${holder.namespace}/${holder.name}`,
      });
    }
  }

  /**
   * After an allocation: when this node's blocks of `range` are down to half a block free, its
   * next block is claimed now, in the background (see `wantsBlockAhead`), so that the ADDs which
   * would find them full do not wait for a claim.
   */
  #claimAhead(space: string, range: NadRange, mine: Held[]): void {
    const key = claimKey(space, range);
    if (this.#closed || this.#claiming.has(key)) return;
    // A range where one was declined (three quarters claimed, only small blocks left) is not
    // asked again for a while: not a list of the space after every ADD.
    const declined = this.#aheadDeclined.get(key);
    if (declined !== undefined && Date.now() - declined < AHEAD_DECLINED_MS) return;
    const free = mine.reduce((n, b) => n + b.local.free, 0);
    if (!wantsBlockAhead(range, free)) return;
    this.#claim(space, range, true).then((held) => {
      if (held) this.#aheadDeclined.delete(key);
      else this.#aheadDeclined.set(key, Date.now());
    }).catch((e) =>
      this.#d.logger.warn("claiming a NAD block of {range} ahead of need failed: {error}", {
        range: formatCidr(range.cidr),
        error: errorText(e),
      })
    );
  }

  /**
   * Claims a block of `range` (one claim per range at a time; concurrent callers share it). A
   * claim made `ahead` of need may decline (see `mayClaimAhead`) or fail: an ADD that was waiting
   * for it then claims for itself.
   */
  async #claim(space: string, range: NadRange, ahead = false): Promise<Held | undefined> {
    const key = claimKey(space, range);
    for (;;) {
      const pending = this.#claiming.get(key);
      if (pending) {
        if (ahead) return undefined;
        pending.hurry?.(); // an ADD needs it now: no more waiting out the spread
        try {
          const held = await pending.claim;
          if (held || !pending.ahead) return held;
        } catch (e) {
          if (!pending.ahead) throw e;
        }
        continue;
      }
      // A claim ahead of need starts after a random part of the spread: the nodes of a burst
      // reach half a block together, and claims that overlap in time contend for the claim turn
      // (each lost commit lists the space again).
      const spread = ahead ? this.#d.aheadSpreadMs ?? AHEAD_SPREAD_MS : 0;
      let hurry: (() => void) | undefined;
      const start = spread > 0
        ? new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.random() * spread);
          hurry = () => {
            clearTimeout(timer);
            resolve();
          };
        })
        : Promise.resolve();
      const claim = start.then(() => this.#claimNew(space, range, ahead)).catch((e) => {
        throw this.#unavailable(
          e,
          `cannot claim a block of ${formatCidr(range.cidr)} (space ${space})`,
        );
      }).finally(() => {
        if (this.#claiming.get(key)?.claim === claim) this.#claiming.delete(key);
      });
      this.#claiming.set(key, { claim, ahead, hurry });
      return await claim;
    }
  }

  async #claimNew(space: string, range: NadRange, ahead: boolean): Promise<Held | undefined> {
    const { api, nodeName, logger } = this.#d;
    const lost: Cidr[] = [];
    for (let attempt = 0; attempt < 32; attempt++) {
      if (ahead && this.#closed) return undefined;
      // The first candidate is picked from the watch cache: a block another node claimed meanwhile
      // costs a lost create or a settle that yields (whose list is read from storage), never a
      // duplicate. Every later attempt, and "no free block" before it is answered, reads storage:
      // a lagging cache never makes a range look full.
      const cached = attempt === 0;
      const listed = await api.list({ network: space, cached });
      if (ahead && this.#closed) return undefined;
      const taken = [
        ...listed.flatMap((b) => b.spec?.cidr ? [parseCidr(b.spec.cidr)] : []),
        ...[...this.#blocks.values()].filter((b) => b.network === space).map((b) => b.cidr),
        ...lost,
      ];
      const cidr = nextFreeNetworkBlock(range, taken, nodeName);
      if (!cidr) {
        if (cached) continue;
        if (!ahead) this.#noteEmptyElsewhere(space, range, listed);
        return undefined;
      }
      if (ahead && !mayClaimAhead(range, cidr, listed.length + lost.length)) return undefined;
      const pool = networkBlockRange(range, cidr)!;
      const created = await this.#create(space, rangeId(range), cidr, []);
      if (!created) {
        this.#stats.claimRaces++;
        lost.push(cidr);
        continue;
      }
      if (!(await this.#settle(created.obj, cidr, created.turn))) {
        this.#stats.claimRaces++;
        lost.push(cidr);
        continue;
      }
      const held = await this.#open(space, rangeId(range), cidr, pool, created.obj);
      this.#stats.claims++;
      if (ahead) this.#stats.claimsAhead++;
      logger.info(
        "claimed NAD block {cidr} of space {space} for node {node} ({free} addresses{ahead})",
        {
          cidr: formatCidr(cidr),
          space,
          node: nodeName,
          free: held.local.free,
          ahead: ahead ? ", ahead of need" : "",
        },
      );
      // Given back when it stays unused (a claim ahead of need whose need never came).
      if (ahead && !this.#closed) this.#checkEmpty(held);
      return held;
    }
    throw new CniError(
      CNI_ERROR.TRY_AGAIN_LATER,
      `cannot claim a block of ${formatCidr(range.cidr)} (space ${space}) for node ${nodeName}`,
      "other nodes kept winning the claims",
    );
  }

  /** An API failure as code 11 (the runtime retries); a CniError as it is. */
  #unavailable(e: unknown, what: string): CniError {
    if (e instanceof CniError) return e;
    return new CniError(
      CNI_ERROR.TRY_AGAIN_LATER,
      `${what} for node ${this.#d.nodeName}`,
      errorText(e),
    );
  }

  /** Creates a block's object after taking a claim turn; undefined when the name exists. */
  async #create(
    space: string,
    range: string,
    cidr: Cidr,
    allocations: BlockAllocation[],
  ): Promise<{ obj: NetworkBlockObject; turn: ClaimTurn } | undefined> {
    const { api, nodeName } = this.#d;
    try {
      const turn = await api.claimTurn();
      const obj = await api.create({
        metadata: {
          name: networkBlockName(space, cidr),
          labels: { "ferry.dev/node": nodeName, "ferry.dev/network": networkHash(space) },
        },
        spec: { network: space, range, cidr: formatCidr(cidr), node: nodeName, allocations },
      });
      return { obj, turn };
    } catch (e) {
      if (isApi(e, (k) => k.isAlreadyExists)) return undefined;
      throw new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        `cannot claim NAD block ${formatCidr(cidr)} (space ${space}) for node ${nodeName}`,
        errorText(e),
      );
    }
  }

  /**
   * Settles a claim as pool blocks are: true once no other block of the space overlaps and the
   * claim counter was bumped from the version read before the create; false (the object deleted
   * before any address of it was handed out) when another block overlaps it.
   */
  async #settle(created: NetworkBlockObject, cidr: Cidr, first: ClaimTurn): Promise<boolean> {
    const { api } = this.#d;
    const name = created.metadata!.name!;
    let turn = first;
    for (let attempt = 0; attempt < 32; attempt++) {
      const other = (await api.list({ network: created.spec!.network })).find((b) =>
        b.metadata?.name !== name && b.spec?.cidr && cidrsOverlap(parseCidr(b.spec.cidr), cidr)
      );
      if (other) {
        await api.delete(name, created.metadata!.uid!, created.metadata!.resourceVersion!)
          .catch((e) => {
            if (!isApi(e, (k) => k.isNotFound)) throw e;
          });
        return false;
      }
      if (await turn.commit()) return true;
      turn = await api.claimTurn();
    }
    throw new CniError(
      CNI_ERROR.TRY_AGAIN_LATER,
      `cannot settle the claim of NAD block ${formatCidr(cidr)}`,
      "other nodes kept claiming blocks meanwhile",
    );
  }

  /**
   * Reserves a static address in the config's space for `owner`; returns it parsed. One this node
   * released less than the quarantine ago is waited for as `wait` allows (code 11 when it comes
   * out after the deadline: the pod's next ADD gets it).
   */
  async #reserve(
    config: NadIpamConfig,
    network: string,
    owner: Owner,
    text: string,
    wait: AllocationWait | undefined,
  ) {
    let ip;
    let prefix: number;
    try {
      const slash = text.indexOf("/");
      ip = parseIp(slash < 0 ? text : text.slice(0, slash));
      prefix = slash < 0 ? (ip.family === 4 ? 32 : 128) : parseCidr(text).prefix;
    } catch (e) {
      throw new CniError(CNI_ERROR.INVALID_CONFIG, `network ${network}: ips: ${errorText(e)}`);
    }
    const addr = formatIp(ip);
    const range = config.ranges.find((r) => cidrContains(r.cidr, ip!));
    const space = range ? spaceKey(config, range) : spaceKey(config, {
      cidr: { network: ip, prefix: ip.family === 4 ? 32 : 128 },
      start: ip,
      end: ip,
      excluded: [],
    });
    const refuse = (why: string) =>
      new CniError(CNI_ERROR.INVALID_CONFIG, `network ${network}: static address ${addr}: ${why}`);
    const inBlock = () =>
      [...this.#blocks.values()].find((b) => b.network === space && cidrContains(b.cidr, ip));
    for (let b = inBlock(); b; b = inBlock()) {
      if (b.local.addressOf(owner) === addr) return ip;
      const until = b.local.quarantinedUntil(addr);
      if (until !== undefined) {
        await this.#waitForStatic(until, `network ${network}: static address ${addr}`, wait);
        continue; // its block may have been given back meanwhile
      }
      if (!(await b.local.hold(addr, owner))) throw refuse("another pod holds it");
      this.#kick(b);
      return ip;
    }
    const single: Cidr = { network: ip, prefix: ip.family === 4 ? 32 : 128 };
    const created = await this.#create(space, STATIC_RANGE, single, []);
    if (!created) throw refuse("another pod holds it");
    const settled = await this.#settle(created.obj, single, created.turn).catch((e) => {
      throw this.#unavailable(e, `cannot reserve static address ${addr}`);
    });
    if (!settled) {
      throw refuse("it lies in a block another node holds for its pods");
    }
    const pool: PoolRange = {
      subnet: { network: ip, prefix },
      start: ip,
      end: ip,
      gateway: { family: ip.family, value: ip.value ^ 1n },
    };
    const held = await this.#open(space, STATIC_RANGE, single, pool, created.obj);
    if (!(await held.local.hold(addr, owner))) throw refuse("another pod holds it");
    this.#kick(held);
    return ip;
  }

  /** Waits until `until`, a static address's end of quarantine, if `wait` allows; 11 otherwise. */
  async #waitForStatic(until: number, what: string, wait: AllocationWait | undefined) {
    const left = until - this.#clock.now();
    if (!wait || until > wait.until) {
      throw new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        `${what}: released less than ipam.reuseDelaySeconds ago, in the reuse quarantine for ${
          (left / 1000).toFixed(1)
        } s more${wait ? ", past this ADD's deadline" : ""}`,
      );
    }
    await this.#clock.sleep(Math.max(1, left), wait.signal);
    if (wait.signal?.aborted) throw wait.signal.reason;
  }

  /** Releases every address `owner` holds on NAD networks; returns them. */
  async release(owner: Owner): Promise<string[]> {
    const out: string[] = [];
    for (const b of [...this.#blocks.values()]) {
      if (!b.local.addressOf(owner)) continue;
      const ip = await b.local.release(owner);
      if (ip) out.push(ip);
      this.#kick(b);
      this.#checkEmpty(b);
    }
    this.#meta.delete(ownerKey(owner));
    this.#adopted.delete(ownerKey(owner));
    return out;
  }

  /**
   * Releases the adopted allocations (see {@link NadNetworkIpam.open}) whose pod is gone: `gone`
   * asks the API about the pod the block object named. Such an allocation has no attachment record
   * on this node (its state was lost), so no DEL will ever release it. Returns the addresses.
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
      const ips = await this.release({ containerId, ifname });
      released.push(...ips);
      this.#d.logger.info("released the adopted NAD allocation of {pod} ({ips}): the pod is gone", {
        pod: `${meta.namespace}/${meta.name}`,
        ips: ips.join(", "),
      });
    }
    return released;
  }

  /** The addresses `owner` holds on NAD networks. */
  addressesOf(owner: Owner): string[] {
    return [...this.#blocks.values()].flatMap((b) => {
      const ip = b.local.addressOf(owner);
      return ip ? [ip] : [];
    });
  }

  /** Every allocation held on this node: space, address, owner. */
  allocations(): { network: string; ip: string; owner: Owner }[] {
    return [...this.#blocks.values()].flatMap((b) =>
      b.local.allocations().map((a) => ({ network: b.network, ...a }))
    );
  }

  /**
   * Every allocation held on this node with its block's CIDR, and whether its owner was adopted
   * (from a block object, or set aside for another IPAM's pod: no record here by design). For the
   * node's self-check.
   */
  held(): { network: string; cidr: string; ip: string; owner: Owner; adopted: boolean }[] {
    return [...this.#blocks.values()].flatMap((b) =>
      b.local.allocations().map((a) => ({
        network: b.network,
        cidr: formatCidr(b.cidr),
        ...a,
        adopted: this.#adopted.has(ownerKey(a.owner)),
      }))
    );
  }

  #kick(held: Held): void {
    if (!this.#closed) held.writer.kick();
  }

  #allocationsOf(held: Held): BlockAllocation[] {
    return held.local.allocations().map(({ ip, owner }) => {
      const meta = this.#meta.get(ownerKey(owner));
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

  async #writePass(held: Held): Promise<void> {
    try {
      const delay = this.#d.writeDelayMs ?? WRITE_DELAY_MS;
      if (delay > 0) await new Promise((r) => setTimeout(r, delay));
      // Closed meanwhile: what was pending is the flush's (it waits for this pass) or lost.
      if (this.#closed) return;
      await this.#write(held);
      held.failures = 0;
    } catch (e) {
      held.failures++;
      const wait = Math.min(30_000, 250 * 2 ** Math.min(held.failures, 7));
      this.#d.logger.warn("writing NAD block {name} failed ({error}); again in {ms} ms", {
        name: held.name,
        error: errorText(e),
        ms: wait,
      });
      const timer = setTimeout(() => {
        this.#timers.delete(timer);
        this.#kick(held);
      }, wait);
      Deno.unrefTimer(timer);
      this.#timers.add(timer);
    }
  }

  async #write(held: Held): Promise<void> {
    const { api, nodeName } = this.#d;
    for (let attempt = 0; attempt < 16 && !this.#closed; attempt++) {
      const desired = this.#allocationsOf(held);
      const base = held.obj ?? await api.get(held.name);
      if (!base?.spec || base.spec.node !== nodeName) {
        held.obj = undefined;
        if (held.local.held === 0) return await this.#forget(held, "its object is gone");
        if (base?.spec) {
          this.#d.logger.error(
            "NAD block {name} now names node {other}, but pods here hold {ips} in it",
            { name: held.name, other: base.spec.node, ips: desired.map((a) => a.ip) },
          );
          return;
        }
        const created = await this.#create(held.network, held.range, held.cidr, desired);
        if (created) {
          held.obj = created.obj;
          this.#stats.writes++;
          await this.#settle(created.obj, held.cidr, created.turn).catch(() => true);
        }
        continue;
      }
      if (sameAllocations(base.spec.allocations ?? [], desired)) {
        held.obj = base;
        return;
      }
      try {
        held.obj = await api.update({ ...base, spec: { ...base.spec, allocations: desired } });
        this.#stats.writes++;
        return;
      } catch (e) {
        if (isApi(e, (k) => k.isConflict || k.isNotFound)) {
          held.obj = undefined;
          continue;
        }
        throw e;
      }
    }
  }

  #checkEmpty(held: Held): void {
    if (held.local.held > 0) return;
    held.emptySince ??= Date.now();
    const wait = this.#keepEmptyMs(held) + 10;
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      this.#retire(held).catch((e) =>
        this.#d.logger.warn("giving back NAD block {name} failed: {error}", {
          name: held.name,
          error: errorText(e),
        })
      );
    }, wait);
    Deno.unrefTimer(timer);
    this.#timers.add(timer);
  }

  /**
   * How long an empty block is kept: a single address (a static one, or a block of a small range)
   * only as long as its quarantine, so that another node may hand it out next; a larger block
   * `releaseAfterMs`.
   */
  #keepEmptyMs(held: Held): number {
    const single = held.cidr.prefix === (held.cidr.network.family === 4 ? 32 : 128);
    return single ? this.#d.reuseDelayMs ?? 0 : this.#d.releaseAfterMs;
  }

  async #retire(held: Held): Promise<void> {
    if (this.#closed || this.#blocks.get(held.name) !== held || held.local.held > 0) return;
    if (held.emptySince === undefined) return;
    if (Date.now() - held.emptySince < this.#keepEmptyMs(held)) return;
    await held.writer.idle();
    if (this.#closed || held.local.held > 0) return;
    this.#blocks.delete(held.name);
    const { api } = this.#d;
    for (let attempt = 0; attempt < 4; attempt++) {
      const obj = held.obj ?? await api.get(held.name);
      if (!obj?.metadata?.uid || obj.spec?.node !== this.#d.nodeName) break;
      try {
        await api.delete(held.name, obj.metadata.uid, obj.metadata.resourceVersion ?? "");
        break;
      } catch (e) {
        if (isApi(e, (k) => k.isNotFound)) break;
        if (!isApi(e, (k) => k.isConflict)) {
          this.#blocks.set(held.name, held);
          throw e;
        }
        held.obj = undefined;
      }
    }
    this.#stats.released++;
    await this.#forget(held, "empty");
  }

  async #forget(held: Held, why: string): Promise<void> {
    this.#blocks.delete(held.name);
    await Deno.remove(`${this.#dir}/${held.name}`, { recursive: true }).catch(() => {});
    this.#d.logger.info("gave back NAD block {cidr} of space {space} ({why})", {
      cidr: formatCidr(held.cidr),
      space: held.network,
      why,
    });
  }

  /** Settles once every block's allocations are written (or `signal` aborts). */
  async flush(signal?: AbortSignal): Promise<void> {
    while (!signal?.aborted) {
      const busy = [...this.#blocks.values()].filter((b) => b.writer.busy);
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
      ...this.#stats,
      blocks: [...this.#blocks.values()].map((b) => `${b.network} ${formatCidr(b.cidr)}`),
    };
  }

  /** Stops writing and giving back; settles once no write is under way. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
    // A claim ahead of need still waiting out its spread gives up at once, one listing gives up
    // before it creates anything; one already creating ends with the API client (an object left
    // unsettled is this node's at its next start, and given back empty).
    for (const c of this.#claiming.values()) c.hurry?.();
    await Promise.allSettled([...this.#claiming.values()].map((c) => c.claim));
    await Promise.all([...this.#blocks.values()].map((b) => b.writer.idle()));
  }
}

/** The key of a range's claim under way. */
function claimKey(space: string, range: NadRange): string {
  return `${space}\n${rangeId(range)}`;
}

function sameAllocations(a: BlockAllocation[], b: BlockAllocation[]): boolean {
  if (a.length !== b.length) return false;
  const key = (x: BlockAllocation) =>
    `${x.ip}|${x.podUID}|${x.containerID}|${x.ifname}|${x.namespace ?? ""}|${x.name ?? ""}`;
  const set = new Set(a.map(key));
  return b.every((x) => set.has(key(x)));
}

function poolOfMeta(meta: BlockMeta): PoolRange {
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
function poolOfObject(obj: NetworkBlockObject): PoolRange | undefined {
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
