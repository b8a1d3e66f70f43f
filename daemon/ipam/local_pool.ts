/**
 * A node-local address pool: hands out addresses of one range to (container ID, interface)
 * owners and remembers them in a state directory, one file per address (created exclusively, so a
 * second allocation of the same address fails even across processes), so that a restarted daemon
 * neither loses nor doubles an allocation.
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
  #cursor: bigint;

  private constructor(dir: string, range: PoolRange) {
    this.#dir = dir;
    this.#range = range;
    this.#cursor = range.start.value;
  }

  /** Opens (creating if needed) the pool stored in `dir` and loads its allocations. */
  static async open(dir: string, range: PoolRange): Promise<LocalPool> {
    const pool = new LocalPool(dir, range);
    await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
    for await (const entry of Deno.readDir(dir)) {
      if (!entry.isFile || entry.name.startsWith(".")) continue;
      const owner = (await Deno.readTextFile(`${dir}/${entry.name}`)).trim();
      pool.#byIp.set(entry.name, owner);
      pool.#byOwner.set(owner, entry.name);
    }
    return pool;
  }

  /** The range this pool allocates from. */
  get range(): PoolRange {
    return this.#range;
  }

  /** How many addresses are free. */
  get free(): number {
    const size = this.#range.end.value - this.#range.start.value + 1n;
    const gw = this.#inRange(this.#range.gateway.value) ? 1n : 0n;
    return Number(size - gw) - this.#byIp.size;
  }

  /** The address held by `owner`, if any. */
  addressOf(owner: Owner): string | undefined {
    return this.#byOwner.get(ownerKey(owner));
  }

  /** Every (address, owner) held. */
  allocations(): { ip: string; owner: Owner }[] {
    return [...this.#byIp].map(([ip, key]) => {
      const [containerId, ifname] = key.split("\n");
      return { ip, owner: { containerId, ifname } };
    });
  }

  #inRange(v: bigint): boolean {
    return v >= this.#range.start.value && v <= this.#range.end.value;
  }

  /**
   * Allocates an address for `owner`; an owner that holds one gets the same one back.
   *
   * @throws {CniError} code 101 when the range is full.
   */
  async allocate(owner: Owner): Promise<string> {
    const held = this.addressOf(owner);
    if (held) return held;
    const { start, end } = this.#range;
    const size = end.value - start.value + 1n;
    for (let i = 0n; i < size; i++) {
      const v = start.value + ((this.#cursor - start.value + i) % size);
      if (v === this.#range.gateway.value) continue;
      const ip = formatIp({ family: start.family, value: v });
      if (this.#byIp.has(ip)) continue;
      if (!(await this.#claim(ip, owner))) continue;
      this.#cursor = v + 1n;
      return ip;
    }
    throw new CniError(
      CNI_ERROR.ADDRESSES_EXHAUSTED,
      `no free address in ${formatIp(start)}-${formatIp(end)}`,
      `${this.#byIp.size} addresses are allocated`,
    );
  }

  async #claim(ip: string, owner: Owner): Promise<boolean> {
    const key = ownerKey(owner);
    // Reserve in memory first: concurrent allocations must not pick the same address.
    this.#byIp.set(ip, key);
    try {
      const file = await Deno.open(`${this.#dir}/${ip}`, {
        write: true,
        createNew: true,
        mode: 0o600,
      });
      try {
        await file.write(new TextEncoder().encode(key));
      } finally {
        file.close();
      }
    } catch (e) {
      this.#byIp.delete(ip);
      if (e instanceof Deno.errors.AlreadyExists) return false;
      throw new CniError(CNI_ERROR.IO_FAILURE, `cannot record allocation of ${ip}`, String(e));
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
    return ip;
  }
}
