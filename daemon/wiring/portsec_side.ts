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
import { guardRemovalScript } from "../portsec/guard_table.ts";
import { PortGuard } from "../portsec/port_guard.ts";
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
