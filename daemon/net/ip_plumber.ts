/**
 * {@link Plumber} on iproute2 batches: a plug costs two process chains (one batch per namespace,
 * sysctls written by the same chain), not one per operation. A step toward netlink in-process,
 * which will implement the same interface.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import { IpCommandError, type IpRunner, PROC_SYS } from "./ip_runner.ts";
import { planBridge, planPodPort, planSublink, planVeth } from "./link_plan.ts";
import type {
  BridgeSpec,
  LiveInterface,
  Plumber,
  PodPort,
  SublinkSpec,
  VethSpec,
} from "./plumber.ts";

const MISSING = /does not exist|Cannot find device|No such file|cannot open netns|reassociate/i;
const NO_ADDRESS = /Cannot assign requested address/i;

/** A random, locally administered unicast MAC (a new bridge's own). */
function randomLocalMac(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(6));
  bytes[0] = (bytes[0] & 0xfc) | 0x02;
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join(":");
}

/** Options of the iproute2 plumber. */
export interface IpPlumberOptions {
  /** Whether {@link Plumber.ensureBridge} turns on IP forwarding (default true). */
  forwarding?: boolean;
  /** Where the runner writes sysctls (see `SpawningIpRunner`); default `/proc/sys`. */
  sysctlDir?: string;
}

/**
 * The iproute2 plumber.
 *
 * @example
 * ```ts
 * const plumber = new IpPlumber(new SpawningIpRunner());
 * ```
 */
export class IpPlumber implements Plumber {
  readonly #ip: IpRunner;
  readonly #forwarding: boolean;
  readonly #sysctlDir: string;

  /** Creates a plumber running its batches through `ip`. */
  constructor(ip: IpRunner, options: IpPlumberOptions = {}) {
    this.#ip = ip;
    this.#forwarding = options.forwarding ?? true;
    this.#sysctlDir = options.sysctlDir ?? PROC_SYS;
  }

