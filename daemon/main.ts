/**
 * `deno task daemon`: the node daemon, wired in this one place. Everything else receives its
 * collaborators as parameters.
 *
 * Usage: `deno task daemon [--config FILE] [--socket PATH] [--node-name NAME] [--kubeconfig FILE] [--state-dir DIR]`
 *
 * @module
 */
import { getLogger } from "@logtape/logtape";
import { parseArgs } from "deno-std/cli/parse_args.js";
import { AttachmentStore } from "./attachment_store.ts";
import { CniService } from "./cni_service.ts";
import { ConfigError, type ConfigOverrides, type DaemonConfig, loadConfig } from "./config.ts";
import { parseCidr } from "./ipam/cidr.ts";
import { defaultRange, LocalPool } from "./ipam/local_pool.ts";
import { setupLogging, teardownLogging } from "./log.ts";
import { IpPlumber } from "./net/ip_plumber.ts";
import { SpawningIpRunner } from "./net/ip_runner.ts";
import type { Plumber } from "./net/plumber.ts";
import { createRouter } from "./router.ts";
import { claimSocketPath, serveOnSocket, type SocketServer } from "./socket_server.ts";

/** A running daemon. */
export interface Daemon {
  /** The configuration it runs with. */
  config: DaemonConfig;
  /** Stops it gracefully (in-flight requests finish up to the configured deadline). */
  stop(): Promise<void>;
  /** Settles when the server has stopped. */
  finished: Promise<void>;
}

/** Collaborators a caller (a test, the demo) may replace. */
export interface DaemonOverrides {
  /** The kernel side; defaults to iproute2 batches. */
  plumber?: Plumber;
}

/**
 * Starts a daemon with `config`: opens its state, claims the socket, serves.
 *
 * @example
 * ```ts
 * const daemon = await startDaemon(resolveConfig(undefined, { socket: "/tmp/ferry.sock" }));
 * await daemon.stop();
 * ```
 */
export async function startDaemon(
  config: DaemonConfig,
  overrides: DaemonOverrides = {},
): Promise<Daemon> {
  const logger = getLogger(["ferry", "daemon"]);
  const range = defaultRange(parseCidr(config.network.subnet), {
    start: config.network.rangeStart,
    end: config.network.rangeEnd,
    gateway: config.network.gateway,
  });
  const pool = await LocalPool.open(
    `${config.stateDir}/ipam/${config.network.subnet.replace("/", "_")}`,
    range,
  );
  const store = await AttachmentStore.open(`${config.stateDir}/attachments`);
  let ready = false;
  const service = new CniService({
    pool,
    store,
    plumber: overrides.plumber ?? new IpPlumber(new SpawningIpRunner()),
    mtu: config.network.mtu,
    isReady: () => ready,
    logger: getLogger(["ferry", "cni"]),
  });
  const router = createRouter({
    handle: (req) => service.handle(req),
    isHealthy: () => true,
    isReady: () => ready,
    maxRequestBytes: config.maxRequestBytes,
    logger: getLogger(["ferry", "http"]),
  });
  await claimSocketPath(config.socket);
  const server: SocketServer = await serveOnSocket(config.socket, router);
  ready = true;
  logger.info("serving on {socket} for node {node}, pool {subnet} ({free} free)", {
    socket: config.socket,
    node: config.nodeName,
    subnet: config.network.subnet,
    free: pool.free,
  });
  return {
    config,
    finished: server.finished,
    async stop() {
      ready = false;
      logger.info("shutting down");
      await server.shutdown(config.shutdownTimeoutSeconds * 1000);
    },
  };
}

/** Parses the daemon's command line. */
export function parseDaemonArgs(
  args: string[],
): { configFile?: string; overrides: ConfigOverrides } {
  const flags = parseArgs(args, {
    string: ["config", "socket", "node-name", "kubeconfig", "state-dir"],
    unknown: (arg: string) => {
      throw new ConfigError(`unknown argument ${arg}`);
    },
  });
  return {
    configFile: flags.config,
    overrides: {
      socket: flags.socket,
      nodeName: flags["node-name"],
      kubeconfig: flags.kubeconfig,
      stateDir: flags["state-dir"],
    },
  };
}

if (import.meta.main) {
  let daemon: Daemon;
  try {
    const { configFile, overrides } = parseDaemonArgs(Deno.args);
    const config = await loadConfig(configFile, overrides);
    await setupLogging(config.logLevel);
    daemon = await startDaemon(config);
  } catch (e) {
    console.error(`ferry daemon: ${e instanceof Error ? e.message : e}`);
    Deno.exit(1);
  }
  const stop = async () => {
    await daemon.stop();
    await teardownLogging();
    Deno.exit(0);
  };
  Deno.addSignalListener("SIGTERM", stop);
  Deno.addSignalListener("SIGINT", stop);
  await daemon.finished;
}
