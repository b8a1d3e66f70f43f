/**
 * Plans plugs as iproute2 batch lines and sysctl writes, per namespace. Pure: a plan is plain
 * data, tested without touching the kernel; {@link import("./ip_plumber.ts").IpPlumber} runs it.
 *
 * The default network is a node bridge holding the gateway addresses: each pod's veth host end
 * joins it, the pod end gets the pod's addresses with the subnet prefix and a default route per
 * family through the gateway. Pods on a node reach each other over the bridge and the host
 * through the gateway; the host reaches every pod through the bridge's connected routes.
 *
 * @module
 */
import {
  type BridgeSpec,
  GUARDED_GROUP_FWD_MASK,
  type InterfaceAddress,
  type PodPort,
  type PodRoute,
  type SublinkSpec,
  type VethSpec,
} from "./plumber.ts";

/** One sysctl write: the path under `/proc/sys/` and the value. */
export type Sysctl = [path: string, value: string];

/** What to run in one namespace: sysctls first, then the batch lines. */
export interface NamespacePlan {
  /** Sysctl writes, in order. */
  sysctls: Sysctl[];
  /** iproute2 batch lines, in order. */
  lines: string[];
  /** `bridge` batch lines (forwarding entries), run after `lines` in the same namespace. */
  bridgeLines?: string[];
}

/** A plug: the host namespace's part, then the pod namespace's part. */
export interface PlugPlan {
  /** Run in the host namespace first. */
  host: NamespacePlan;
  /** Then run inside the pod's namespace. */
  container: NamespacePlan;
}

/** Whether an address (with or without prefix) is IPv6. */
export function isIpv6(address: string): boolean {
  return address.includes(":");
}

/** The default route of the family of `address`. */
export function defaultDst(address: string): string {
  return isIpv6(address) ? "::/0" : "0.0.0.0/0";
}

/** `nodad` for IPv6: a pod's address is unique by allocation, waiting for DAD only delays it. */
function addrLine(a: InterfaceAddress, ifname: string): string {
  return `addr add ${a.cidr} dev ${ifname}${isIpv6(a.cidr) ? " nodad" : ""}`;
}

/**
 * Sysctls an interface inside the pod needs. IPv6 on, and no duplicate address detection on the
 * pod interface: its addresses are unique by allocation, and a link-local address still in
 * detection (a second or two after the link comes up) stalls neighbour discovery, so a new pod's
 * first IPv6 packets would wait for it. Router advertisements and redirects are not accepted
 * (port security): a pod's routes are Ferry's, never another pod's (IPv4 redirects are accepted
 * when either `all` or the interface accepts them, so both are off).
 */
function podSysctls(ifname: string, addresses: InterfaceAddress[]): Sysctl[] {
  const out: Sysctl[] = [];
  if (addresses.some((a) => !isIpv6(a.cidr))) {
    out.push(
      ["net/ipv4/conf/all/accept_redirects", "0"],
      [`net/ipv4/conf/${ifname}/accept_redirects`, "0"],
    );
  }
  if (addresses.some((a) => isIpv6(a.cidr))) {
    out.push(
      [`net/ipv6/conf/${ifname}/disable_ipv6`, "0"],
      [`net/ipv6/conf/${ifname}/accept_dad`, "0"],
      [`net/ipv6/conf/${ifname}/accept_ra`, "0"],
      [`net/ipv6/conf/${ifname}/accept_redirects`, "0"],
    );
  }
  return out;
}

/** Lines configuring an interface already in the pod: up, addresses, routes. */
function podLines(ifname: string, addresses: InterfaceAddress[], routes: PodRoute[]): string[] {
  return [
    "link set lo up",
    `link set ${ifname} up`,
    ...addresses.map((a) => addrLine(a, ifname)),
    ...routes.map((r) => `route add ${r.dst}${r.gw ? ` via ${r.gw}` : ""} dev ${ifname}`),
  ];
}

/** The default routes of a set of addresses: one per family that has a gateway. */
export function defaultRoutes(addresses: InterfaceAddress[]): PodRoute[] {
  const seen = new Set<string>();
  const routes: PodRoute[] = [];
  for (const a of addresses) {
    const dst = defaultDst(a.cidr);
    if (!a.gateway || seen.has(dst)) continue;
    seen.add(dst);
    routes.push({ dst, gw: a.gateway });
  }
  return routes;
}

/**
 * Plans the bridge: created when `exists` is false, then its MAC set to `mac` when given (a
 * bridge's own when it exists: set, it no longer follows its ports'), up with its MTU, no learning from
 * link-local group frames, and the gateway addresses (`addr replace`, so repeating it changes nothing); sysctls: IPv4 forwarding when any
 * gateway is IPv4, IPv6 enabled on the bridge and IPv6 forwarding when any is IPv6 (only when
 * `forwarding`).
 */
