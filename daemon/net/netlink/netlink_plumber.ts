/**
 * {@link Plumber} with the hot path in-process: a default-network plug (veth pair created up on
 * the bridge with its peer directly in the pod's namespace, then the pod end's sysctls, link,
 * addresses and routes) and an unplug are rtnetlink messages sent from the daemon itself, with
 * no process started; so is listing a bridge's ports. The rarer operations (bridge set-up,
 * macvlan/ipvlan, CHECK's inspection of the pod's interface) go to the iproute2 plumber handed in.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../../lib/cni/errors.ts";
import { defaultRoutes, planVeth } from "../link_plan.ts";
import type { BridgeSpec, LiveInterface, Plumber, SublinkSpec, VethSpec } from "../plumber.ts";
import { type NetlinkSys, SyscallError } from "./libc.ts";
import { PROC_SYS } from "../ip_runner.ts";
import {
  delLink,
  dumpLinksOf,
  hairpinOn,
  linkUp,
  newAddr,
  newDefaultRoute,
  newVeth,
} from "./messages.ts";
import { ACK_BUFFER_BYTES, RouteSocket } from "./route_socket.ts";
import { RouteSocketPool } from "./socket_pool.ts";

const ENODEV = 19;
const LOOPBACK_INDEX = 1;

/**
 * The netlink plumber.
 *
 * @example
 * ```ts
 * const plumber = new NetlinkPlumber(Libc.open(), new IpPlumber(new SpawningIpRunner()));
 * ```
 */
export class NetlinkPlumber implements Plumber {
  readonly #sys: NetlinkSys;
  readonly #rest: Plumber;
  readonly #homeFd: number;
  readonly #host: RouteSocket;
  readonly #offThread: RouteSocketPool;
  readonly #sysctlDir: string;

  /**
   * Opens the daemon's own namespace and a netlink socket in it; the requests sent from workers
   * take sockets of `offThread` (by default a pool of this namespace's). The pod end's sysctls are
   * written below `sysctlDir` from inside the pod's namespace (see `SpawningIpRunner`).
   */
  constructor(
    sys: NetlinkSys,
    rest: Plumber,
    sysctlDir = PROC_SYS,
    offThread = new RouteSocketPool(sys),
  ) {
    this.#sys = sys;
    this.#rest = rest;
    this.#sysctlDir = sysctlDir;
    this.#homeFd = sys.openRead("/proc/thread-self/ns/net");
    this.#host = new RouteSocket(sys, sys.netlinkSocket());
    this.#offThread = offThread;
  }

  /** Through iproute2 (once per daemon start, or when the bridge vanished). */
  ensureBridge(spec: BridgeSpec): Promise<void> {
    return this.#rest.ensureBridge(spec);
  }

  /**
   * Plugs with rtnetlink messages; code 5 on failure (the caller rolls back). The pod end is
   * configured once `addressed` resolves (the pair is created meanwhile).
   */
  async plugVeth(spec: VethSpec, addressed?: Promise<void>): Promise<void> {
    try {
      await this.#plug(spec, addressed);
    } catch (e) {
      throw ioError(`failed to plug ${spec.ifname} in ${spec.netns}`, e);
    }
  }

