/**
 * The daemon's TCP port on localhost: `/healthz` and `/readyz` for the kubelet's probes (the
 * socket's own endpoints are for the shim and tools on the node) and `/metrics` in the Prometheus
 * text format. Read-only, small, nothing on it changes the node.
 *
 * @module
 */

/** What the port serves. */
export interface HttpPortDeps {
  /** Liveness. */
  healthy: () => boolean;
  /** Readiness. */
  ready: () => boolean;
  /** The metrics text and its content type. */
  metrics: () => Promise<{ text: string; contentType: string }>;
}

/** A running port. */
export interface HttpPort {
  /** `host:port` it listens on. */
  address: string;
  /** Stops listening. */
  close(): Promise<void>;
}

/**
 * Listens on `host:port` (0: any free port).
 *
 * @example
 * ```ts
 * const port = serveHttpPort("127.0.0.1", 9667, { healthy, ready, metrics });
 * ```
 */
export function serveHttpPort(host: string, port: number, deps: HttpPortDeps): HttpPort {
  const server = Deno.serve({ hostname: host, port, onListen: () => {} }, async (req) => {
    const path = new URL(req.url).pathname;
    if (req.method !== "GET") return new Response("GET only\n", { status: 405 });
    if (path === "/healthz" || path === "/readyz") {
      const ok = path === "/healthz" ? deps.healthy() : deps.ready();
      return new Response(ok ? "ok\n" : "not ok\n", { status: ok ? 200 : 503 });
    }
    if (path === "/metrics") {
      const { text, contentType } = await deps.metrics();
      return new Response(text, { headers: { "content-type": contentType } });
    }
    return new Response("not found\n", { status: 404 });
  });
  const addr = server.addr as Deno.NetAddr;
  return {
    address: `${addr.hostname}:${addr.port}`,
    close: () => server.shutdown(),
  };
}
