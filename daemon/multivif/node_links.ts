/**
 * The node's links as the macvlan parent checks read them (`parent_guard.ts`): every link with its
 * names, MACs, master, lower device and addresses, the devices of the default routes, and the
 * MACs a parent's neighbour table holds. Effects only, behind one interface so that the checks'
 * tests can hand in a fake.
 *
 * @module
 */
import type { IpRunner } from "../net/ip_runner.ts";

/** One link of the node. */
export interface NodeLink {
  /** Its name. */
  name: string;
  /** Its alternative names. */
  altnames: string[];
  /** Its MACs, lower case with colons: the current one and a different permanent one. */
  macs: string[];
  /** Its master (a bridge, a bond), when it has one. */
  master?: string;
  /**
   * The device it is stacked on, when it has one: a VLAN's, macvlan's or ipvlan's parent, a VXLAN
   * device's underlay device (never a veth's peer: that is another link, not what it is built on).
   */
  lower?: string;
  /** The addresses it holds (no prefix), IPv6 link-local ones left out: every link up has one. */
  addresses: string[];
}

/** What the parent checks ask of the node. */
export interface NodeLinks {
  /** Every link of the node now. */
  links(): Promise<NodeLink[]>;
  /** The devices of the default routes now, IPv4's first (a multipath route's every device). */
  defaultRouteDevices(): Promise<{ family: 4 | 6; dev: string }[]>;
  /** The link-layer addresses in `device`'s neighbour table (both families); none when it is gone. */
  neighbourMacs(device: string): Promise<string[]>;
}

interface IpLinkJson {
  ifname: string;
  address?: string;
  permaddr?: string;
  altnames?: string[];
  master?: string;
  link?: string;
  linkinfo?: { info_kind?: string; info_data?: { link?: unknown } };
}

interface IpAddrJson {
  ifname: string;
  addr_info?: { family?: string; local?: string; scope?: string }[];
}

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;
const macsOf = (...texts: (string | undefined)[]) => [
  ...new Set(texts.map((t) => t?.toLowerCase()).filter((t): t is string => !!t && MAC.test(t))),
];

/**
 * The node's links read with iproute2.
 *
 * @example
 * ```ts
 * const links = new SystemNodeLinks(new SpawningIpRunner());
 * await links.defaultRouteDevices(); // [{ family: 4, dev: "eth0" }]
 * ```
 */
export class SystemNodeLinks implements NodeLinks {
  readonly #ip: IpRunner;
  readonly #netns?: string;

  /** Reads the host's links; `netns` (a path) reads another namespace's (tests). */
  constructor(ip: IpRunner, netns?: string) {
    this.#ip = ip;
    this.#netns = netns;
  }

  async #json<T>(line: string, options: { details?: boolean; family?: 4 | 6 } = {}): Promise<T[]> {
    const out = await this.#ip.batch([line], { json: true, netns: this.#netns, ...options });
    return JSON.parse(out.trim() || "[]") as T[];
  }

  /** `ip -d link show` and `ip addr show`, joined by name. */
  async links(): Promise<NodeLink[]> {
    const links = await this.#json<IpLinkJson>("link show", { details: true });
    const addrs = new Map(
      (await this.#json<IpAddrJson>("addr show")).map((a) => [
        a.ifname,
        (a.addr_info ?? [])
          .filter((i) => i.local && !(i.family === "inet6" && i.scope === "link"))
          .map((i) => i.local!),
      ]),
    );
    return links.map((l) => {
      const kind = l.linkinfo?.info_kind;
      const underlay = l.linkinfo?.info_data?.link;
      const lower = kind === "veth" ? undefined : typeof underlay === "string" ? underlay : l.link;
      return {
        name: l.ifname,
        altnames: l.altnames ?? [],
        macs: macsOf(l.address, l.permaddr),
        ...(l.master ? { master: l.master } : {}),
        ...(lower ? { lower } : {}),
        addresses: addrs.get(l.ifname) ?? [],
      };
    });
  }

  /** `ip -4 route show default`, then `-6`. */
  async defaultRouteDevices(): Promise<{ family: 4 | 6; dev: string }[]> {
    const out: { family: 4 | 6; dev: string }[] = [];
    for (const family of [4, 6] as const) {
      const routes = await this.#json<{ dev?: string; nexthops?: { dev?: string }[] }>(
        "route show default",
        { family },
      );
      for (const r of routes) {
        for (const dev of [r.dev, ...(r.nexthops ?? []).map((n) => n.dev)]) {
          if (dev) out.push({ family, dev });
        }
      }
    }
    return out;
  }

  /** `ip neigh show dev <device>`: the entries that have a link-layer address. */
  async neighbourMacs(device: string): Promise<string[]> {
    try {
      const entries = await this.#json<{ lladdr?: string }>(`neigh show dev ${device}`);
      return macsOf(...entries.map((e) => e.lladdr));
    } catch {
      return []; // the device is gone (or was never there): it has no neighbours
    }
  }
}
