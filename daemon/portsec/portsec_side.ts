/**
 * Port security's wiring (`portSecurity` in the config): the node's {@link PortGuard} writing
 * through the daemon's NETLINK_NETFILTER socket when in-process netlink is available, or nothing
 * when port security is off (then a guard table a previous daemon left is removed).
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { DaemonConfig } from "../config/config.ts";
import { NftNetlink, type NftSys } from "../policy/nft_netlink.ts";
import { guardRemovalScript } from "./guard_table.ts";
import { type PortDrops, PortGuard } from "./port_guard.ts";
import type { Attachment } from "../records/attachment_store.ts";
import { NftRunner } from "../cluster/masquerade.ts";
import type { ChildSet } from "../runtime/child_set.ts";
import type { SublinkGuard } from "../drivers/sublink.ts";
import { NFPROTO_NETDEV, NftLib, type NftLibSys } from "../net/netlink/nft_lib.ts";
import type { NetlinkSys } from "../net/netlink/libc.ts";

/** An `nft` of the guard still running after this long is given up, its process killed. */
const NFT_TIMEOUT_MS = 30_000;

/**
 * `nft` for the guard's bridge table, each run given up after {@link NFT_TIMEOUT_MS}, all of them
 * killed when `children` is closed (the daemon stops).
 */
function bridgeNft(children?: ChildSet): NftRunner {
  return new NftRunner({ family: "bridge", timeoutMs: NFT_TIMEOUT_MS, children });
}

/** What the side needs. */
export interface PortSecuritySideDeps {
  /** The daemon's config. */
  config: Pick<DaemonConfig, "portSecurity" | "routing">;
  /** NETLINK_NETFILTER system calls (the daemon's libc), when FFI is available. */
  netfilter?: NftSys;
  /**
   * Interface lookups in the daemon's namespace (the daemon's libc), when FFI is available: the
   * ports' indexes for the guard's fast path.
   */
  links?: Pick<NetlinkSys, "netlinkSocket" | "ifIndex">;
  /** Where the guard logs. */
  logger: Logger;
  /** Its `nft` processes: killed when the daemon stops (closes the set). */
  children?: ChildSet;
}

/**
 * The guard (nothing written yet: the default network rebuilds it when it opens), or undefined
 * when port security is off.
 *
 * @example
 * ```ts
 * const guard = portSecuritySide({ config, netfilter: plumbing.libc, logger });
 * ```
 */
export function portSecuritySide(d: PortSecuritySideDeps): PortGuard | undefined {
  if (!d.config.portSecurity.enabled) return undefined;
  const nft = bridgeNft(d.children);
  return new PortGuard({
    table: d.config.portSecurity.table,
    apply: (script) => nft.apply(script),
    listJson: (table) => nft.listJson(table),
    ...(d.config.routing.mode === "vxlan" ? { tunnelPort: d.config.routing.vxlan.port } : {}),
    writer: d.netfilter ? new NftNetlink(d.netfilter) : undefined,
    ...(d.links ? { indexOf: portIndexes(d.links) } : {}),
    logger: d.logger,
  });
}

/**
 * A port's index by name in the daemon's own namespace (`SIOCGIFINDEX` on one socket, opened on
 * first use and kept), undefined when no such link is there.
 */
function portIndexes(
  links: Pick<NetlinkSys, "netlinkSocket" | "ifIndex">,
): (port: string) => number | undefined {
  let fd: number | undefined;
  return (port) => {
    try {
      fd ??= links.netlinkSocket();
      return links.ifIndex(fd, port);
    } catch {
      return undefined;
    }
  };
}

/**
 * Removes the guard table a daemon with port security on left (port security is off now); a
 * failure is logged. Run once the daemon owns the node (its socket claimed).
 *
 * @example
 * ```ts
 * if (!guard) await removeGuardTable(config.portSecurity.table, logger);
 * ```
 */
export async function removeGuardTable(table: string, logger: Logger): Promise<void> {
  await bridgeNft().apply(guardRemovalScript(table)).catch((e) =>
    logger.warn("port security is off; its table could not be removed: {error}", {
      error: e instanceof Error ? e.message : String(e),
    })
  );
}

/**
 * The drop counters by pod (the port's attachment record names it; an unnamed port counts as
 * its port's name in no namespace), for the metrics.
 *
 * @example
 * ```ts
 * spoofedByPod(guard.counts(), store.list()); // [{ namespace: "default", pod: "evil", kind: "arp", packets: 2 }]
 * ```
 */
