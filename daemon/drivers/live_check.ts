/**
 * Compares a recorded CNI result with the live state of an interface (for CHECK). Pure.
 *
 * @module
 */
import type { CniResult } from "../../lib/cni/schemas.ts";
import type { LiveInterface } from "../net/plumber.ts";

/**
 * The first way `live` differs from what `expected` says about interface `ifname` in `netns`,
 * or undefined when they agree.
 */
export function firstDifference(
  expected: CniResult,
  ifname: string,
  netns: string,
  live: LiveInterface | null,
): string | undefined {
  if (!live) return `interface ${ifname} does not exist in ${netns}`;
  const index = expected.interfaces?.findIndex((i) => i.name === ifname && i.sandbox === netns) ??
    -1;
  if (index < 0) return `the result has no interface ${ifname} in ${netns}`;
  const iface = expected.interfaces![index];
  if (iface.mac && iface.mac.toLowerCase() !== live.mac.toLowerCase()) {
    return `interface ${ifname} has MAC ${live.mac}, expected ${iface.mac}`;
  }
  if (iface.mtu && iface.mtu !== live.mtu) {
    return `interface ${ifname} has MTU ${live.mtu}, expected ${iface.mtu}`;
  }
  if (!live.up) return `interface ${ifname} is down`;
  for (const ip of expected.ips ?? []) {
    if (ip.interface !== index) continue;
    if (!live.addresses.includes(ip.address)) {
      return `interface ${ifname} lacks address ${ip.address}`;
    }
  }
  for (const route of expected.routes ?? []) {
    const found = live.routes.some((r) =>
      r.dst === route.dst && (route.gw === undefined || r.gw === route.gw)
    );
    if (!found) {
      return `route to ${route.dst}${route.gw ? ` via ${route.gw}` : ""} is missing on ${ifname}`;
    }
  }
  return undefined;
}
