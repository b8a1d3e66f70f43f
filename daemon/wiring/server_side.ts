/**
 * The daemon's serving side, built from its config: the router over the CNI service (each request
 * counted and timed for metrics, the idle trim touched), the unix socket that serves it, and the
 * TCP ports for probes and scrapers.
 *
 * @module
 */
import { Abandoned } from "../service/abandoned.ts";
import { getLogger, type Logger } from "@logtape/logtape";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { DaemonConfig } from "../config/config.ts";
import type { IdleTrimmer } from "../runtime/idle_trim.ts";
import type { CniService, Undelivered } from "../service/cni_service.ts";
import type { FerryMetrics } from "../telemetry/metrics.ts";
import { type HttpPort, type HttpPortDeps, serveHttpPort } from "../server/http_port.ts";
import { createRouter, protocolErrorReply } from "../server/router.ts";
import { serveOnSocket, type SocketServer } from "../server/socket_server.ts";

/** What serving is built from. */
export interface ServerSideDeps {
  /** The daemon's config. */
  config: DaemonConfig;
  /** Runs CNI requests. */
  service: CniService;
  /** Counts requests and serves `/metrics`. */
  metrics: FerryMetrics;
  /** Touched after every request (trims memory once the daemon is quiet). */
  trimmer?: IdleTrimmer;
  /** Liveness. */
  healthy: () => boolean;
  /** Readiness. */
  ready: () => boolean;
  /** What `/readyz` adds after `ok` (e.g. `degraded: …`). */
  readyNote?: () => string | undefined;
  /** Counters for `GET /v1/stats`. */
  stats: () => unknown;
  /** Where to log. */
  logger: Logger;
}

/** The daemon's listeners. */
export interface ServerSide {
  /** The unix socket's server. */
  socket: SocketServer;
  /** CNI requests served, by command. */
  cniRequests: Record<string, number>;
  /** Probes and metrics (`server.httpPort`), when served. */
  httpPort?: HttpPort;
  /** Metrics for scrapers (`server.metricsPort`), when served. */
  metricsPort?: HttpPort;
  /** Closes the TCP ports (the socket is shut down by its own deadline). */
  closePorts(): Promise<void>;
}

/**
 * The scrapers' detail token: `path`'s content, trimmed, read at each request so a rotated file
 * takes effect at once; undefined when no file is configured, it cannot be read or it is empty.
 */
async function readToken(path: string): Promise<string | undefined> {
  if (!path) return undefined;
  try {
    return (await Deno.readTextFile(path)).trim() || undefined;
  } catch {
    return undefined;
  }
}

/**
 * Serves the CNI service on the unix socket, then opens the TCP ports (a port that cannot be
 * bound is logged: the CNI socket serves whether or not they can).
 *
 * @example
 * ```ts
 * const server = await serverSide({ config, service, metrics, healthy, ready, stats, logger });
 * await server.socket.shutdown(10_000);
 * ```
 */
export async function serverSide(deps: ServerSideDeps): Promise<ServerSide> {
  const { config, service, metrics, trimmer } = deps;
  const http = getLogger(["ferry", "http"]);
  const cniRequests: Record<string, number> = {};
  // Set once the socket serves (a /healthz may arrive before serveOnSocket returns).
  const served: { socket?: SocketServer } = {};
  const router = createRouter({
    handle: async (req, signal, undelivered) => {
      cniRequests[req.command] = (cniRequests[req.command] ?? 0) + 1;
      const started = performance.now();
      try {
        // An answer that cannot be delivered is an ADD abandoned by its requester as well.
        const abandoned: Undelivered | undefined = undelivered &&
          ((undo) =>
            undelivered(() => {
              metrics.abandoned(req.command);
              return undo();
            }));
        const result = await service.handle(req, signal, abandoned);
        metrics.request(req.command, 0, performance.now() - started);
        return result;
      } catch (e) {
        const code = e instanceof CniError ? e.code : CNI_ERROR.INTERNAL;
        metrics.request(req.command, code, performance.now() - started);
        if (e instanceof Abandoned) metrics.abandoned(req.command);
        throw e;
      } finally {
        trimmer?.touch();
      }
    },
    isHealthy: deps.healthy,
    isReady: deps.ready,
    readyNote: deps.readyNote,
    healthNote: () => {
      const s = served.socket?.status();
      return s?.lastRecreated
        ? `socket created again ${s.recreated} time(s); last at ${s.lastRecreated.at}: found ${s.lastRecreated.found}`
        : undefined;
    },
    stats: deps.stats,
    maxRequestBytes: config.maxRequestBytes,
    logger: http,
  });
  const socket = served.socket = await serveOnSocket(config.socket, router, {
    readTimeoutMs: config.server.readTimeoutSeconds * 1000,
    writeTimeoutMs: config.server.writeTimeoutSeconds * 1000,
    maxConnections: config.server.maxConnections,
    maxBodyBytes: config.maxRequestBytes,
    maxHeaderBytes: 16 * 1024,
    reject: protocolErrorReply,
    logger: http,
  });
  // The scrapers' port is a listener of its own, so that clients of the node's address filling
  // its connections never delay the kubelet's probes on localhost.
  // Pods can reach the scrapers' port: tenants' names there only for the detail token's holders.
  const openPort = (host: string, port: number, what: string, access?: HttpPortDeps["access"]) => {
    if (port < 0) return undefined;
    try {
      return serveHttpPort(host, port, {
        healthy: deps.healthy,
        ready: deps.ready,
        readyNote: deps.readyNote,
        metrics: (detail) =>
          Promise.resolve({ text: metrics.text(detail), contentType: metrics.contentType }),
        access,
      }, {
        readTimeoutMs: config.server.readTimeoutSeconds * 1000,
        writeTimeoutMs: config.server.writeTimeoutSeconds * 1000,
        maxConnections: config.server.maxConnections,
        logger: http,
      });
    } catch (e) {
      deps.logger.error("{what} are not served: {host}:{port}: {error}", {
        what,
        host,
        port,
        error: e instanceof Error ? e.message : String(e),
      });
    }
  };
  const httpPort = openPort(config.server.httpHost, config.server.httpPort, "probes and metrics");
  const metricsPort = openPort(
    config.server.metricsHost,
    config.server.metricsPort,
    "metrics for scrapers",
    { detailToken: () => readToken(config.server.metricsDetailTokenFile) },
  );
  deps.logger.info("serving on {socket} for node {node}, ipam {ipam}, routing {routing}, {mode}", {
    socket: config.socket,
    node: config.nodeName,
    ipam: config.ipam.mode,
    routing: config.routing.mode,
    mode: config.standalone ? "standalone" : "watching its pods",
  });
  if (httpPort) {
    deps.logger.info("probes and metrics on http://{address}", { address: httpPort.address });
  }
  if (metricsPort) {
    deps.logger.info("metrics for scrapers on http://{address}/metrics", {
      address: metricsPort.address,
    });
  }
  return {
    socket,
    cniRequests,
    httpPort,
    metricsPort,
    async closePorts() {
      await Promise.all([httpPort?.close(), metricsPort?.close()]);
    },
  };
}
