/**
 * The daemon's kernel side, chosen from its config: the iproute2 runner (always: sysctls, routes
 * without netlink, delegated plugins' helpers), in-process netlink when `network.plumbing` asks
 * for it and FFI loads, and the plumber built on them.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { DaemonConfig } from "../config/config.ts";
import { IpPlumber } from "../net/ip_plumber.ts";
import { SpawningIpRunner } from "../net/ip_runner.ts";
import { Libc } from "../net/netlink/libc.ts";
import { NetlinkPlumber } from "../net/netlink/netlink_plumber.ts";
import type { Plumber } from "../net/plumber.ts";

/** The kernel side of one daemon. */
export interface Plumbing {
  /** iproute2, run as processes. */
  ip: SpawningIpRunner;
  /** In-process netlink, when configured and loadable. */
  libc?: Libc;
  /** Plugs and unplugs pods: `given`, or netlink, or iproute2. */
  plumber: Plumber;
  /**
   * In-process netlink's time on the JS thread: synchronous work inside pod namespaces, and
   * netlink send and recv (none without netlink).
   */
  syncStats(): {
    netnsSync?: { calls: number; ms: number };
    netlinkSync?: { calls: number; ms: number; maxMs: number };
  };
  /** Closes what this built (a plumber given by the caller is the caller's). */
  close(): void;
}

/**
 * Builds the kernel side; `given` (a test's or the demo's plumber) replaces the plumber.
 *
 * @example
 * ```ts
 * const { plumber, close } = openPlumbing(config, undefined, logger);
 * close();
 * ```
 */
export function openPlumbing(
  config: DaemonConfig,
  given: Plumber | undefined,
  logger: Logger,
): Plumbing {
  const ip = new SpawningIpRunner(config.sysctlDir);
  const libc = openLibc(config, logger);
  const iproute2 = new IpPlumber(ip, {
    forwarding: config.network.forwarding,
    sysctlDir: config.sysctlDir,
  });
  const plumber: Plumber = given ??
    (libc ? new NetlinkPlumber(libc, iproute2, config.sysctlDir) : iproute2);
  return {
    ip,
    libc,
    plumber,
    syncStats: () =>
      libc
        ? {
          netnsSync: { calls: libc.netnsTime.calls, ms: Math.round(libc.netnsTime.ms * 10) / 10 },
          netlinkSync: {
            calls: libc.netlinkTime.calls,
            ms: Math.round(libc.netlinkTime.ms * 100) / 100,
            maxMs: Math.round(libc.netlinkTime.maxMs * 100) / 100,
          },
        }
        : {},
    close() {
      if (!given) plumber.close?.();
      // An `ip` or `nsenter` still running is killed: none outlives the daemon.
      ip.close();
    },
  };
}

/**
 * Libc for in-process netlink, when the config asks for it (`plumbing: netlink`) and FFI can be
 * loaded; otherwise undefined, and everything falls back to iproute2 (said once, here).
 */
function openLibc(config: DaemonConfig, logger: Logger): Libc | undefined {
  if (config.network.plumbing !== "netlink") return undefined;
  try {
    return Libc.open();
  } catch (e) {
    logger.warn("in-process netlink unavailable ({error}); plugging and routing with iproute2", {
      error: e instanceof Error ? e.message : String(e),
    });
    return undefined;
  }
}