  /**
   * Creating the pair is the kernel's slow part (a few milliseconds, done inside `send`), so it
   * is sent from a worker thread on a socket of its own (kept open between plugs); its answer is read back on the JS
   * thread (it is queued by the time `send` returns). The rest is quick: links are looked up by
   * `ioctl` (RTM_GETLINK would wait for the kernel's routing lock, which whoever creates or
   * deletes links holds for milliseconds at a time: under a burst of ADDs, the daemon's own
   * workers), and the pod end's links, addresses and routes go as one batch, once the addresses
   * are known (`addressed`: their allocation runs while the pair is created).
   */
  async #plug(spec: VethSpec, addressed?: Promise<void>): Promise<void> {
    const master = this.#host.indexOf(`bridge "${spec.bridge}"`, spec.bridge);
    const podFd = this.#sys.openRead(spec.netns);
    try {
      this.#assertForeign(podFd, spec.netns);
      await this.#offThread.use((create) =>
        create.ackOffThread(
          `create veth ${spec.hostIfname} with peer ${spec.ifname}`,
          (seq) =>
            newVeth(
              seq,
              { name: spec.hostIfname, mac: spec.hostMac, mtu: spec.mtu },
              { name: spec.ifname, mac: spec.containerMac, mtu: spec.mtu },
              master,
              podFd,
            ),
        )
      );
      const hostIndex = this.#host.indexOf(`find ${spec.hostIfname}`, spec.hostIfname);
      this.#host.ack(`hairpin on ${spec.hostIfname}`, (seq) => hairpinOn(seq, hostIndex));
      await addressed;
      const { sysctls } = planVeth(spec).container;
      const pod = this.#sys.inNetns(podFd, this.#homeFd, () => {
        for (const [path, value] of sysctls) {
          this.#sys.writeFile(`${this.#sysctlDir}/${path}`, value);
        }
        return new RouteSocket(this.#sys, this.#sys.netlinkSocket(), ACK_BUFFER_BYTES);
      });
      try {
        const index = pod.indexOf(`find ${spec.ifname}`, spec.ifname);
        pod.ackAll([
          { what: "set lo up", build: (seq) => linkUp(seq, LOOPBACK_INDEX) },
          { what: `set ${spec.ifname} up`, build: (seq) => linkUp(seq, index) },
          ...spec.addresses.map((a) => ({
            what: `add address ${a.cidr}`,
            build: (seq: number) => newAddr(seq, index, a.cidr),
          })),
          ...defaultRoutes(spec.addresses).map((r) => ({
            what: `add route ${r.dst} via ${r.gw}`,
            build: (seq: number) => newDefaultRoute(seq, index, r.gw!),
          })),
        ]);
      } finally {
        pod.close();
      }
    } finally {
      this.#sys.close(podFd);
    }
  }

  /**
   * Refuses the daemon's own namespace (the node's, under hostNetwork), whatever path led there:
   * the service checked the path before, this checks the descriptor actually opened.
   */
  #assertForeign(fd: number, path: string): void {
    const pod = this.#sys.identity(fd);
    const home = this.#sys.identity(this.#homeFd);
    if (pod.dev === home.dev && pod.ino === home.ino) {
      throw new CniError(
        CNI_ERROR.INVALID_ENV,
        `invalid CNI_NETNS: ${path} is the Ferry daemon's own network namespace`,
      );
    }
  }

  /**
   * Deletes the host end with one message on a socket of its own (from the pool), off the JS
   * thread (the kernel takes tens of milliseconds to tear a pair down); an absent link is
   * success.
   */
  async unplugVeth(hostIfname: string): Promise<void> {
    try {
      await this.#offThread.use((sock) =>
        sock.ackOffThread(`delete ${hostIfname}`, (seq) => delLink(seq, hostIfname))
      );
    } catch (e) {
      if (e instanceof SyscallError && e.errno === ENODEV) return;
      throw ioError(`failed to remove ${hostIfname}`, e);
    }
  }

  /** Through iproute2. */
  plugSublink(spec: SublinkSpec): Promise<void> {
    return this.#rest.plugSublink(spec);
  }

  /** Through iproute2. */
  unplugIn(netns: string, ifname: string): Promise<void> {
    return this.#rest.unplugIn(netns, ifname);
  }

  /** Through iproute2 (macvlan/ipvlan without a master only). */
  defaultRouteInterface(): Promise<string | undefined> {
    return this.#rest.defaultRouteInterface();
  }

  /** Closes the daemon-side sockets and namespace descriptor. */
  close(): void {
    this.#offThread.close();
    this.#host.close();
    this.#sys.close(this.#homeFd);
  }

  /**
   * Lists the bridge's ports with one link dump filtered on the bridge (a CHECK, the sweep of
   * orphaned host ends at start), in the order of their indexes; an absent bridge has none.
   */
  bridgePorts(bridge: string): Promise<string[]> {
    try {
      const master = this.#host.indexOf(`bridge "${bridge}"`, bridge);
      const links = this.#host.dump(
        `list the ports of ${bridge}`,
        (seq) => dumpLinksOf(seq, master),
      );
      return Promise.resolve(
        links.filter((l) => l.master === master && l.name !== undefined).map((l) => l.name!),
      );
    } catch (e) {
      if (e instanceof SyscallError && e.errno === ENODEV) return Promise.resolve([]);
      return Promise.reject(ioError(`failed to list the ports of ${bridge}`, e));
    }
  }

  /** Through iproute2 (a block given back; rare). */
  removeBridgeAddress(bridge: string, cidr: string): Promise<void> {
    return this.#rest.removeBridgeAddress(bridge, cidr);
  }

  /** Through iproute2 (CHECK only). */
  inspect(netns: string, ifname: string): Promise<LiveInterface | null> {
    return this.#rest.inspect(netns, ifname);
  }
}

function ioError(what: string, e: unknown): unknown {
  if (e instanceof SyscallError) return new CniError(CNI_ERROR.IO_FAILURE, what, e.message);
  return e;
}
