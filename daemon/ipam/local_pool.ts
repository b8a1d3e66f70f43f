/**
 * A node-local address pool: hands out addresses of one range to (container ID, interface)
 * owners and remembers them in a state directory, one file per address, so that a restarted
 * daemon neither loses nor doubles an allocation. A file appears whole or not at all: the owner is
 * written to a temporary file that is then hard-linked to the address's name (which fails if the
 * address is taken, even across processes), so a daemon killed at any moment leaves no empty or
 * half-written allocation. Files that are unreadable anyway (written by an older version, or a
 * power loss before the data reached the disk) are held back at open and settled by
 * {@link LocalPool.repair} against the attachment records.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import {
  addToIp,
  type Cidr,
  cidrContains,
  formatIp,
  type IpAddr,
  lastAddress,
  parseIp,
} from "./cidr.ts";
import { type IpamClock, SYSTEM_CLOCK } from "./quarantine.ts";

/** The range a pool allocates from. */
export interface PoolRange {
  /** The subnet the addresses live in. */
  subnet: Cidr;
  /** The first allocatable address. */
  start: IpAddr;
  /** The last allocatable address. */
  end: IpAddr;
  /** The gateway, never allocated. */
  gateway: IpAddr;
  /** Spans inside the range that are never handed out (a pool's excluded ranges), inclusive. */
  excluded?: { start: bigint; end: bigint }[];
}

/** Whether `v` falls in one of `range`'s excluded spans. */
function isExcluded(range: PoolRange, v: bigint): boolean {
  return range.excluded?.some((x) => v >= x.start && v <= x.end) ?? false;
}

/** How many addresses of `start..end` the excluded spans (assumed disjoint) cover. */
function excludedCount(range: PoolRange): bigint {
  let n = 0n;
  for (const x of range.excluded ?? []) {
    const lo = x.start > range.start.value ? x.start : range.start.value;
    const hi = x.end < range.end.value ? x.end : range.end.value;
    if (hi >= lo) n += hi - lo + 1n;
  }
  return n;
}

/** Who holds an address. */
export interface Owner {
  /** The CNI container ID. */
  containerId: string;
  /** The interface in the container. */
  ifname: string;
}

/** Computes the default range of a subnet: gateway first host, pool from the second host to the last (before the IPv4 broadcast). */
export function defaultRange(
  subnet: Cidr,
  overrides: { start?: string; end?: string; gateway?: string } = {},
): PoolRange {
  const gateway = overrides.gateway ? parseIp(overrides.gateway) : addToIp(subnet.network, 1n);
  const last = lastAddress(subnet);
  const range: PoolRange = {
    subnet,
    gateway,
    start: overrides.start ? parseIp(overrides.start) : addToIp(subnet.network, 1n),
    end: overrides.end
      ? parseIp(overrides.end)
      : subnet.network.family === 4
      ? addToIp(last, -1n)
      : last,
  };
  for (const ip of [range.gateway, range.start, range.end]) {
    if (!cidrContains(subnet, ip)) {
      throw new Error(`${formatIp(ip)} is outside ${formatIp(subnet.network)}/${subnet.prefix}`);
    }
  }
  if (range.start.value > range.end.value) throw new Error("range start is after range end");
  return range;
}

const ownerKey = (o: Owner) => `${o.containerId}\n${o.ifname}`;
/** What an allocation file holds: `containerId\nifname`, both as the CNI checks them. */
const OWNER_FILE = /^[a-zA-Z0-9][a-zA-Z0-9_.\-]*\n[^\s/:]{1,15}$/;
/** Held in memory for an address whose file names no owner, until {@link LocalPool.repair}. */
const UNREADABLE = "";

/**
 * The pool. Load it with {@link LocalPool.open}; `allocate` and `release` write through to disk.
 *
 * @example
 * ```ts
 * const pool = await LocalPool.open("/var/lib/ferry/ipam/default", range);
 * const ip = await pool.allocate({ containerId: "abc", ifname: "eth0" });
 * ```
 */
export class LocalPool {
  readonly #dir: string;
  readonly #range: PoolRange;
  readonly #byIp = new Map<string, string>();
  readonly #byOwner = new Map<string, string>();
  /** Addresses released recently, and when: not handed out again within `#reuseDelayMs`. */
  readonly #released = new Map<string, number>();
  readonly #reuseDelayMs: number;
  readonly #clock: IpamClock;
  #cursor: bigint;

