/**
 * The VXLAN overlay (`routing.mode: vxlan`), for nodes that do not share an L2 segment. Each node
 * has one VXLAN device (`ferry.vxlan`: local = its InternalIP, no learning, MTU = the underlay's
 * less 50 bytes of encapsulation) holding the network address of its pod range as a /32, and
 * publishes the device's MAC and its InternalIP on its Node (annotation `ferry.dev/vtep`). For
 * every other node, with `G` the network address of that node's range: a permanent neighbour
 * entry `G → its MAC`, a forwarding entry `its MAC → its InternalIP`, and a route `range via G
 * dev ferry.vxlan onlink` (proto 199). Pure planning here; `VxlanDevice` applies it.
 *
 * @module
 */
import { formatIp, parseCidr } from "../ipam/cidr.ts";
import { IpCommandError, type IpRunner } from "../net/ip_runner.ts";
import { stableMac } from "../net/naming.ts";
import type { ClusterNode, Vtep } from "./nodes.ts";
import type { NodeRoute } from "./routes.ts";
import { reasonOf } from "./route_table.ts";
import type { UnroutableRange } from "./unroutable.ts";

/** The bytes VXLAN over IPv4 adds to every frame (outer IP 20, UDP 8, VXLAN 8, inner Ethernet 14). */
export const VXLAN_OVERHEAD = 50;

/** A neighbour and forwarding entry for one remote node. */
export interface VxlanPeer {
  /** The network address of the remote node's IPv4 range: the overlay's next hop for it. */
  gateway: string;
  /** The remote VXLAN device's MAC. */
  mac: string;
  /** The remote node's underlay address. */
  ip: string;
}

/** The MAC of a node's VXLAN device: stable per node name, locally administered. */
export function vtepMac(nodeName: string): string {
  return stableMac(nodeName, "vxlan", "host");
}

/** The network address of a range (`10.244.2.0/24` → `10.244.2.0`): a node's overlay address. */
export function overlayAddress(cidr: string): string {
  return formatIp(parseCidr(cidr).network);
}

/**
 * The overlay's routes and peers toward every node but `self` that published its endpoint.
 * IPv6 ranges are not carried (reported as unroutable): the overlay runs over IPv4.
 *
 * @example
 * ```ts
 * vxlanPlan([{ name: "n2", internalIPs: ["192.0.2.12"], podCIDRs: ["10.244.2.0/24"],
 *   vtep: { mac: "02:…", ip: "192.0.2.12" } }], "n1");
 * ```
 */
export function vxlanPlan(
  nodes: ClusterNode[],
  self: string,
): { routes: NodeRoute[]; peers: VxlanPeer[]; unroutable: UnroutableRange[] } {
  const routes: NodeRoute[] = [];
  const peers: VxlanPeer[] = [];
  const unroutable: UnroutableRange[] = [];
  for (const node of nodes) {
    if (node.name === self) continue;
    for (const dst of node.podCIDRs) {
      if (dst.includes(":") || !node.vtep) {
        unroutable.push({
          node: node.name,
          dst,
          reason: node.vtep
            ? "the overlay carries IPv4 ranges only"
            : "no VTEP published yet (its daemon has not started)",
        });
        continue;
      }
      const gateway = overlayAddress(dst);
      routes.push({ dst, via: gateway });
      peers.push({ gateway, mac: node.vtep.mac, ip: node.vtep.ip });
    }
  }
  routes.sort((a, b) => a.dst.localeCompare(b.dst));
  return { routes, peers, unroutable };
}

/** This node's endpoint, as it publishes it. */
export function ownVtep(nodeName: string, internalIP: string): Vtep {
  return { mac: vtepMac(nodeName), ip: internalIP };
}

/** The settings of the device. */
export interface VxlanSettings {
  /** Its name. */
  device: string;
  /** The VNI. */
  vni: number;
  /** The UDP port. */
  port: number;
}

/**
 * The VXLAN device (created and configured through iproute2, at start only) and its per-peer
 * entries (through {@link VxlanEntries}).
 *
 * @example
 * ```ts
 * const dev = new VxlanDevice(runner, { device: "ferry.vxlan", vni: 1, port: 8472 });
 * await dev.ensure("192.0.2.11", "10.244.1.0", 1450, vtepMac("n1"));
 * ```
 */
