/**
 * Ferry's cluster-scoped address pools (`ipam.mode: pool`), the pure part: the `IPPool` and
 * `IPBlock` objects (CRDs in `deploy/base/crds/`), parsing a pool, naming a block after its CIDR (so
 * that two nodes creating the same block collide on the name and the API's AlreadyExists decides
 * who owns it), picking the next free block, and the range of addresses a block hands out.
 *
 * A pool is split into blocks of one size per family; each block belongs to one node, which
 * alone allocates inside it. A block's first host address is its gateway on the owning node's
 * bridge; its network address (and the IPv4 broadcast address) and every excluded range of the
 * pool are never handed out.
 *
 * @module
 */
import type { KubeObject } from "../k8s/client.ts";
import {
  addToIp,
  type Cidr,
  cidrsOverlap,
  formatCidr,
  lastAddress,
  parseCidr,
  parseIp,
} from "./cidr.ts";
import type { PoolRange } from "./local_pool.ts";

/** The default block prefix lengths: 64 IPv4 addresses, 64 IPv6 addresses. */
export const DEFAULT_BLOCK_PREFIX = { ipv4: 26, ipv6: 122 } as const;

/** An `IPPool` (`ferry.dev/v1`, cluster-scoped). */
export interface IpPoolObject extends KubeObject {
  /** What the pool hands out. */
  spec?: {
    /** At most one CIDR per family. */
    cidrs?: string[];
    /** The prefix length of its blocks, per family. */
    blockSize?: { ipv4?: number; ipv6?: number };
    /** CIDRs or `first-last` ranges never handed out. */
    excluded?: string[];
    /** `pods` (the default): the default network's; `networks`: named by NADs' `ferry` IPAM. */
    use?: "pods" | "networks";
    /** NADs naming a pool for networks that is disabled are refused. */
    disabled?: boolean;
  };
}

/** One allocation recorded in a block. */
export interface BlockAllocation {
  /** The address. */
  ip: string;
  /** The pod's UID ("" when the runtime did not say). */
  podUID: string;
  /** The CNI container ID. */
  containerID: string;
  /** The interface in the pod. */
  ifname: string;
  /** The pod's namespace, when known. */
  namespace?: string;
  /** The pod's name, when known. */
  name?: string;
}

/** An `IPBlock` (`ferry.dev/v1`, cluster-scoped), named by {@link blockName}. */
export interface IpBlockObject extends KubeObject {
  /** The block. */
  spec?: {
    /** The pool it was cut from. */
    pool: string;
    /** Its CIDR. */
    cidr: string;
    /** The node that owns it. */
    node: string;
    /** The addresses handed out, one per (pod UID, container ID, interface). */
    allocations?: BlockAllocation[];
  };
}

/** One family of a parsed pool. */
export interface PoolFamily {
  /** The pool's name. */
  pool: string;
  /** 4 or 6. */
  family: 4 | 6;
  /** The pool's CIDR of this family. */
  cidr: Cidr;
  /** The blocks' prefix length. */
  blockPrefix: number;
  /** Excluded spans of this family (inclusive). */
  excluded: { start: bigint; end: bigint }[];
}

/** A pool that cannot be used, and why. */
export class PoolError extends Error {
  /** Creates the error. */
  constructor(pool: string, why: string) {
    super(`IPPool ${pool}: ${why}`);
    this.name = "PoolError";
  }
}

function parseExcluded(text: string): { family: 4 | 6; start: bigint; end: bigint } {
  if (text.includes("/")) {
    const c = parseCidr(text);
    return { family: c.network.family, start: c.network.value, end: lastAddress(c).value };
  }
  const dash = text.indexOf("-");
  if (dash < 0) {
    const ip = parseIp(text);
    return { family: ip.family, start: ip.value, end: ip.value };
  }
  const a = parseIp(text.slice(0, dash));
  const b = parseIp(text.slice(dash + 1));
  if (a.family !== b.family || a.value > b.value) throw new Error(`invalid range ${text}`);
  return { family: a.family, start: a.value, end: b.value };
}

/**
 * Parses a pool into its families.
 *
 * @throws {PoolError} for a pool with no CIDR, two of one family, a block size that does not fit,
 * or an excluded entry that does not parse.
 * @example
 * ```ts
 * parsePool({ metadata: { name: "default" }, spec: { cidrs: ["10.244.0.0/16"] } })[0].blockPrefix; // 26
 * ```
 */