  private constructor(dir: string, range: PoolRange, reuseDelayMs: number, clock: IpamClock) {
    this.#dir = dir;
    this.#range = range;
    this.#cursor = range.start.value;
    this.#reuseDelayMs = reuseDelayMs;
    this.#clock = clock;
  }

  /**
   * Opens (creating if needed) the pool stored in `dir` and loads its allocations. Temporary
   * files of an allocation that was killed halfway are removed; an address whose file names no
   * owner stays taken until {@link LocalPool.repair} settles it. `reuseDelayMs` is the quarantine
   * of a released address, on `clock` (the system's by default).
   */
  static async open(
    dir: string,
    range: PoolRange,
    options: { reuseDelayMs?: number; clock?: IpamClock } = {},
  ): Promise<LocalPool> {
    const pool = new LocalPool(
      dir,
      range,
      options.reuseDelayMs ?? 0,
      options.clock ?? SYSTEM_CLOCK,
    );
    await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
    for await (const entry of Deno.readDir(dir)) {
      if (!entry.isFile) continue;
      if (entry.name.startsWith(".")) {
        if (entry.name.endsWith(".tmp")) await Deno.remove(`${dir}/${entry.name}`);
        continue;
      }
      const text = await Deno.readTextFile(`${dir}/${entry.name}`);
      const owner = OWNER_FILE.test(text.trim()) ? text.trim() : UNREADABLE;
      pool.#byIp.set(entry.name, owner);
      if (owner !== UNREADABLE) pool.#byOwner.set(owner, entry.name);
    }
    return pool;
  }

  /** Addresses whose file names no owner (see {@link LocalPool.repair}). */
  unreadable(): string[] {
    return [...this.#byIp].filter(([, owner]) => owner === UNREADABLE).map(([ip]) => ip);
  }

  /**
   * Settles every unreadable allocation: an address that `holders` (the attachment records) say
   * an owner holds is written again for that owner; any other is freed, since nothing that
   * survives a restart uses it. Run at start, before requests are served.
   *
   * @returns what became of each address.
   */
  async repair(
    holders: Map<string, Owner>,
  ): Promise<{ restored: string[]; freed: string[] }> {
    const restored: string[] = [];
    const freed: string[] = [];
    for (const ip of this.unreadable()) {
      const owner = holders.get(ip);
      const path = `${this.#dir}/${ip}`;
      if (owner && this.addressOf(owner) === undefined) {
        const tmp = this.#tmpName(ip);
        await Deno.writeTextFile(tmp, ownerKey(owner), { mode: 0o600 });
        await Deno.rename(tmp, path);
        this.#byIp.set(ip, ownerKey(owner));
        this.#byOwner.set(ownerKey(owner), ip);
        restored.push(ip);
      } else {
        await Deno.remove(path).catch((e) => {
          if (!(e instanceof Deno.errors.NotFound)) throw e;
        });
        this.#byIp.delete(ip);
        freed.push(ip);
      }
    }
    return { restored, freed };
  }

  #tmpName(ip: string): string {
    return `${this.#dir}/.${ip}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  }

  /** The range this pool allocates from. */
  get range(): PoolRange {
    return this.#range;
  }

  /** How many addresses can be handed out now (those in quarantine are not). */
  get free(): number {
    const size = this.#range.end.value - this.#range.start.value + 1n;
    const gw = this.#inRange(this.#range.gateway.value) &&
        !isExcluded(this.#range, this.#range.gateway.value)
      ? 1n
      : 0n;
    const held = this.#range.excluded?.length
      ? [...this.#byIp.keys()].filter((ip) => !isExcluded(this.#range, parseIp(ip).value)).length
      : this.#byIp.size;
    const now = this.#clock.now();
    let quarantined = 0;
    for (const at of this.#released.values()) if (now - at < this.#reuseDelayMs) quarantined++;
    return Number(size - gw - excludedCount(this.#range)) - held - quarantined;
  }

  /** The clock the quarantine runs on. */
  get clock(): IpamClock {
    return this.#clock;
  }

  /** When `ip`'s quarantine ends (ms, on {@link LocalPool.clock}), if it is in one now. */
  quarantinedUntil(ip: string): number | undefined {
    const at = this.#released.get(ip);
    if (at === undefined || this.#byIp.has(ip)) return undefined;
    const until = at + this.#reuseDelayMs;
    return until > this.#clock.now() ? until : undefined;
  }

  /**
   * When the earliest quarantine of a free address ends (ms, on {@link LocalPool.clock}), if one
   * is in quarantine now: the moment an allocation that found the range full may succeed.
   */
  quarantineEndsAt(): number | undefined {
    const now = this.#clock.now();
    let first: number | undefined;
    for (const [ip, at] of this.#released) {
      const until = at + this.#reuseDelayMs;
      if (until <= now || this.#byIp.has(ip)) continue;
      if (first === undefined || until < first) first = until;
    }
    return first;
  }

  /** How many addresses are taken (unreadable allocations included). */
  get held(): number {
    return this.#byIp.size;
  }

  /** The address held by `owner`, if any. */
  addressOf(owner: Owner): string | undefined {
    return this.#byOwner.get(ownerKey(owner));
  }

  /** Every (address, owner) held (unreadable allocations have no owner and are left out). */
  allocations(): { ip: string; owner: Owner }[] {
    return [...this.#byIp].filter(([, key]) => key !== UNREADABLE).map(([ip, key]) => {
      const [containerId, ifname] = key.split("\n");
      return { ip, owner: { containerId, ifname } };
    });
  }

  #inRange(v: bigint): boolean {
    return v >= this.#range.start.value && v <= this.#range.end.value;
  }

  /**
   * Allocates an address for `owner`; an owner that holds one gets the same one back. An address
   * released less than the reuse delay ago is not handed out (quarantine: traffic meant for the
   * pod that had it must not reach a new one).
   *
   * @throws {CniError} code 101 when the range is full (or what is free is in quarantine).
   */
  async allocate(owner: Owner): Promise<string> {
    const held = this.addressOf(owner);
    if (held) return held;
    const { start, end } = this.#range;
    const size = end.value - start.value + 1n;
    const now = this.#clock.now();
    let quarantined = 0;
    for (const [ip, at] of this.#released) {
      if (now - at >= this.#reuseDelayMs) this.#released.delete(ip);
    }
    const from = this.#cursor - start.value;
    for (let i = 0n; i < size; i++) {
      const v = start.value + ((from + i) % size);
      if (v === this.#range.gateway.value || isExcluded(this.#range, v)) continue;
      const ip = formatIp({ family: start.family, value: v });
      if (this.#byIp.has(ip)) continue;
      if (this.#released.has(ip)) {
        quarantined++;
        continue;
      }
      // The cursor moves on before the claim's file is written: allocations running meanwhile
      // start past this address instead of stepping over every one still being claimed.
      this.#cursor = v + 1n;
      if (!(await this.#claim(ip, owner))) continue;
      return ip;
    }
    throw new CniError(
      CNI_ERROR.ADDRESSES_EXHAUSTED,
      `no free address in ${formatIp(start)}-${formatIp(end)}`,
      `${this.#byIp.size} addresses are allocated` +
        (quarantined
          ? `, ${quarantined} released less than ${this.#reuseDelayMs / 1000} s ago (quarantine)`
          : ""),
    );
  }

