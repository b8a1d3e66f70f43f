/**
 * {@link Plumber} with the hot path in-process: a default-network plug (veth pair created up on
 * the bridge with its peer directly in the pod's namespace, then the pod end's sysctls, link,
 * addresses and routes), a macvlan/ipvlan plug (the link created on its master directly in the
 * pod's namespace, then configured there the same way), their unplugs and the inspection of a
 * pod's interface (CHECK, the taken-name check of an ADD) are rtnetlink messages sent from the
 * daemon itself, with no process started; so is listing a bridge's ports. The rarer operations
 * (bridge set-up, the host's default-route interface) go to the iproute2 plumber handed in.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../../lib/cni/errors.ts";
import { defaultRoutes, planVeth } from "../link_plan.ts";
import type {
  BridgeSpec,
  LiveInterface,
  Plumber,
  PodPort,
  SublinkSpec,
  VethSpec,
} from "../plumber.ts";
import { type NetlinkSys, SyscallError } from "./libc.ts";
import { PROC_SYS } from "../ip_runner.ts";
import {
  delLink,
  dumpAddrs,
  dumpLinksOf,
  dumpRoutes,
  getLinkByIndex,
  linkUp,
  newAddr,
  newDefaultRoute,
  newPodRoute,
  newSublink,
  newVeth,
  NL,
  podPortEntry,
  podPortFlags,
  RT_SCOPE_LINK,
} from "./messages.ts";
import { ACK_BUFFER_BYTES, RouteSocket, type Step } from "./route_socket.ts";
import { planSublink } from "../link_plan.ts";
import { RouteSocketPool } from "./socket_pool.ts";

const ENOENT = 2;
const ENODEV = 19;
const EINVAL = 22;
const EOPNOTSUPP = 95;
const RT_TABLE_MAIN = 254;
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
              { name: spec.hostIfname, mac: spec.hostMac, mtu: spec.mtu, group: spec.hostGroup },
              { name: spec.ifname, mac: spec.containerMac, mtu: spec.mtu },
              master,
              podFd,
            ),
        )
      );
      const hostIndex = this.#host.indexOf(`find ${spec.hostIfname}`, spec.hostIfname);
      // Before the pod end is up (it sends nothing yet).
      this.#securePort(hostIndex, {
        hostIfname: spec.hostIfname,
        podMac: spec.containerMac,
        guarded: spec.hostGroup !== undefined,
      });
      await addressed;
      const pod = this.#podSocket(podFd, planVeth(spec).container.sysctls);
      try {
        const index = pod.indexOf(`find ${spec.ifname}`, spec.ifname);
        pod.ackAll(podEndUp(
          spec.ifname,
          index,
          spec.addresses,
          defaultRoutes(spec.addresses).map((r) => ({
            what: `add route ${r.dst} via ${r.gw}`,
            build: (seq: number) => newDefaultRoute(seq, index, r.gw!),
          })),
        ));
      } finally {
        pod.close();
      }
    } finally {
      this.#sys.close(podFd);
    }
  }

  /** Sets a pod's bridge port as a plug leaves it (see {@link Plumber.securePort}). */
  securePort(port: PodPort): Promise<void> {
    try {
      const index = this.#host.indexOf(`find ${port.hostIfname}`, port.hostIfname);
      this.#securePort(index, port);
    } catch (e) {
      if (e instanceof SyscallError && e.errno === ENODEV) return Promise.resolve();
      return Promise.reject(ioError(`failed to set port ${port.hostIfname}`, e));
    }
    return Promise.resolve();
  }

  /**
   * Hairpin on, learning and unknown-unicast flooding off (a guarded port's link-local group
   * frames through the guard), and the pod's MAC as the port's static, sticky entry: the bridge
   * learns from no frame of the pod's.
   */
  #securePort(index: number, port: PodPort): void {
    // One batch: the ADD pays one round trip for both, as it did for the hairpin alone.
    this.#host.ackAll([
      {
        what: `hairpin on, learning and flooding off ${port.hostIfname}`,
        build: (seq) => podPortFlags(seq, index, port.guarded),
      },
      {
        what: `static entry ${port.podMac} on ${port.hostIfname}`,
        build: (seq) => podPortEntry(seq, index, port.podMac),
      },
    ]);
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

  /**
   * Creates the macvlan/ipvlan link on its master directly in the pod's namespace (one message,
   * sent from a worker thread), then writes the pod's sysctls and sends its links, addresses and
   * routes as one batch on a socket of that namespace; code 5 on failure. A failure after the
   * link was created removes it; a failure to create it (the name is taken, the master is
   * missing) removes nothing, so an interface of the same name that was there stays.
   */
  async plugSublink(spec: SublinkSpec): Promise<void> {
    const what = `failed to plug ${spec.kind} ${spec.ifname} on ${spec.master} in ${spec.netns}`;
    let podFd: number;
    try {
      podFd = this.#sys.openRead(spec.netns);
    } catch (e) {
      throw ioError(what, e);
    }
    try {
      this.#assertForeign(podFd, spec.netns);
      try {
        const masterIndex = this.#host.indexOf(`find master ${spec.master}`, spec.master);
        const link = { ...spec, name: spec.ifname, masterIndex, netnsFd: podFd };
        await this.#offThread.use((sock) =>
          sock.ackOffThread(
            `create ${spec.kind} ${spec.ifname} on ${spec.master}`,
            (seq) => newSublink(seq, link),
          )
        );
      } catch (e) {
        if (e instanceof SyscallError && e.errno === EOPNOTSUPP) {
          // What iproute2 says (the kernel's extended ack), so that the reason reads the same.
          throw new CniError(
            CNI_ERROR.IO_FAILURE,
            what,
            `${e.message}: Unknown device type (this kernel has no ${spec.kind})`,
          );
        }
        throw ioError(what, e);
      }
      try {
        this.#configureSublink(podFd, spec);
      } catch (e) {
        await this.#deleteIn(podFd, spec.ifname).catch(() => {});
        throw ioError(what, e);
      }
    } finally {
      this.#sys.close(podFd);
    }
  }

  /** The pod's part of a sublink plug: the sysctls of its plan, then lo and the link up, addresses, routes. */
  #configureSublink(podFd: number, spec: SublinkSpec): void {
    const { sysctls } = planSublink(spec).container;
    const pod = this.#podSocket(podFd, sysctls);
    try {
      const index = pod.indexOf(`find ${spec.ifname}`, spec.ifname);
      pod.ackAll(podEndUp(
        spec.ifname,
        index,
        spec.addresses,
        spec.routes.map((r) => ({
          what: `add route ${r.dst}${r.gw ? ` via ${r.gw}` : ""}`,
          build: (seq: number) => newPodRoute(seq, index, r.dst, r.gw),
        })),
      ));
    } finally {
      pod.close();
    }
  }

  /**
   * Writes `sysctls` inside the namespace `podFd` and opens a netlink socket there, with a buffer
   * for acks (or `bufferBytes`: dumps need the default).
   */
  #podSocket(
    podFd: number,
    sysctls: [string, string][] = [],
    bufferBytes = ACK_BUFFER_BYTES,
  ): RouteSocket {
    return this.#sys.inNetns(podFd, this.#homeFd, () => {
      for (const [path, value] of sysctls) {
        this.#sys.writeFile(`${this.#sysctlDir}/${path}`, value);
      }
      return new RouteSocket(this.#sys, this.#sys.netlinkSocket(), bufferBytes);
    });
  }

  /** Deletes `ifname` in the namespace `podFd`, off the JS thread; an absent link is success. */
  async #deleteIn(podFd: number, ifname: string): Promise<void> {
    const pod = this.#podSocket(podFd);
    try {
      await pod.ackOffThread(`delete ${ifname}`, (seq) => delLink(seq, ifname));
    } catch (e) {
      if (!(e instanceof SyscallError && e.errno === ENODEV)) throw e;
    } finally {
      pod.close();
    }
  }

  /**
   * Opens the namespace at `netns`; undefined when it is gone (no such path, or a path that is
   * no longer a namespace: entering it is refused).
   */
  #openNetns(netns: string): number | undefined {
    let fd: number;
    try {
      fd = this.#sys.openRead(netns);
    } catch (e) {
      if (e instanceof SyscallError && e.errno === ENOENT) return undefined;
      throw e;
    }
    try {
      this.#sys.inNetns(fd, this.#homeFd, () => {});
      return fd;
    } catch (e) {
      this.#sys.close(fd);
      if (e instanceof SyscallError && e.errno === EINVAL) return undefined;
      throw e;
    }
  }

  /** Deletes `ifname` inside `netns` with one message; an absent namespace or link is success. */
  async unplugIn(netns: string, ifname: string): Promise<void> {
    try {
      const podFd = this.#openNetns(netns);
      if (podFd === undefined) return;
      try {
        await this.#deleteIn(podFd, ifname);
      } finally {
        this.#sys.close(podFd);
      }
    } catch (e) {
      throw ioError(`failed to remove ${ifname} in ${netns}`, e);
    }
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

  /**
   * Reads `ifname` in `netns` (its link, its addresses but IPv6 link-local ones, its routes in the
   * main table but IPv6 link-local and multicast ones) with one request and three dumps on a
   * socket of that namespace; null when the namespace or the interface is gone.
   */
  inspect(netns: string, ifname: string): Promise<LiveInterface | null> {
    try {
      const podFd = this.#openNetns(netns);
      if (podFd === undefined) return Promise.resolve(null);
      try {
        const pod = this.#podSocket(podFd, [], 64 * 1024);
        try {
          return Promise.resolve(readInterface(pod, ifname));
        } finally {
          pod.close();
        }
      } finally {
        this.#sys.close(podFd);
      }
    } catch (e) {
      return Promise.reject(
        new CniError(CNI_ERROR.IO_FAILURE, `failed to inspect ${ifname} in ${netns}`, String(e)),
      );
    }
  }
}

