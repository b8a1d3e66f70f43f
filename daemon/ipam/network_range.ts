/**
 * The ranges of the default network on a node: one per family of its podCIDR list, the gateway
 * the first host, addresses handed out from the second on. Pure.
 *
 * @module
 */
import { parseCidr } from "./cidr.ts";
import { defaultRange, type PoolRange } from "./local_pool.ts";

/** One range of the default network: its subnet and the part handed out. */
export interface NetworkRange {
  /** The subnet as configured, e.g. `10.244.1.0/24`. */
  subnet: string;
  /** What is allocated from it. */
  range: PoolRange;
}

/**
 * The ranges of a podCIDR list (one per family, IPv4 first): gateway the first host, addresses
 * from the second on.
 *
 * @throws {Error} for a CIDR that does not parse, or two of one family.
 * @example
 * ```ts
 * rangesOf(["10.244.1.0/24", "fd00:10:244:1::/64"]).map((r) => r.subnet);
 * ```
 */
export function rangesOf(cidrs: string[]): NetworkRange[] {
  const ranges = cidrs.map((subnet) => ({ subnet, range: defaultRange(parseCidr(subnet)) }));
  ranges.sort((a, b) => a.range.subnet.network.family - b.range.subnet.network.family);
  const families = ranges.map((r) => r.range.subnet.network.family);
  if (new Set(families).size !== families.length) {
    throw new Error(`more than one range of a family in ${cidrs.join(", ")}`);
  }
  return ranges;
}
