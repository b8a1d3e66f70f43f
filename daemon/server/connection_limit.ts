/**
 * Serving a listener's connections within bounds, shared by the CNI socket and the TCP port: one
 * exchange per connection ({@link serveExchange}, with its read deadline and size limits), at most
 * `maxConnections` at once (more are answered 503 at once and closed), and an accept loop that no
 * error ends but the listener's own closing. An accept that fails because the process is out of
 * file descriptors (`EMFILE`) or memory is logged once per spell and retried after a pause: the
 * connections being served finish and free what the next accept needs.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import {
  answer,
  type ExchangeLimits,
  type Reject,
  serveExchange,
  type SocketHandler,
} from "./http1.ts";

/** How a listener's clients are bounded. */
export interface ConnectionLimits extends ExchangeLimits {
  /** Connections served at once; more are answered 503 at once. */
  maxConnections: number;
  /** Builds the answer to a request that never reached the handler. */
  reject: Reject;
  /** Where to log the connection limit and failed accepts. */
  logger?: Logger;
}

/** What a {@link ConnectionServer} counts. */
export interface ConnectionCounts {
  /** Connections being served now. */
  connections: number;
  /** Connections answered 503 because the limit was reached. */
  refused: number;
  /** Accepts that failed (out of file descriptors, …) and were retried. */
  acceptErrors: number;
}

/** The connections of one listener being served. */
export interface ConnectionServer {
  /** Settles when the listener is closed and its accept loop has ended. */
  accepting: Promise<void>;
  /** The counters. */
  counts(): ConnectionCounts;
  /** Settles once every connection being served now has finished (or `deadlineMs` passed). */
  drain(deadlineMs: number): Promise<void>;
  /** Closes every connection still open. */
  closeAll(): void;
}

/** How long an accept that failed for want of resources waits before the next try. */
const ACCEPT_RETRY_MS = 100;

/** Whether an accept error means the listener was closed (the loop ends) rather than a passing lack. */
function listenerClosed(e: unknown): boolean {
  return e instanceof Deno.errors.BadResource || e instanceof Deno.errors.Interrupted;
}

/**
 * Serves `listener`'s connections with `handler` until the listener is closed. `where` names the
 * listener in log lines.
 *
 * @example
 * ```ts
 * const served = serveConnections(Deno.listen({ port: 0 }), handler, limits, "127.0.0.1:9667");
 * ```
 */
export function serveConnections(
  listener: Deno.Listener,
  handler: SocketHandler,
  limits: ConnectionLimits,
  where: string,
): ConnectionServer {
  const { logger } = limits;
  const active = new Set<Promise<void>>();
  const conns = new Set<Deno.Conn>();
  const counts: ConnectionCounts = { connections: 0, refused: 0, acceptErrors: 0 };
  let refusedInBurst = 0;
  let failingSince = 0;

  const serve = (conn: Deno.Conn) => {
    if (conns.size >= limits.maxConnections) {
      counts.refused++;
      if (refusedInBurst++ === 0) {
        logger?.warn(
          "connection limit of {max} reached on {where}: further connections are answered 503 " +
            "(the shim reports code 11) until one finishes",
          { max: limits.maxConnections, where },
        );
      }
      answer(
        conn,
        limits.reject(503, `the daemon is serving ${limits.maxConnections} connections already`),
        limits.writeTimeoutMs,
      );
      return;
    }
    if (refusedInBurst > 0) {
      logger?.info("accepting connections again on {where}; {refused} were refused at the limit", {
        where,
        refused: refusedInBurst,
      });
      refusedInBurst = 0;
    }
    conns.add(conn);
    const task = serveExchange(conn, handler, limits, limits.reject)
      .catch((e) => logger?.error("serving a connection failed: {error}", { error: String(e) }))
      .finally(() => {
        conns.delete(conn);
        active.delete(task);
        counts.connections = conns.size;
      });
    active.add(task);
    counts.connections = conns.size;
  };

  const accepting = (async () => {
    while (true) {
      let conn: Deno.Conn;
      try {
        conn = await listener.accept();
      } catch (e) {
        if (listenerClosed(e)) return;
        counts.acceptErrors++;
        if (!failingSince) {
          failingSince = Date.now();
          logger?.error(
            "accepting a connection on {where} failed ({error}); retrying every {ms} ms while " +
              "{open} connections are served",
            { where, error: String(e), ms: ACCEPT_RETRY_MS, open: conns.size },
          );
        }
        await new Promise((r) => setTimeout(r, ACCEPT_RETRY_MS));
        continue;
      }
      if (failingSince) {
        logger?.info("accepting connections on {where} again after {ms} ms of failures", {
          where,
          ms: Date.now() - failingSince,
        });
        failingSince = 0;
      }
      serve(conn);
    }
  })();

  return {
    accepting,
    counts: () => ({ ...counts }),
    async drain(deadlineMs) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const deadline = new Promise<void>((r) => (timer = setTimeout(r, deadlineMs)));
      await Promise.race([Promise.allSettled([...active]), deadline]);
      clearTimeout(timer);
    },
    closeAll() {
      for (const conn of conns) {
        try {
          conn.close();
        } catch { /* already closed */ }
      }
    },
  };
}
