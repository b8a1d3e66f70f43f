/**
 * Plans a veth plug as iproute2 batch lines: one batch for the host namespace, one for the pod's.
 * Pure: the plan is plain data, tested without touching the kernel.
 *
 * The pod gets its address as a /32 (/128) with an on-link route to the gateway and a default
 * route through it; the host end holds the gateway address and a host route to the pod, so the host
 * reaches every pod and every pod reaches the host.
 *
 * @module
 */
import type { VethSpec } from "./plumber.ts";

/** iproute2 batch lines for each namespace. */
export interface VethPlan {
  /** Lines run in the host namespace (create the pair, configure the host end). */
  host: string[];
  /** Lines run inside the pod's namespace (configure the pod end). */
  container: string[];
}

/** The prefix length of a single address of the family of `ip`. */
export function hostPrefix(ip: string): number {
  return ip.includes(":") ? 128 : 32;
}

/**
 * Plans the plug.
 *
 * @example
 * ```ts
 * planVeth(spec).host[0]; // "link add fy… mtu 1500 address … type veth peer name eth0 … netns /var/run/netns/p"
 * ```
 */
export function planVeth(spec: VethSpec): VethPlan {
  const { hostIfname: host, ifname, mtu, gateway, address } = spec;
  const len = hostPrefix(address);
  const family = address.includes(":") ? "-6 " : "";
  const defaultDst = address.includes(":") ? "::/0" : "0.0.0.0/0";
  return {
    host: [
      `link add ${host} mtu ${mtu} address ${spec.hostMac} type veth peer name ${ifname} mtu ${mtu} address ${spec.containerMac} netns ${spec.netns}`,
      `link set ${host} up`,
      `${family}addr add ${gateway}/${len} dev ${host} scope link`,
      `${family}route add ${address}/${len} dev ${host} scope link src ${gateway}`,
    ],
    container: [
      "link set lo up",
      `link set ${ifname} up`,
      `${family}addr add ${address}/${len} dev ${ifname}`,
      `${family}route add ${gateway}/${len} dev ${ifname} scope link`,
      `${family}route add ${defaultDst} via ${gateway} dev ${ifname}`,
    ],
  };
}
