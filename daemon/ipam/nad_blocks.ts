/**
 * The blocks of NAD networks' address spaces, the pure part: the `NetworkBlock` object
 * (`deploy/base/crds/networkblocks.yaml`), how big a range's blocks are, which block a node
 * claims next, what a block hands out for its range, and the object's name.
 *
 * **Block size.** NAD ranges are often small (a /28 on a telco VLAN) and shared by many nodes;
 * a block a node holds but half uses strands addresses no other node may hand out. So a range's
 * blocks hold at most 1/64 of the range (and at most {@link MAX_BLOCK_ADDRESSES}): a range of up
 * to 127 addresses is claimed one address at a time (every address usable however pods spread
 * over nodes; a claim per ADD, which such a range makes at most 127 times), a /24 in blocks of
 * 2, a /20 in blocks of 32. What nodes can strand is bounded by (nodes × (block size − 1)), at
 * most nodes/64 of the range. When no block of that size is free any more, smaller ones are
 * claimed in what is left, down to single addresses ({@link nextFreeNetworkBlock}), so the range
 * is used up to its last free address before it answers "full".
 *
 * **Claiming ahead.** A node whose blocks of a range are down to half a block free claims its next
 * block at once, in the background ({@link wantsBlockAhead}), so the ADDs that would find them
 * full do not wait for a claim (claims are serialised cluster-wide: ten nodes filling their
 * blocks together would queue behind each other). Only blocks of the range's full size, of at
 * least 4 addresses, while fewer than three quarters of the range's blocks are claimed
 * ({@link mayClaimAhead}): an early claim never takes the last blocks or single addresses of a
 * range, and one a node never used is given back when it has stayed empty for
 * `ipam.blockReleaseSeconds`.
 *
 * @module
 */
import type { KubeObject } from "../k8s/client.ts";
import type { BlockAllocation } from "./ip_pools.ts";
import { type Cidr, cidrsOverlap, formatCidr, formatIp, lastAddress } from "./cidr.ts";
import type { PoolRange } from "./local_pool.ts";
import { type NadRange, rangeSize } from "./nad_ipam.ts";

/** The most addresses a block of a NAD range holds. */
export const MAX_BLOCK_ADDRESSES = 32n;

/** A `NetworkBlock` (`ferry.dev/v1`, cluster-scoped), named by {@link networkBlockName}. */
export interface NetworkBlockObject extends KubeObject {
  /** The block. */
  spec?: {
    /** The address space ({@link import("./nad_ipam.ts").spaceKey}). */
    network: string;
    /** The range it was claimed for ({@link rangeId}), or `static` for a static address. */
    range: string;
    /** Its CIDR. */
    cidr: string;
    /** The node that owns it and alone allocates in it. */
    node: string;
    /** The addresses handed out. */
    allocations?: BlockAllocation[];
  };
}

/** The `range` of a block holding one static address (from a pod's `ips`). */
export const STATIC_RANGE = "static";

/**
 * A range's identity within its space: its CIDR, first and last address and exclusions. NADs
 * whose ranges have one identity share blocks; ranges that differ claim blocks of their own (which
 * never overlap another's in the space).
 */
export function rangeId(range: NadRange): string {
  const fam = range.cidr.network.family;
  const t = (v: bigint) => formatIp({ family: fam, value: v });
  const ex = range.excluded.map((x) =>
    x.start === x.end ? t(x.start) : `${t(x.start)}-${t(x.end)}`
  );
  return `${formatCidr(range.cidr)} ${formatIp(range.start)}-${formatIp(range.end)}` +
    (ex.length ? ` excluding ${ex.join(",")}` : "");
}

/** The prefix length of `range`'s blocks (see the module doc). */
export function blockPrefixFor(range: NadRange): number {
  const bits = range.cidr.network.family === 4 ? 32 : 128;
  let size = 1n;
  const limit = rangeSize(range) / 64n;
  while (size * 2n <= limit && size * 2n <= MAX_BLOCK_ADDRESSES) size *= 2n;
  let prefix = bits;
  for (let s = size; s > 1n; s /= 2n) prefix--;
  return Math.max(prefix, range.cidr.prefix);
}

/** Addresses in a block of `prefix` of the family `family`. */
function blockAddresses(family: number, prefix: number): bigint {
  return 1n << BigInt((family === 4 ? 32 : 128) - prefix);
}