  /** Creates (when missing) and configures the bridge; repeating it is harmless. */
  async ensureBridge(spec: BridgeSpec): Promise<void> {
    try {
      let current = await this.#macOf(spec.name);
      if (current === undefined) {
        const mac = randomLocalMac();
        const create = planBridge(spec, false, this.#forwarding, mac).create;
        current = await this.#ip.batch(create).then(
          () => mac,
          // Another daemon or an operator may have created it meanwhile: its MAC is kept.
          async (e) => (await this.#macOf(spec.name)) ?? Promise.reject(e),
        );
      }
      const plan = planBridge(spec, true, this.#forwarding, current || undefined);
      const sysctls = [...plan.configure.sysctls];
      if (this.#forwarding) {
        sysctls.push(...(await bridgeNetfilterSysctls(spec.gateways, this.#sysctlDir)));
      }
      await this.#ip.batch(plan.configure.lines, { sysctls });
    } catch (e) {
      throw ioError(`failed to set up bridge ${spec.name}`, e);
    }
  }

  /** The MAC of link `name` ("" when unreadable), or undefined when there is no such link. */
  async #macOf(name: string): Promise<string | undefined> {
    try {
      const out = await this.#ip.batch([`link show dev ${name}`], { json: true });
      // "" when it exists but its MAC cannot be read (nothing is then set).
      try {
        return (JSON.parse(out) as { address?: string }[])[0]?.address ?? "";
      } catch {
        return "";
      }
    } catch (e) {
      if (e instanceof IpCommandError && MISSING.test(e.stderr)) return undefined;
      throw e;
    }
  }

  /**
   * Creates the pair, then (once `addressed` resolves) configures its pod end; on failure throws
   * CNI code 5 (the caller rolls back).
   */
  async plugVeth(spec: VethSpec, addressed?: Promise<void>): Promise<void> {
    const what = `failed to plug ${spec.ifname} in ${spec.netns}`;
    try {
      const { host } = planVeth(spec);
      await this.#ip.batch(host.lines, { sysctls: host.sysctls });
      if (host.bridgeLines) await this.#ip.batch(host.bridgeLines, { bridge: true });
      await addressed;
      const { container } = planVeth(spec);
      await this.#ip.batch(container.lines, { netns: spec.netns, sysctls: container.sysctls });
    } catch (e) {
      throw ioError(what, e);
    }
  }

  /**
   * Creates the macvlan/ipvlan link in the pod and configures it; code 5 on failure. A failure
   * after the link was created removes it; a failure to create it (the name is taken, the master
   * is missing) removes nothing, so an interface of the same name that was there stays.
   */
  async plugSublink(spec: SublinkSpec): Promise<void> {
    const plan = planSublink(spec);
    const what = `failed to plug ${spec.kind} ${spec.ifname} on ${spec.master} in ${spec.netns}`;
    try {
      await this.#ip.batch(plan.host.lines, { sysctls: plan.host.sysctls });
    } catch (e) {
      throw ioError(what, e);
    }
    try {
      await this.#ip.batch(plan.container.lines, {
        netns: spec.netns,
        sysctls: plan.container.sysctls,
      });
    } catch (e) {
      await this.unplugIn(spec.netns, spec.ifname).catch(() => {});
      throw ioError(what, e);
    }
  }

  /** Sets a pod's bridge port as a plug leaves it (see {@link Plumber.securePort}). */
  async securePort(port: PodPort): Promise<void> {
    const plan = planPodPort(port);
    try {
      await this.#ip.batch(plan.lines);
      await this.#ip.batch(plan.bridgeLines, { bridge: true });
    } catch (e) {
      if (e instanceof IpCommandError && MISSING.test(e.stderr)) return;
      throw ioError(`failed to set port ${port.hostIfname}`, e);
    }
  }

  /** Deletes the host end; an absent link is success. */
  async unplugVeth(hostIfname: string): Promise<void> {
    try {
      await this.#ip.batch([`link del ${hostIfname}`]);
    } catch (e) {
      if (e instanceof IpCommandError && MISSING.test(e.stderr)) return;
      throw ioError(`failed to remove ${hostIfname}`, e);
    }
  }

  /** Deletes `ifname` inside `netns`; an absent namespace or link is success. */
  async unplugIn(netns: string, ifname: string): Promise<void> {
    try {
      await Deno.stat(netns);
    } catch {
      return;
    }
    try {
      await this.#ip.batch([`link del ${ifname}`], { netns });
    } catch (e) {
      if (e instanceof IpCommandError && MISSING.test(e.stderr)) return;
      throw ioError(`failed to remove ${ifname} in ${netns}`, e);
    }
  }

  /** The device of the host's first IPv4 default route, if any. */
  async defaultRouteInterface(): Promise<string | undefined> {
    try {
      const out = await this.#ip.batch(["route show default"], { json: true, family: 4 });
      return (JSON.parse(out.trim() || "[]") as { dev?: string }[])[0]?.dev;
    } catch (e) {
      throw ioError("failed to read the default route", e);
    }
  }

  /** Lists the bridge's ports with one `ip -j link show master` run. */
  async bridgePorts(bridge: string): Promise<string[]> {
    try {
      const out = await this.#ip.batch([`link show master ${bridge}`], { json: true });
      return out.split("\n").filter((l) => l.trim() !== "").flatMap((l) =>
        (JSON.parse(l) as { ifname: string }[]).map((link) => link.ifname)
      );
    } catch (e) {
      if (e instanceof IpCommandError && MISSING.test(e.stderr)) return [];
      throw ioError(`failed to list the ports of ${bridge}`, e);
    }
  }

  /** Takes an address off the bridge; an absent address or bridge is success. */
  async removeBridgeAddress(bridge: string, cidr: string): Promise<void> {
    try {
      await this.#ip.batch([`address del ${cidr} dev ${bridge}`]);
    } catch (e) {
      if (e instanceof IpCommandError && (MISSING.test(e.stderr) || NO_ADDRESS.test(e.stderr))) {
        return;
      }
      throw ioError(`failed to remove ${cidr} from ${bridge}`, e);
    }
  }

  /** Reads link, addresses and routes of `ifname` in `netns` with one batch. */
  async inspect(netns: string, ifname: string): Promise<LiveInterface | null> {
    try {
      await Deno.stat(netns);
    } catch {
      return null;
    }
    try {
      const out = await this.#ip.batch([`addr show dev ${ifname}`, `route show dev ${ifname}`], {
        netns,
        json: true,
      });
      const [addrs, v4routes] = out.split("\n").filter((l) => l.trim() !== "");
      const live = parseInspection(ifname, addrs, v4routes, "[]");
      if (!live?.addresses.some((a) => a.includes(":"))) return live;
      // iproute2 batches cannot switch family per line: IPv6 routes take a second run.
      const v6routes = await this.#ip.batch([`route show dev ${ifname}`], {
        netns,
        json: true,
        family: 6,
      });
      return parseInspection(ifname, addrs, v4routes, v6routes);
    } catch (e) {
      if (e instanceof IpCommandError && MISSING.test(e.stderr)) return null;
      throw new CniError(
        CNI_ERROR.IO_FAILURE,
        `failed to inspect ${ifname} in ${netns}`,
        String(e),
      );
    }
  }
}

