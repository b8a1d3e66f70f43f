/**
 * Serving HTTP on the daemon's unix socket: the parent directory is created (0700), a stale
 * socket file is replaced only after checking that no live daemon answers on it, the socket is
 * made 0600 and watched (a removed or replaced socket is created again), connections are bounded
 * in number and time, and shutdown finishes in-flight requests up to a deadline before removing
 * the socket.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { HEALTHZ_PATH } from "../../lib/socket_api.ts";
import type { SocketHandler } from "./http1.ts";
import {
  type ConnectionLimits,
  type ConnectionServer,
  serveConnections,
} from "./connection_limit.ts";
import { SocketUnavailableError, unixRequest } from "../../lib/unix_http.ts";

/** Another process holds the socket. */
export class SocketInUseError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "SocketInUseError";
  }
}

/**
 * Makes `path` free to listen on: creates the parent directory, and removes a socket file that
 * nothing answers on.
 *
 * @throws {SocketInUseError} when a live daemon answers there, or the path is not a socket.
 */
export async function claimSocketPath(path: string): Promise<void> {
  const dir = path.slice(0, path.lastIndexOf("/")) || "/";
  await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
  let info: Deno.FileInfo;
  try {
    info = await Deno.lstat(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return;
    throw e;
  }
  if (!info.isSocket) {
    throw new SocketInUseError(`${path} exists and is not a socket; refusing to replace it`);
  }
  try {
    await unixRequest(path, "GET", HEALTHZ_PATH, undefined, AbortSignal.timeout(2000));
  } catch (e) {
    if (e instanceof SocketUnavailableError) {
      await Deno.remove(path);
      return;
    }
    throw new SocketInUseError(
      `something holds ${path} but does not answer properly (${e}); refusing to replace it`,
    );
  }
  throw new SocketInUseError(`another Ferry daemon is already serving on ${path}`);
}

/**
 * How the server bounds its clients: past `maxConnections` a connection is answered 503 at once
 * (the shim reports code 11); `logger` also hears of a replaced socket.
 */
export type SocketServerOptions = ConnectionLimits & { logger?: Logger };

/** The defaults: 10 s to send a request, 10 s to take the answer, 1 MiB bodies, 512 connections. */
export const DEFAULT_SERVER_OPTIONS: SocketServerOptions = {
  readTimeoutMs: 10_000,
  writeTimeoutMs: 10_000,
  maxHeaderBytes: 16 * 1024,
  maxBodyBytes: 1024 * 1024,
  maxConnections: 512,
  reject: (status, message) => ({ status, body: message + "\n" }),
};

/** What the server knows of its socket and clients, for `/healthz` and `/v1/stats`. */
export interface SocketStatus {
  /** Connections being served now. */
  connections: number;
  /** Connections answered 503 because the limit was reached. */
  refused: number;
  /** How often the socket file was found removed or replaced and was created again. */
  recreated: number;
  /** The last time that happened, and what was found. */
  lastRecreated?: { at: string; found: string };
}

/** A running server. */
export interface SocketServer {
  /** Stops accepting, waits for in-flight requests up to `deadlineMs`, removes the socket. */
  shutdown(deadlineMs: number): Promise<void>;
  /** Settles when the server has stopped. */
  finished: Promise<void>;
  /** The socket's and the connections' state. */
  status(): SocketStatus;
  /**
   * Checks that the socket file is still the one this server listens on (same inode, 0600), and
   * creates it again when it is not. A watch on its directory calls this on every change.
   */
  verify(): Promise<void>;
}

/**
 * Serves `handler` on `path` (call {@link claimSocketPath} first): one request per connection,
 * each within the limits of `options`, at most `options.maxConnections` at once. The shim may
 * connect only with read and write permission on the socket's path, which also lets it remove or
 * replace that path; the server watches the socket's directory and creates its socket again
 * whenever the file is not the one it listens on (counted in {@link SocketServer.status}).
 *
 * @example
 * ```ts
 * await claimSocketPath(path);
 * const server = await serveOnSocket(path, handler);
 * await server.shutdown(10_000);
 * ```
 */
export async function serveOnSocket(
  path: string,
  handler: SocketHandler,
  options: Partial<SocketServerOptions> = {},
): Promise<SocketServer> {
  const o = { ...DEFAULT_SERVER_OPTIONS, ...options };
  const dir = path.slice(0, path.lastIndexOf("/")) || "/";
  /** Every listener this server had: the socket may be created again, each with its connections. */
  const served: ConnectionServer[] = [];
  const status: SocketStatus = { connections: 0, refused: 0, recreated: 0 };
  let stopping = false;
  let listener: Deno.Listener;
  let accepting: Promise<void> = Promise.resolve();
  let identity: { dev: number; ino: number };

  const listen = async () => {
    const l = Deno.listen({ transport: "unix", path });
    await Deno.chmod(path, 0o600);
    const info = await Deno.lstat(path);
    identity = { dev: info.dev, ino: info.ino ?? 0 };
    listener = l;
    const connections = serveConnections(l, handler, o, path);
    served.push(connections);
    accepting = connections.accepting;
  };
  await listen();

  let verifying: Promise<void> | undefined;
  const verify = () => verifying ??= check().finally(() => (verifying = undefined));
  const check = async () => {
    if (stopping) return;
    let found: string | undefined;
    try {
      const info = await Deno.lstat(path);
      if (!info.isSocket) found = "a file that is not a socket";
      else if (info.dev !== identity.dev || info.ino !== identity.ino) found = "another socket";
      else if ((info.mode! & 0o777) !== 0o600) {
        o.logger?.warn("the socket {socket} had mode {mode}; set back to 0600", {
          socket: path,
          mode: (info.mode! & 0o777).toString(8),
        });
        await Deno.chmod(path, 0o600);
      }
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
      found = "no socket at all";
    }
    if (!found || stopping) return;
    o.logger?.error("the socket {socket} was removed or replaced ({found}); creating it again", {
      socket: path,
      found,
    });
    // The old listener goes first, and entirely: dropping it unlinks its path, which by then
    // would be the new socket's.
    try {
      listener.close();
    } catch { /* already closed */ }
    await accepting;
    await Deno.remove(path).catch(() => {});
    await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
    await listen();
    status.recreated++;
    status.lastRecreated = { at: new Date().toISOString(), found };
  };

  const name = path.slice(path.lastIndexOf("/") + 1);
  const concernsSocket = (paths: string[]) =>
    paths.length === 0 || paths.some((p) => p === dir || p.endsWith(`/${name}`));
  const watcher = Deno.watchFs(dir, { recursive: false });
  (async () => {
    try {
      for await (const event of watcher) {
        // Only what can concern the socket: its own name, the directory itself, or an event
        // that names nothing (a rescan). Other files beside it (a log) change often.
        if (concernsSocket(event.paths)) {
          await verify().catch((e) =>
            o.logger?.error("re-creating the socket {socket} failed: {error}", {
              socket: path,
              error: String(e),
            })
          );
        }
      }
    } catch { /* closed */ }
  })();

  const finished = Promise.withResolvers<void>();
  return {
    finished: finished.promise,
    status: () => {
      const counts = served.map((c) => c.counts());
      return {
        ...status,
        connections: counts.reduce((n, c) => n + c.connections, 0),
        refused: counts.reduce((n, c) => n + c.refused, 0),
      };
    },
    verify,
    async shutdown(deadlineMs: number) {
      stopping = true;
      watcher.close();
      try {
        listener.close();
      } catch { /* already closed */ }
      const started = Date.now();
      for (const c of served) await c.drain(Math.max(0, deadlineMs - (Date.now() - started)));
      for (const c of served) c.closeAll();
      // Only our own socket is removed: a replacement someone else put there is theirs.
      const info = await Deno.lstat(path).catch(() => undefined);
      if (info && info.dev === identity.dev && info.ino === identity.ino) {
        await Deno.remove(path).catch(() => {});
      }
      finished.resolve();
    },
  };
}