/** {@link NetlinkPlumber.inspect} on a socket of the pod's namespace. */
function readInterface(pod: RouteSocket, ifname: string): LiveInterface | null {
  let index: number;
  try {
    index = pod.indexOf(`find ${ifname}`, ifname);
  } catch (e) {
    if (e instanceof SyscallError && e.errno === ENODEV) return null;
    throw e;
  }
  const link = pod.request(`read ${ifname}`, (seq) => getLinkByIndex(seq, index));
  const addresses = pod.dump("list addresses", dumpAddrs)
    .flatMap((r) => r.addr && r.addr.index === index ? [r.addr] : [])
    .filter((a) => !(a.cidr.includes(":") && a.scope === RT_SCOPE_LINK))
    .map((a) => a.cidr);
  const routes = [4, 6].flatMap((family) =>
    pod.dump(`list IPv${family} routes`, (seq) => dumpRoutes(seq, family as 4 | 6))
  )
    .flatMap((r) => r.type === NL.RTM_NEWROUTE && r.route ? [r.route] : [])
    .filter((r) =>
      r.oif === index && r.table === RT_TABLE_MAIN && !r.dst.startsWith("fe80:") &&
      !r.dst.startsWith("ff")
    )
    .map((r) => ({ dst: r.dst, ...(r.via ? { gw: r.via } : {}) }));
  return {
    name: link.name ?? ifname,
    mac: link.link?.mac ?? "",
    mtu: link.link?.mtu ?? 0,
    up: link.link?.up ?? false,
    addresses,
    routes,
  };
}

function ioError(what: string, e: unknown): unknown {
  if (e instanceof SyscallError) return new CniError(CNI_ERROR.IO_FAILURE, what, e.message);
  return e;
}

/**
 * The pod end's requests, in order: loopback and the link (`index`, named `ifname`) up, its
 * addresses, then `routes` (the veth's default routes, a sublink's own).
 */
function podEndUp(
  ifname: string,
  index: number,
  addresses: { cidr: string }[],
  routes: Step[],
): Step[] {
  return [
    { what: "set lo up", build: (seq) => linkUp(seq, LOOPBACK_INDEX) },
    { what: `set ${ifname} up`, build: (seq) => linkUp(seq, index) },
    ...addresses.map((a) => ({
      what: `add address ${a.cidr}`,
      build: (seq: number) => newAddr(seq, index, a.cidr),
    })),
    ...routes,
  ];
}