export function planBridge(
  spec: BridgeSpec,
  exists: boolean,
  forwarding: boolean,
  mac?: string,
): {
  create: string[];
  configure: NamespacePlan;
} {
  const v6 = spec.gateways.some(isIpv6);
  const v4 = spec.gateways.some((g) => !isIpv6(g));
  const sysctls: Sysctl[] = [];
  if (v6) sysctls.push([`net/ipv6/conf/${spec.name}/disable_ipv6`, "0"]);
  if (forwarding && v4) sysctls.push(["net/ipv4/ip_forward", "1"]);
  if (forwarding && v6) sysctls.push(["net/ipv6/conf/all/forwarding", "1"]);
  return {
    create: exists ? [] : [
      `link add ${spec.name} mtu ${spec.mtu}${mac ? ` address ${mac}` : ""} type bridge`,
    ],
    configure: {
      sysctls,
      lines: [
        // Set, the bridge's MAC stays: otherwise it follows the lowest MAC of its ports, and when
        // that port leaves, pods' frames to the gateway MAC they cached flood to every port.
        ...(mac ? [`link set ${spec.name} address ${mac}`] : []),
        `link set ${spec.name} mtu ${spec.mtu} up`,
        // No learning from link-local group frames (802.1X, LLDP, STP…): the bridge handles
        // those before its netfilter hooks, so port security never sees them (Linux 5.2).
        `link set ${spec.name} type bridge no_linklocal_learn 1`,
        ...spec.gateways.map((g) =>
          `addr replace ${g} dev ${spec.name}${isIpv6(g) ? " nodad" : ""}`
        ),
      ],
    },
  };
}

/**
 * Plans a pod's bridge port as Ferry keeps it ({@link Plumber.securePort}): the bridge learns
 * from no frame of the pod's (link-local group frames are learned from before any netfilter
 * hook), its MAC is a static, sticky entry, no frame to a MAC the bridge does not know is flooded
 * to it, and a guarded port's link-local group frames take the bridge's forwarding path through
 * the guard.
 *
 * @example
 * ```ts
 * planPodPort({ hostIfname: "fy01", podMac: "02:00:00:00:00:02", guarded: false }).bridgeLines;
 * // ["fdb replace 02:00:00:00:00:02 dev fy01 master static sticky"]
 * ```
 */
export function planPodPort(port: PodPort): { lines: string[]; bridgeLines: string[] } {
  const mask = port.guarded ? ` group_fwd_mask 0x${GUARDED_GROUP_FWD_MASK.toString(16)}` : "";
  return {
    lines: [
      `link set ${port.hostIfname} type bridge_slave hairpin on learning off flood off${mask}`,
    ],
    bridgeLines: [`fdb replace ${port.podMac} dev ${port.hostIfname} master static sticky`],
  };
}

/**
 * Plans a veth plug on the bridge.
 *
 * @example
 * ```ts
 * planVeth(spec).host.lines[0]; // "link add fy… mtu 1500 address … type veth peer name eth0 … netns /var/run/netns/p"
 * ```
 */
export function planVeth(spec: VethSpec): PlugPlan {
  const { hostIfname: host, ifname, mtu } = spec;
  const port = planPodPort({
    hostIfname: host,
    podMac: spec.containerMac,
    guarded: spec.hostGroup !== undefined,
  });
  const group = spec.hostGroup ? ` group ${spec.hostGroup}` : "";
  return {
    host: {
      sysctls: [],
      lines: [
        `link add ${host} mtu ${mtu} address ${spec.hostMac}${group} type veth peer name ${ifname} mtu ${mtu} address ${spec.containerMac} netns ${spec.netns}`,
        `link set ${host} master ${spec.bridge} up`,
        // Before the pod end is up.
        ...port.lines,
      ],
      bridgeLines: port.bridgeLines,
    },
    container: {
      sysctls: podSysctls(ifname, spec.addresses),
      lines: podLines(ifname, spec.addresses, defaultRoutes(spec.addresses)),
    },
  };
}

/**
 * Plans a macvlan or ipvlan plug: the link is created directly in the pod's namespace (its name
 * never appears in the host's), then configured there.
 */
export function planSublink(spec: SublinkSpec): PlugPlan {
  const opts = [
    spec.mtu ? ` mtu ${spec.mtu}` : "",
    spec.kind === "macvlan" && spec.mac ? ` address ${spec.mac}` : "",
  ].join("");
  const type = spec.kind === "macvlan"
    ? `macvlan mode ${spec.mode}`
    : `ipvlan mode ${spec.mode}${spec.flag ? ` ${spec.flag}` : ""}`;
  return {
    host: {
      sysctls: [],
      lines: [
        `link add link ${spec.master} name ${spec.ifname}${opts} netns ${spec.netns} type ${type}`,
      ],
    },
    container: {
      sysctls: podSysctls(spec.ifname, spec.addresses),
      lines: podLines(spec.ifname, spec.addresses, spec.routes),
    },
  };
}