  /**
   * Records that `owner` holds `ip` (adopting an allocation known from elsewhere, such as a
   * block's object). False when another owner holds it or `owner` holds another address.
   */
  async hold(ip: string, owner: Owner): Promise<boolean> {
    const held = this.addressOf(owner);
    if (held !== undefined) return held === ip;
    if (this.#byIp.has(ip)) return false;
    return await this.#claim(ip, owner);
  }

  async #claim(ip: string, owner: Owner): Promise<boolean> {
    const key = ownerKey(owner);
    // Reserve in memory first: concurrent allocations must not pick the same address.
    this.#byIp.set(ip, key);
    const tmp = this.#tmpName(ip);
    try {
      // Whole or not at all: the owner is written first, then linked to the address's name,
      // which fails when that name exists.
      await Deno.writeTextFile(tmp, key, { mode: 0o600 });
      await Deno.link(tmp, `${this.#dir}/${ip}`);
    } catch (e) {
      this.#byIp.delete(ip);
      if (e instanceof Deno.errors.AlreadyExists) return false;
      throw new CniError(CNI_ERROR.IO_FAILURE, `cannot record allocation of ${ip}`, String(e));
    } finally {
      await Deno.remove(tmp).catch(() => {});
    }
    this.#byOwner.set(key, ip);
    return true;
  }

  /** Releases whatever `owner` holds; releasing nothing is not an error. Returns the address released. */
  async release(owner: Owner): Promise<string | undefined> {
    const key = ownerKey(owner);
    const ip = this.#byOwner.get(key);
    if (!ip) return undefined;
    await Deno.remove(`${this.#dir}/${ip}`).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    });
    this.#byOwner.delete(key);
    this.#byIp.delete(ip);
    if (this.#reuseDelayMs > 0) this.#released.set(ip, this.#clock.now());
    return ip;
  }
}
