/**
 * Serving HTTP on the daemon's unix socket: the parent directory is created (0700), a stale
 * socket file is replaced only after checking that no live daemon answers on it, the socket is
 * made 0600, and shutdown finishes in-flight requests up to a deadline before removing the socket.
 *
 * @module
 */
import { HEALTHZ_PATH } from "../lib/socket_api.ts";
import { SocketUnavailableError, unixRequest } from "../lib/unix_http.ts";

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

/** A running server. */
export interface SocketServer {
  /** Stops accepting, waits for in-flight requests up to `deadlineMs`, removes the socket. */
  shutdown(deadlineMs: number): Promise<void>;
  /** Settles when the server has stopped. */
  finished: Promise<void>;
}

/**
 * Serves `handler` on `path` (call {@link claimSocketPath} first).
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
  handler: (req: Request) => Promise<Response>,
): Promise<SocketServer> {
  const listening = Promise.withResolvers<void>();
  const server = Deno.serve({
    path,
    transport: "unix",
    onListen: () => listening.resolve(),
    onError: (e) => new Response(JSON.stringify({ error: String(e) }), { status: 500 }),
  }, handler);
  await listening.promise;
  await Deno.chmod(path, 0o600);
  const finished = server.finished.then(() => {});
  return {
    finished,
    async shutdown(deadlineMs: number) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const deadline = new Promise<void>((r) => (timer = setTimeout(r, deadlineMs)));
      await Promise.race([server.shutdown(), deadline]);
      clearTimeout(timer);
      await Deno.remove(path).catch(() => {});
    },
  };
}
