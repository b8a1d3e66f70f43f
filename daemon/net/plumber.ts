/**
 * The plumbing interface: what the daemon needs from the kernel to plug, unplug and inspect a
 * pod interface. Implementations: {@link import("./ip_plumber.ts").IpPlumber} (iproute2 batches);
 * later ones (in-process netlink, bridges, macvlan, delegation) implement the same interface.
 *
 * @module
 */

/** Everything needed to plug one veth-attached pod interface. */
export interface VethSpec {
  /** The pod's network namespace (a path). */
  netns: string;
  /** The interface name inside the pod. */
  ifname: string;
  /** The host end's name. */
  hostIfname: string;
  /** The MAC of the pod end. */
  containerMac: string;
  /** The MAC of the host end. */
  hostMac: string;
  /** MTU of both ends. */
  mtu: number;
  /** The pod's address without prefix, e.g. `10.244.0.5`. */
  address: string;
  /** The gateway the pod routes through (held by the host end). */
  gateway: string;
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

/** Plugs and unplugs interfaces. Every method may throw a {@link import("../../lib/cni/errors.ts").CniError}. */
export interface Plumber {
  /** Creates the pair, moves the pod end into the namespace and configures both ends. */
  plugVeth(spec: VethSpec): Promise<void>;
  /** Removes the host end (and with it the pod end); an absent link is success. */
  unplugVeth(hostIfname: string): Promise<void>;
  /** Reads an interface in a namespace; null when the namespace or the interface is gone. */
  inspect(netns: string, ifname: string): Promise<LiveInterface | null>;
}