export function spoofedByPod(
  drops: PortDrops[],
  records: Pick<Attachment, "hostIfname" | "pod">[],
): { namespace: string; pod: string; kind: string; packets: number }[] {
  const byPort = new Map(records.filter((r) => r.hostIfname).map((r) => [r.hostIfname!, r.pod]));
  return drops.map((d) => {
    const pod = byPort.get(d.port);
    return {
      namespace: pod?.namespace ?? "",
      pod: pod?.name ?? d.port,
      kind: d.kind,
      packets: d.packets,
    };
  });
}

/** What {@link podGuardSide} needs. */
export interface PodGuardSideDeps {
  /** The daemon's config. */
  config: Pick<DaemonConfig, "portSecurity">;
  /** The daemon's libc, when in-process netlink is on (`network.plumbing: netlink`). */
  libc?: NftLibSys;
  /** Where the choice of writer is said, once. */
  logger: Logger;
  /** The `nft` processes of the fallback: killed when the daemon stops (closes the set). */
  children?: ChildSet;
}

/**
 * Port security for macvlan and ipvlan interfaces: their guard tables, written inside the pod's
 * namespace in-process through libnftables, or, when that cannot be loaded (or in-process
 * netlink is off), by `nsenter` + `nft -f` processes (said once in the log).
 *
 * @example
 * ```ts
 * new SublinkDriver("macvlan", plumber, 60_000, podGuardSide({ config, libc, logger }));
 * ```
 */
export function podGuardSide(d: PodGuardSideDeps): SublinkGuard {
  const table = d.config.portSecurity.table;
  let why = "in-process netlink is off (network.plumbing: iproute2)";
  if (d.libc) {
    try {
      const lib = NftLib.open(d.libc);
      return {
        table,
        applyIn: (netns, script) => lib.applyIn(netns, script),
        removeIn: (netns, name) => lib.removeTableIn(netns, NFPROTO_NETDEV, name),
      };
    } catch (e) {
      why = `libnftables could not be loaded: ${e instanceof Error ? e.message : String(e)}`;
    }
  }
  d.logger.warn("{why}; macvlan/ipvlan guard tables are written by nsenter and nft processes", {
    why,
  });
  const nft = new NftRunner({ timeoutMs: NFT_TIMEOUT_MS, children: d.children });
  return {
    table,
    applyIn: (netns, script) => nft.applyIn(netns, script),
    removeIn: async (netns, name) => {
      if (!(await Deno.stat(netns).then(() => true, () => false))) return; // gone
      await nft.applyIn(netns, `table netdev ${name}\ndelete table netdev ${name}\n`);
    },
  };
}

/** What {@link spoofingReporter} needs. */
export interface SpoofingReporterDeps {
  /** The attachment records (which pod a port is). */
  records(): Pick<Attachment, "hostIfname" | "pod">[];
  /** Where the lines go. */
  logger: Logger;
  /** Records a Warning Event on a pod (with Kubernetes). */
  event?(namespace: string, name: string, reason: string, message: string): void;
}

/**
 * Says what pods forged since the counters were last read: one log line and one Warning Event
 * (`SpoofedFramesDropped`) per pod and kind, at most once per read of the counters (10 s).
 *
 * @example
 * ```ts
 * guard.startCounting(10_000, spoofingReporter({ records: () => store.list(), logger }));
 * ```
 */
export function spoofingReporter(d: SpoofingReporterDeps): (increases: PortDrops[]) => void {
  return (increases) => {
    for (const s of spoofedByPod(increases, d.records())) {
      const what = `${s.packets} frame(s) forging ${KIND_WORDS[s.kind] ?? s.kind}`;
      d.logger.warn("pod {namespace}/{pod} sent {what}: dropped by port security", {
        namespace: s.namespace,
        pod: s.pod,
        kind: s.kind,
        packets: s.packets,
        what,
      });
      if (s.namespace) {
        d.event?.(
          s.namespace,
          s.pod,
          "SpoofedFramesDropped",
          `port security dropped ${what} sent by this pod`,
        );
      }
    }
  };
}

/** What each kind of drop forged, in words. */
const KIND_WORDS: Record<string, string> = {
  mac: "another source MAC",
  ethertype: "a protocol other than IPv4, IPv6 and ARP (or a VLAN tag)",
  arp: "another ARP sender",
  ipv4: "another IPv4 source",
  ipv6: "another IPv6 source",
  nd: "a neighbour advertisement for another address, or neighbour discovery naming another MAC",
  ra: "a router advertisement",
  redirect: "a redirect",
  dhcp: "a DHCP server's message",
  tunnel: "a datagram to the node's VXLAN port (an encapsulated frame)",
  linklocal: "broadcast, multicast or link-local data to other pods",
  unlisted: "anything from a port port security does not list",
};
