/**
 * The addresses a rule's `ipBlock`s allow, as disjoint ranges, pure: each block's CIDR less its
 * `except`s, the blocks of a rule added up. Written as one interval set, they cost the rule one
 * set lookup whatever the number of blocks and excepts, where a rule per block (each with its own
 * set of excepts) made a table's size and nft's work grow with blocks × excepts × ports.
 *
 * @module
 */
import { formatIp, parseCidr } from "../ipam/cidr.ts";
import type { AddressBlock } from "./compile.ts";

/** A range of addresses, both ends included. */
interface Range {
  start: bigint;
  end: bigint;
}

const BITS = { 4: 32n, 6: 128n } as const;

/** A CIDR (or a bare address) as a range; undefined for another family. */
function rangeOf(text: string, family: 4 | 6): Range | undefined {
  const c = parseCidr(text.includes("/") ? text : `${text}/${text.includes(":") ? 128 : 32}`);
  if (c.network.family !== family) return undefined;
  const host = (1n << (BITS[family] - BigInt(c.prefix))) - 1n;
  return { start: c.network.value, end: c.network.value | host };
}

/** Sorted, overlapping and touching ranges joined. */
function merged(ranges: Range[]): Range[] {
  const out: Range[] = [];
  for (
    const r of [...ranges].sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0))
  ) {
    const last = out.at(-1);
    if (last && r.start <= last.end + 1n) {
      if (r.end > last.end) last.end = r.end;
    } else out.push({ ...r });
  }
  return out;
}

/** `from` less the (merged, sorted) ranges `holes`. */
function subtract(from: Range, holes: Range[]): Range[] {
  const out: Range[] = [];
  let start = from.start;
  for (const h of holes) {
    if (h.end < start || h.start > from.end) continue;
    if (h.start > start) out.push({ start, end: h.start - 1n });
    start = h.end + 1n;
    if (start > from.end) return out;
  }
  out.push({ start, end: from.end });
  return out;
}

/** A range as nft writes an interval element: an address, a prefix, or `first-last`. */
function element(r: Range, family: 4 | 6): string {
  const ip = (value: bigint) => formatIp({ family, value });
  if (r.start === r.end) return ip(r.start);
  const size = r.end - r.start + 1n;
  // A prefix: a power of two in size, aligned on it.
  if ((size & (size - 1n)) === 0n && r.start % size === 0n) {
    return `${ip(r.start)}/${BITS[family] - BigInt(size.toString(2).length - 1)}`;
  }
  return `${ip(r.start)}-${ip(r.end)}`;
}

/**
 * The addresses of `family` that `blocks` allow (each CIDR less its excepts, added up), as the
 * elements of an nft interval set: disjoint, sorted, none touching another. Empty when the
 * blocks allow no address of the family.
 *
 * @example
 * ```ts
 * blockRanges([{ cidr: "10.0.0.0/8", except: ["10.1.0.0/16"] }], 4);
 * // ["10.0.0.0/16", "10.2.0.0-10.255.255.255"]
 * ```
 */
export function blockRanges(blocks: AddressBlock[], family: 4 | 6): string[] {
  const allowed: Range[] = [];
  for (const b of blocks) {
    const whole = rangeOf(b.cidr, family);
    if (!whole) continue;
    const holes = merged(
      b.except.map((e) => rangeOf(e, family)).filter((r): r is Range => r !== undefined),
    );
    allowed.push(...subtract(whole, holes));
  }
  return merged(allowed).map((r) => element(r, family));
}