/**
 * Whether a node whose blocks of `range` have `free` addresses left should claim its next block
 * now, before an ADD needs it: half a block or fewer left, in a range whose blocks hold at least
 * 4 addresses (see the module doc).
 *
 * @example
 * ```ts
 * wantsBlockAhead(parseWhereabouts({ range: "10.1.0.0/16" }, "n").ranges[0], 16); // true (blocks of 32)
 * ```
 */
export function wantsBlockAhead(range: NadRange, free: number): boolean {
  const size = blockAddresses(range.cidr.network.family, blockPrefixFor(range));
  return size >= 4n && BigInt(free) * 2n <= size;
}

/**
 * Whether `cidr`, the next free block of `range` ({@link nextFreeNetworkBlock}) while `claimed`
 * blocks of its space exist, may be claimed ahead of need: only a block of the range's full size,
 * while fewer than three quarters of the range's blocks are claimed.
 */
export function mayClaimAhead(range: NadRange, cidr: Cidr, claimed: number): boolean {
  const prefix = blockPrefixFor(range);
  if (cidr.prefix !== prefix) return false;
  const size = blockAddresses(range.cidr.network.family, prefix);
  const count = range.end.value / size - range.start.value / size + 1n;
  return BigInt(claimed) * 4n < count * 3n;
}

/** What block `cidr` hands out for `range`: its part of the range, the range's exclusions kept. */
export function networkBlockRange(range: NadRange, cidr: Cidr): PoolRange | undefined {
  const lo = cidr.network.value > range.start.value ? cidr.network.value : range.start.value;
  const last = lastAddress(cidr).value;
  const hi = last < range.end.value ? last : range.end.value;
  if (hi < lo) return undefined;
  const fam = range.cidr.network.family;
  const excluded = range.excluded.filter((x) => x.end >= lo && x.start <= hi);
  let free = hi - lo + 1n;
  for (const x of excluded) {
    free -= (x.end < hi ? x.end : hi) - (x.start > lo ? x.start : lo) + 1n;
  }
  if (free <= 0n) return undefined;
  return {
    subnet: range.cidr,
    start: { family: fam, value: lo },
    end: { family: fam, value: hi },
    // The range's network address: never inside start..end, so never skipped by mistake.
    gateway: range.cidr.network,
    excluded,
  };
}

/** How many candidates one prefix length is scanned for, at most (IPv6 ranges are vast). */
const SCAN_LIMIT = 1n << 16n;

/**
 * The next block of `range` no block of `taken` overlaps: of the range's block size first
 * (scanning from a point derived from `seed`, the node's name, so that nodes do not all race for
 * one block), then ever smaller ones down to a single address.
 *
 * @example
 * ```ts
 * nextFreeNetworkBlock(range, [], "n1"); // a block of range, of blockPrefixFor(range)
 * ```
 */
export function nextFreeNetworkBlock(
  range: NadRange,
  taken: Cidr[],
  seed: string,
): Cidr | undefined {
  const fam = range.cidr.network.family;
  const bits = fam === 4 ? 32 : 128;
  const same = taken.filter((t) => t.network.family === fam);
  for (let prefix = blockPrefixFor(range); prefix <= bits; prefix++) {
    const size = blockAddresses(fam, prefix);
    // The blocks of this size that touch start..end.
    const first = range.start.value / size;
    const count = range.end.value / size - first + 1n;
    const from = prefix === blockPrefixFor(range) ? hash(seed) % count : 0n;
    const limit = count < SCAN_LIMIT ? count : SCAN_LIMIT;
    for (let i = 0n; i < limit; i++) {
      const cidr: Cidr = {
        network: { family: fam, value: (first + (from + i) % count) * size },
        prefix,
      };
      if (same.some((t) => cidrsOverlap(t, cidr))) continue;
      if (!networkBlockRange(range, cidr)) continue;
      return cidr;
    }
  }
  return undefined;
}

/**
 * The name of a block's object: a hash of its space and its CIDR (`nb-1a2b3c4d-10-1-0-0-28`),
 * so that two nodes claiming one block of one space collide on the name, and blocks of one CIDR
 * in different spaces do not.
 */
export function networkBlockName(network: string, cidr: Cidr): string {
  return `nb-${networkHash(network)}-${formatCidr(cidr).replace(/[.:/]/g, "-")}`;
}

/** The space's label value (`ferry.dev/network`): a hash, as space keys are not label values. */
export function networkHash(network: string): string {
  return hash(network).toString(16).padStart(8, "0");
}

function hash(text: string): bigint {
  let h = 2166136261;
  for (const c of new TextEncoder().encode(text)) h = Math.imul(h ^ c, 16777619) >>> 0;
  return BigInt(h);
}