/**
 * `bridge-nf-call-iptables` (and `-ip6tables` for IPv6 gateways) on, where br_netfilter is loaded,
 * so that kube-proxy's rules see traffic between pods of one bridge; none where it is not.
 */
async function bridgeNetfilterSysctls(
  gateways: string[],
  sysctlDir: string,
): Promise<[string, string][]> {
  const out: [string, string][] = [];
  const families = [["iptables", false], ["ip6tables", true]] as const;
  for (const [name, v6] of families) {
    if (!gateways.some((g) => g.includes(":") === v6)) continue;
    const path = `net/bridge/bridge-nf-call-${name}`;
    if (await Deno.stat(`${sysctlDir}/${path}`).then(() => true, () => false)) {
      out.push([path, "1"]);
    }
  }
  return out;
}

function ioError(what: string, e: unknown): unknown {
  if (e instanceof IpCommandError) return new CniError(CNI_ERROR.IO_FAILURE, what, e.message);
  return e;
}

interface IpAddrJson {
  ifname: string;
  address: string;
  mtu: number;
  flags: string[];
  addr_info?: { local: string; prefixlen: number; scope: string; family: string }[];
}

interface IpRouteJson {
  dst: string;
  gateway?: string;
}

/** Parses `ip -j` output: the link with its addresses, its IPv4 routes and its IPv6 routes. */
export function parseInspection(
  ifname: string,
  addrLine: string | undefined,
  v4Line: string | undefined,
  v6Line: string | undefined,
): LiveInterface | null {
  const link = (JSON.parse(addrLine ?? "[]") as IpAddrJson[])[0];
  if (!link) return null;
  const routes = [...JSON.parse(v4Line ?? "[]"), ...JSON.parse(v6Line ?? "[]")] as IpRouteJson[];
  return {
    name: link.ifname ?? ifname,
    mac: link.address,
    mtu: link.mtu,
    up: link.flags.includes("UP"),
    addresses: (link.addr_info ?? [])
      .filter((a) => !(a.family === "inet6" && a.scope === "link"))
      .map((a) => `${a.local}/${a.prefixlen}`),
    routes: routes
      .filter((r) => !r.dst.startsWith("fe80:") && r.dst !== "multicast")
      .map((r) => ({
        dst: r.dst === "default"
          ? (r.gateway?.includes(":") ? "::/0" : "0.0.0.0/0")
          : r.dst.includes("/")
          ? r.dst
          : `${r.dst}/${r.dst.includes(":") ? 128 : 32}`,
        ...(r.gateway ? { gw: r.gateway } : {}),
      })),
  };
}