export class VxlanDevice {
  readonly #ip: IpRunner;
  readonly #s: VxlanSettings;
  readonly #entries: VxlanEntries;

  /** Creates the device handle; its per-peer entries go through `entries` (iproute2 unless given). */
  constructor(
    ip: IpRunner,
    settings: VxlanSettings,
    entries: VxlanEntries = new IpVxlanEntries(ip),
  ) {
    this.#ip = ip;
    this.#s = settings;
    this.#entries = entries;
  }

  /** The MTU of the link holding `address` (the underlay), or undefined when none does. */
  async underlayMtu(address: string): Promise<number | undefined> {
    const out = await this.#ip.batch(["addr show"], { json: true });
    const links = out.split("\n").filter((l) => l.trim()).flatMap((l) =>
      JSON.parse(l) as { mtu: number; addr_info?: { local: string }[] }[]
    );
    return links.find((l) => l.addr_info?.some((a) => a.local === address))?.mtu;
  }

  /**
   * Creates the device when missing (re-created when its VNI, port or local address differ), and
   * sets its MAC, MTU, overlay address and state. Idempotent.
   */
  async ensure(local: string, overlay: string, mtu: number, mac: string): Promise<void> {
    const { device, vni, port } = this.#s;
    const current = await this.#ip.batch([`link show dev ${device}`], { json: true, details: true })
      .then((out) =>
        (JSON.parse(out.trim() || "[]") as {
          linkinfo?: { info_data?: { id?: number; port?: number; local?: string } };
        }[])[0], (e) => {
        if (e instanceof IpCommandError && /does not exist/.test(e.stderr)) return undefined;
        throw e;
      });
    const data = current?.linkinfo?.info_data;
    if (current && (data?.id !== vni || data?.port !== port || data?.local !== local)) {
      await this.#ip.batch([`link del ${device}`]);
    }
    if (!current || data?.id !== vni || data?.port !== port || data?.local !== local) {
      await this.#ip.batch([
        `link add ${device} type vxlan id ${vni} local ${local} dstport ${port} nolearning`,
      ]);
    }
    await this.#ip.batch([
      `link set ${device} address ${mac} mtu ${mtu} up`,
      `addr replace ${overlay}/32 dev ${device}`,
    ]);
  }

  /** The permanent neighbour entries on the device: gateway → MAC. */
  neighbours(): Promise<Map<string, string>> {
    return this.#entries.neighbours(this.#s.device);
  }

  /** Brings neighbour and forwarding entries in line with `peers`; resolves to the refusals. */
  apply(peers: VxlanPeer[], live: Map<string, string>): Promise<EntryFailure[]> {
    return this.#entries.apply(this.#s.device, peers, live);
  }
}

/** A peer whose entries the kernel would not set (or a stale entry it would not remove), and why. */
export interface EntryFailure {
  /** The peer whose entries failed; none for a stale entry that could not be removed. */
  peer?: VxlanPeer;
  /** The kernel's answer, naming the entry. */
  reason: string;
}

/**
 * The per-peer entries of the VXLAN device: a permanent neighbour entry (the peer's overlay
 * gateway → its device's MAC) and a forwarding-database entry (that MAC → the peer's underlay
 * address). In-process rtnetlink (`NetlinkVxlanEntries`) or iproute2 ({@link IpVxlanEntries}).
 */
export interface VxlanEntries {
  /** The permanent neighbour entries on `device`: gateway → MAC. */
  neighbours(device: string): Promise<Map<string, string>>;
  /**
   * Replaces the neighbour and forwarding entries of `peers`, and removes those of `live`
   * neighbours and forwarding entries no peer has any more, each peer on its own: one whose
   * entries the kernel refuses (an underlay address of another family) leaves the others set;
   * resolves to the refusals, with why. Rejects only when none could be tried.
   */
  apply(device: string, peers: VxlanPeer[], live: Map<string, string>): Promise<EntryFailure[]>;
}

/**
 * The entries through iproute2 (`ip neigh`, `bridge fdb`): the fallback where FFI cannot load.
 *
 * @example
 * ```ts
 * const entries = new IpVxlanEntries(new SpawningIpRunner());
 * ```
 */
export class IpVxlanEntries implements VxlanEntries {
  readonly #ip: IpRunner;
  readonly #bridge: (args: string[]) => Promise<string>;

