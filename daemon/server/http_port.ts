/**
 * The daemon's TCP port on localhost: `/healthz` and `/readyz` for the kubelet's probes (the
 * socket's own endpoints are for the shim and tools on the node) and `/metrics` in the Prometheus
 * text format. Read-only, small, nothing on it changes the node.
 *
 * Any local process can connect to it, so it is served within the same bounds as the CNI socket
 * ({@link serveConnections}): a request must arrive whole within the read deadline and within the
 * header limit, at most `maxConnections` are served at once, and no failed accept (out of file
 * descriptors) ends the process or the port.
 *
 * @module
 */
import type { SocketReply, SocketRequest } from "./http1.ts";
import {
  type ConnectionLimits,
  type ConnectionServer,
  serveConnections,
} from "./connection_limit.ts";

/** What the port serves. */
export interface HttpPortDeps {
  /** Liveness. */
  healthy: () => boolean;
  /** Readiness. */
  ready: () => boolean;
  /** What `/readyz` adds after `ok` (e.g. `degraded: …`). */
  readyNote?: () => string | undefined;
  /** The metrics text and its content type; `detail` false leaves out tenants' names. */
  metrics: (detail: boolean) => Promise<{ text: string; contentType: string }>;
  /**
   * Who sees tenants' names in `/metrics`. Absent: everyone (the localhost port). Present (the
   * scrapers' port): a request without `Authorization` gets the metrics without them; one with
   * `Bearer <token>` equal to `detailToken()` gets them; any other `Authorization` gets 401.
   */
  access?: { detailToken: () => Promise<string | undefined> };
}

/** `a` and `b` equal, compared in time that depends on their lengths only. */
export function sameSecret(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a), y = new TextEncoder().encode(b);
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}

/** Whether `/metrics` answers with detail, without, or not at all (401). */
async function metricsDetail(
  req: SocketRequest,
  access: HttpPortDeps["access"],
): Promise<boolean | "denied"> {
  if (!access) return true;
  const auth = req.headers.get("authorization");
  if (auth === undefined) return false;
  const m = /^Bearer +(\S+) *$/i.exec(auth);
  const token = m ? await access.detailToken() : undefined;
  return m && token && sameSecret(m[1], token) ? true : "denied";
}

/** A running port. */
export interface HttpPort {
  /** `host:port` it listens on. */
  address: string;
  /** Connections served now, refused at the limit, failed accepts. */
  counts: ConnectionServer["counts"];
  /** Stops listening; connections still open are closed after at most `deadlineMs` (1 s). */
  close(deadlineMs?: number): Promise<void>;
}

/** The port's bounds when none are given: those of the socket's defaults, smaller bodies. */
export const DEFAULT_PORT_LIMITS: ConnectionLimits = {
  readTimeoutMs: 10_000,
  writeTimeoutMs: 10_000,
  maxHeaderBytes: 16 * 1024,
  maxBodyBytes: 1024,
  maxConnections: 512,
  reject: (status, message) => ({ status, body: message + "\n" }),
};

/** Answers one request of the port. */
export async function portReply(req: SocketRequest, deps: HttpPortDeps): Promise<SocketReply> {
  if (req.method !== "GET") return { status: 405, body: "GET only\n" };
  if (req.path === "/healthz" || req.path === "/readyz") {
    const ok = req.path === "/healthz" ? deps.healthy() : deps.ready();
    const note = ok && req.path === "/readyz" ? deps.readyNote?.() : undefined;
    return { status: ok ? 200 : 503, body: (ok ? "ok\n" : "not ok\n") + (note ? `${note}\n` : "") };
  }
  if (req.path === "/metrics") {
    const detail = await metricsDetail(req, deps.access);
    if (detail === "denied") return { status: 401, body: "unauthorized\n" };
    const { text, contentType } = await deps.metrics(detail);
    return { status: 200, body: text, contentType };
  }
  return { status: 404, body: "not found\n" };
}

/**
 * Listens on `host:port` (0: any free port).
 *
 * @throws {Deno.errors.AddrInUse} and the like when the port cannot be bound.
 * @example
 * ```ts
 * const port = serveHttpPort("127.0.0.1", 9667, { healthy, ready, metrics });
 * ```
 */
export function serveHttpPort(
  host: string,
  port: number,
  deps: HttpPortDeps,
  limits: Partial<ConnectionLimits> = {},
): HttpPort {
  const listener = Deno.listen({ hostname: host, port, transport: "tcp" });
  const addr = listener.addr as Deno.NetAddr;
  const address = `${addr.hostname}:${addr.port}`;
  const served = serveConnections(
    listener,
    (req) => portReply(req, deps),
    { ...DEFAULT_PORT_LIMITS, ...limits },
    address,
  );
  return {
    address,
    counts: served.counts,
    async close(deadlineMs = 1000) {
      try {
        listener.close();
      } catch { /* already closed */ }
      await served.accepting;
      await served.drain(deadlineMs);
      served.closeAll();
    },
  };
}