export function parsePool(obj: IpPoolObject): PoolFamily[] {
  const name = obj.metadata?.name ?? "";
  const fail = (why: string) => new PoolError(name, why);
  const cidrs = obj.spec?.cidrs ?? [];
  if (cidrs.length === 0) throw fail("spec.cidrs is empty");
  let excluded: { family: 4 | 6; start: bigint; end: bigint }[];
  try {
    excluded = (obj.spec?.excluded ?? []).map(parseExcluded);
  } catch (e) {
    throw fail(`spec.excluded: ${e instanceof Error ? e.message : e}`);
  }
  const families: PoolFamily[] = [];
  for (const text of cidrs) {
    let cidr: Cidr;
    try {
      cidr = parseCidr(text);
    } catch (e) {
      throw fail(`spec.cidrs: ${e instanceof Error ? e.message : e}`);
    }
    const family = cidr.network.family;
    if (families.some((f) => f.family === family)) throw fail(`two IPv${family} CIDRs`);
    const blockPrefix = family === 4
      ? obj.spec?.blockSize?.ipv4 ?? DEFAULT_BLOCK_PREFIX.ipv4
      : obj.spec?.blockSize?.ipv6 ?? DEFAULT_BLOCK_PREFIX.ipv6;
    const max = family === 4 ? 30 : 126;
    if (!Number.isInteger(blockPrefix) || blockPrefix < cidr.prefix || blockPrefix > max) {
      throw fail(
        `block size /${blockPrefix} does not fit ${text} (it must lie between /${cidr.prefix} and /${max})`,
      );
    }
    families.push({
      pool: name,
      family,
      cidr,
      blockPrefix,
      excluded: excluded.filter((x) => x.family === family).map(({ start, end }) => ({
        start,
        end,
      })),
    });
  }
  return families.sort((a, b) => a.family - b.family);
}

/**
 * The name of a block's object: its CIDR with `.`, `:` and `/` as `-` (a valid object name). Two
 * nodes claiming one block create objects of one name, so exactly one of them succeeds.
 *
 * @example
 * ```ts
 * blockName(parseCidr("10.244.0.64/26")); // "10-244-0-64-26"
 * blockName(parseCidr("fd00:10:244::40/122")); // "fd00-10-244--40-122"
 * ```
 */
export function blockName(cidr: Cidr): string {
  return formatCidr(cidr).replace(/[.:/]/g, "-");
}

/**
 * The addresses a block hands out: from its second address to its last (IPv6) or last but one
 * (IPv4, the broadcast address), its first host being the gateway; the pool's excluded spans
 * stay out. Undefined when nothing in the block can be handed out.
 */
export function blockRange(
  block: Cidr,
  excluded: { start: bigint; end: bigint }[] = [],
): PoolRange | undefined {
  const gateway = addToIp(block.network, 1n);
  const last = lastAddress(block);
  const end = block.network.family === 4 ? addToIp(last, -1n) : last;
  const start = addToIp(block.network, 2n);
  if (start.value > end.value) return undefined;
  const inside = excluded.filter((x) => x.end >= start.value && x.start <= end.value);
  const range: PoolRange = { subnet: block, gateway, start, end, excluded: inside };
  let free = end.value - start.value + 1n;
  for (const x of inside) {
    const lo = x.start > start.value ? x.start : start.value;
    const hi = x.end < end.value ? x.end : end.value;
    free -= hi - lo + 1n;
  }
  // The gateway itself may be excluded: then the block has no usable gateway.
  if (free <= 0n || excluded.some((x) => gateway.value >= x.start && gateway.value <= x.end)) {
    return undefined;
  }
  return range;
}

/** How many candidates {@link nextFreeBlock} looks at, at most (IPv6 pools have astronomically many). */
const SCAN_LIMIT = 1n << 16n;

/**
 * The first block of `family` no node holds, scanning from a starting point derived from `seed`
 * (the node's name) so that nodes starting together do not all race for the same block. Blocks
 * that overlap a taken one (of any size, from any pool) or hand out nothing are skipped.
 *
 * @example
 * ```ts
 * const [f] = parsePool({ metadata: { name: "p" }, spec: { cidrs: ["10.0.0.0/24"] } });
 * nextFreeBlock(f, [], "n1"); // one of 10.0.0.0/26 … 10.0.0.192/26
 * ```
 */
export function nextFreeBlock(family: PoolFamily, taken: Cidr[], seed: string): Cidr | undefined {
  const size = 1n << BigInt((family.family === 4 ? 32 : 128) - family.blockPrefix);
  const count = 1n << BigInt(family.blockPrefix - family.cidr.prefix);
  const sameSize = new Set(
    taken.filter((t) => t.prefix === family.blockPrefix).map((t) => t.network.value),
  );
  const others = taken.filter((t) => t.prefix !== family.blockPrefix);
  const start = hash(seed) % count;
  const limit = count < SCAN_LIMIT ? count : SCAN_LIMIT;
  for (let i = 0n; i < limit; i++) {
    const index = (start + i) % count;
    const block: Cidr = {
      network: { family: family.family, value: family.cidr.network.value + index * size },
      prefix: family.blockPrefix,
    };
    if (sameSize.has(block.network.value)) continue;
    if (others.some((t) => cidrsOverlap(t, block))) continue;
    if (!blockRange(block, family.excluded)) continue;
    return block;
  }
  return undefined;
}

function hash(text: string): bigint {
  let h = 2166136261;
  for (const c of new TextEncoder().encode(text)) h = Math.imul(h ^ c, 16777619) >>> 0;
  return BigInt(h);
}
