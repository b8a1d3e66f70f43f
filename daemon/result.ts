/**
 * Builds and compares CNI results. Pure: what the runtime is told about a plugged interface, and
 * the first difference between a recorded result and the live state (for CHECK).
 *
 * @module
 */
import type { CniResult } from "../lib/cni/schemas.ts";
import { CURRENT_VERSION } from "../lib/cni/versions.ts";
import type { LiveInterface, VethSpec } from "./net/plumber.ts";
import { hostPrefix } from "./net/veth_plan.ts";

/**
 * The result of a veth plug, appended to `prev` (a chained plugin's previous result) when given.
 *
 * @example
 * ```ts
 * vethResult(spec, undefined).ips; // [{ address: "10.244.0.5/32", gateway: "10.244.0.1", interface: 1 }]
 * ```
 */
export function vethResult(spec: VethSpec, prev: CniResult | undefined): CniResult {
  const interfaces = [...(prev?.interfaces ?? [])];
  interfaces.push({ name: spec.hostIfname, mac: spec.hostMac });
  const podIndex =
    interfaces.push({ name: spec.ifname, mac: spec.containerMac, sandbox: spec.netns }) - 1;
  const defaultDst = spec.address.includes(":") ? "::/0" : "0.0.0.0/0";
  const result: CniResult = {
    cniVersion: CURRENT_VERSION,
    interfaces,
    ips: [
      ...(prev?.ips ?? []),
      {
        address: `${spec.address}/${hostPrefix(spec.address)}`,
        gateway: spec.gateway,
        interface: podIndex,
      },
    ],
    routes: [...(prev?.routes ?? []), { dst: defaultDst, gw: spec.gateway }],
  };
  if (prev?.dns) result.dns = prev.dns;
  return result;
}

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
