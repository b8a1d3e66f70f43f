/**
 * The plumbing interface: what the daemon needs from the kernel to plug, unplug and inspect pod
 * interfaces. Implementations: {@link import("./netlink/netlink_plumber.ts").NetlinkPlumber}
 * (rtnetlink in-process for the default network's plug and unplug, the default) and
 * {@link import("./ip_plumber.ts").IpPlumber} (iproute2 batches, one process per namespace
 * touched; the netlink plumber hands it the rarer operations).
 *
 * @module
 */

/** An address for an interface, with its gateway when it routes through one. */
export interface InterfaceAddress {
  /** The address with the subnet's prefix, e.g. `10.244.0.5/24` or `fd00::5/64`. */
  cidr: string;
  /** The gateway of that subnet, e.g. `10.244.0.1`; a default route goes through it. */
  gateway?: string;
}

/** A route to set inside the pod. */
export interface PodRoute {
  /** Destination, e.g. `0.0.0.0/0`. */
  dst: string;
  /** Next hop; on-link when absent. */
  gw?: string;
}

/** The node bridge that pod veths attach to and that holds the gateway addresses. */
export interface BridgeSpec {
  /** Its name, e.g. `ferry0`. */
  name: string;
  /** Its MTU. */
  mtu: number;
  /** The gateway addresses with the subnets' prefixes, e.g. `10.244.0.1/24`. */
  gateways: string[];
}

/**
 * The IEEE link-local groups (`01:80:c2:00:00:0X`, one bit each) a guarded pod port's frames take
 * the bridge's forwarding path for, through its prerouting hook, where the guard sees and drops
 * them: every group but pause (bit 1, which the bridge drops itself and a port may not forward).
 * Otherwise the bridge hands such a frame up the port's own stack, past every bridge hook: an
 * IPv4 packet or ARP request in one reached the node from any address.
 */
export const GUARDED_GROUP_FWD_MASK = 0xfffd;

/** Everything needed to plug one veth pair whose host end joins the node bridge. */
export interface VethSpec {
  /** The pod's network namespace (a path). */
  netns: string;
  /** The interface name inside the pod. */
  ifname: string;
  /** The host end's name. */
  hostIfname: string;
  /** The bridge the host end joins. */
  bridge: string;
  /** The MAC of the pod end. */
  containerMac: string;
  /** The MAC of the host end. */
  hostMac: string;
  /** MTU of both ends. */
  mtu: number;
  /** The pod's addresses, one per family; a default route goes through each gateway. */
  addresses: InterfaceAddress[];
  /**
   * The host end's interface group, set as it is created (port security's: such a port sends
   * nothing until its pod is admitted); the default group when absent.
   */
  hostGroup?: number;
}

/** A macvlan or ipvlan interface created on a master link and moved into the pod. */
export interface SublinkSpec {
  /** `macvlan` or `ipvlan`. */
  kind: "macvlan" | "ipvlan";
  /** The pod's network namespace (a path). */
  netns: string;
  /** The interface name inside the pod. */
  ifname: string;
  /** The host link it sits on. */
  master: string;
  /** macvlan: bridge, private, vepa, passthru; ipvlan: l2, l3, l3s. */
  mode: string;
  /** ipvlan only: bridge, private or vepa. */
  flag?: string;
  /** MTU; the master's when absent. */
  mtu?: number;
  /** macvlan only: the MAC; the kernel picks one when absent. */
  mac?: string;
  /** Addresses to set. */
  addresses: InterfaceAddress[];
  /** Routes to set (a default route comes from each gateway when asked for there). */
  routes: PodRoute[];
}

/** An interface as it is live in a namespace. */
export interface LiveInterface {
  /** Its name. */
  name: string;
  /** Its MAC. */
  mac: string;
  /** Its MTU. */
  mtu: number;
  /** Whether it is administratively up. */
  up: boolean;
  /** Its addresses as `address/prefix` (global and link scope, not IPv6 link-local). */
  addresses: string[];
  /** The routes through it, `dst` normalised (`0.0.0.0/0` for default). */
  routes: { dst: string; gw?: string }[];
}

/** A pod's port on a bridge: its host-side link, the pod's MAC, and whether port security guards it. */
export interface PodPort {
  /** The host end of the pod's veth. */
  hostIfname: string;
  /** The MAC of the pod's end. */
  podMac: string;
  /** Whether the port is port security's (in its interface group). */
  guarded: boolean;
}

/** Plugs and unplugs interfaces. Every method may throw a {@link import("../../lib/cni/errors.ts").CniError}. */
export interface Plumber {
  /** Creates the bridge if missing, brings it up, sets its MTU and gateway addresses and the forwarding sysctls. Idempotent. */
  ensureBridge(spec: BridgeSpec): Promise<void>;
  /**
   * Creates the pair, attaches the host end to the bridge, moves the pod end into the namespace
   * and configures it. With `addressed`, `spec.addresses` may still be filled in while the pair
   * is created: the pod end is configured once `addressed` resolves (a rejection fails the plug
   * with its reason, and the caller rolls back).
   */
  plugVeth(spec: VethSpec, addressed?: Promise<void>): Promise<void>;
  /** Removes the host end (and with it the pod end); an absent link is success. */
  unplugVeth(hostIfname: string): Promise<void>;
  /**
   * Sets a pod's bridge port as a plug leaves it: hairpin on, learning and unknown-unicast
   * flooding off, a guarded port's link-local group frames through the bridge's hooks
   * ({@link GUARDED_GROUP_FWD_MASK}), the pod's MAC its static, sticky forwarding entry.
   * Idempotent; an absent link is success. At start, for ports an older Ferry plugged.
   */
  securePort(port: PodPort): Promise<void>;
  /**
   * Creates a macvlan/ipvlan link in the pod's namespace and configures it. On failure it removes
   * the link only if this call created it: an interface that already had the name stays.
   */
  plugSublink(spec: SublinkSpec): Promise<void>;
  /** Removes an interface inside a namespace; an absent namespace or link is success. */
  unplugIn(netns: string, ifname: string): Promise<void>;
  /** Reads an interface in a namespace; null when the namespace or the interface is gone. */
  inspect(netns: string, ifname: string): Promise<LiveInterface | null>;
  /** The host's default-route interface (macvlan/ipvlan's master when none is configured). */
  defaultRouteInterface(): Promise<string | undefined>;
  /** Releases what the plumber holds open (sockets, descriptors); optional. */
  close?(): void;
  /** The names of the links enslaved to `bridge` in the host namespace (none when it is absent). */
  bridgePorts(bridge: string): Promise<string[]>;
  /** Takes a gateway address (`address/prefix`) off the bridge; an absent one is success. */
  removeBridgeAddress(bridge: string, cidr: string): Promise<void>;
}