  /** Creates the entries on `ip`, and `bridge` (runs the `bridge` tool; in this namespace unless given). */
  constructor(ip: IpRunner, bridge: (args: string[]) => Promise<string> = bridgeCmd) {
    this.#ip = ip;
    this.#bridge = bridge;
  }

  /** `ip neigh show dev`. */
  async neighbours(device: string): Promise<Map<string, string>> {
    const out = await this.#ip.batch([`neigh show dev ${device}`], { json: true });
    const entries = JSON.parse(out.trim() || "[]") as { dst: string; lladdr?: string }[];
    return new Map(entries.filter((e) => e.lladdr).map((e) => [e.dst, e.lladdr!]));
  }

  /**
   * `ip neigh replace/del` (one batch; when it fails, each line on its own to tell which the
   * kernel refuses), then `bridge fdb`, one entry at a time.
   */
  async apply(
    device: string,
    peers: VxlanPeer[],
    live: Map<string, string>,
  ): Promise<EntryFailure[]> {
    const failures: EntryFailure[] = [];
    const failed = new Set<VxlanPeer>();
    const refused = (peer: VxlanPeer | undefined, what: string) => (e: unknown) => {
      if (!(e instanceof IpCommandError) && !(e instanceof BridgeCommandError)) throw e;
      if (peer) failed.add(peer);
      failures.push({ peer, reason: `${what}: ${reasonOf(e)}` });
    };
    const want = new Set(peers.map((p) => p.gateway));
    const lines: [VxlanPeer | undefined, string][] = peers.map((p) => [
      p,
      `neigh replace ${p.gateway} lladdr ${p.mac} dev ${device} nud permanent`,
    ]);
    for (const [gateway] of live) {
      if (!want.has(gateway)) lines.push([undefined, `neigh del ${gateway} dev ${device}`]);
    }
    const batched = !lines.length ||
      await this.#ip.batch(lines.map(([, l]) => l)).then(() => true, (e) => {
        if (!(e instanceof IpCommandError)) throw e;
        return false;
      });
    if (!batched) {
      for (const [peer, line] of lines) {
        await this.#ip.batch([line]).catch(refused(peer, line));
      }
    }
    const listed = await this.#bridge(["-j", "fdb", "show", "dev", device]);
    const fdb = (JSON.parse(listed.trim() || "[]") as { mac: string; dst?: string }[])
      .filter((e) => e.dst && e.mac !== "00:00:00:00:00:00");
    const macs = new Map(peers.map((p) => [p.mac, p.ip]));
    for (const e of fdb) {
      if (macs.get(e.mac) !== e.dst) {
        await this.#bridge(["fdb", "del", e.mac, "dev", device, "dst", e.dst!])
          .catch(refused(undefined, `fdb del ${e.mac} dst ${e.dst}`));
      }
    }
    // One forwarding entry per MAC and address (a node with two ranges is two peers).
    const set = new Set(fdb.map((e) => `${e.mac} ${e.dst}`));
    for (const peer of peers) {
      if (failed.has(peer) || set.has(`${peer.mac} ${peer.ip}`)) continue;
      set.add(`${peer.mac} ${peer.ip}`);
      await this.#bridge([
        "fdb",
        "append",
        peer.mac,
        "dev",
        device,
        "dst",
        peer.ip,
        "self",
        "permanent",
      ])
        .catch(refused(peer, `fdb append ${peer.mac} dst ${peer.ip}`));
    }
    return failures;
  }
}

/** The `bridge` tool's failure: its arguments and what it printed on stderr. */
export class BridgeCommandError extends Error {
  /** What the tool printed on stderr. */
  readonly stderr: string;
  /** Creates the error for `args` failing with `stderr`. */
  constructor(args: string[], stderr: string) {
    super(`bridge ${args.join(" ")} failed: ${stderr}`);
    this.name = "BridgeCommandError";
    this.stderr = stderr;
  }
}

/** Runs the iproute2 `bridge` tool; its standard output. */
export async function bridgeCmd(args: string[]): Promise<string> {
  const out = await new Deno.Command("bridge", { args, stdout: "piped", stderr: "piped" }).output();
  if (!out.success) {
    throw new BridgeCommandError(args, new TextDecoder().decode(out.stderr).trim());
  }
  return new TextDecoder().decode(out.stdout);
}
