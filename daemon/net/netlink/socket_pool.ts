/**
 * Netlink sockets of the daemon's own namespace for requests sent from worker threads (creating
 * and deleting veth pairs), kept open between requests. Each such request needs a socket of its
 * own while it runs (requests on one socket must not overlap), and opening one per request and
 * closing it after cost the JS thread a `socket`, a `setsockopt` and a `close` every ADD and DEL
 * (about 0.3 ms of a one-at-a-time DEL's JS-thread time on this machine, `--cpu-prof`). A socket
 * goes back to the pool after its request, unless a send or receive on it failed (a timed-out
 * receive may leave an answer to come, and it is not worth reasoning about): that one is closed.
 * Answers a request left unread (a batch the kernel refused halfway) are skipped by the next
 * request's sequence numbers, as on any {@link RouteSocket}.
 *
 * @module
 */
import type { NetlinkSys } from "./libc.ts";
import { ACK_BUFFER_BYTES, NetlinkRefusal, RouteSocket } from "./route_socket.ts";

/**
 * The default number of idle sockets kept: one serves requests that come one at a time; a burst
 * opens one per request in flight and closes all but these after, so the daemon's descriptors
 * do not stay at the size of its largest burst.
 */
export const DEFAULT_MAX_IDLE = 2;

/**
 * The pool. Sockets are made in the calling thread's namespace: create it, and call
 * {@link RouteSocketPool.use}, only in the daemon's own.
 *
 * @example
 * ```ts
 * const pool = new RouteSocketPool(libc);
 * await pool.use((sock) => sock.ackOffThread("delete veth1", (seq) => delLink(seq, "veth1")));
 * ```
 */
export class RouteSocketPool {
  readonly #sys: NetlinkSys;
  readonly #maxIdle: number;
  readonly #idle: RouteSocket[] = [];
  #closed = false;

  /** A pool of at most `maxIdle` idle sockets of `sys`, with receive buffers for acks. */
  constructor(sys: NetlinkSys, maxIdle = DEFAULT_MAX_IDLE) {
    this.#sys = sys;
    this.#maxIdle = maxIdle;
  }

  /** Sockets open and waiting for a request. */
  get idle(): number {
    return this.#idle.length;
  }

  /**
   * Runs `fn` with a socket to itself: an idle one, or a new one when none is. The socket goes
   * back to the pool when `fn` is done (also when the kernel refused its request), unless a send
   * or receive on it failed or the pool is full or closed; then it is closed.
   */
  async use<T>(fn: (sock: RouteSocket) => Promise<T>): Promise<T> {
    const sock = this.#idle.pop() ??
      new RouteSocket(this.#sys, this.#sys.netlinkSocket(), ACK_BUFFER_BYTES);
    let healthy = true;
    try {
      return await fn(sock);
    } catch (e) {
      healthy = e instanceof NetlinkRefusal;
      throw e;
    } finally {
      if (healthy && !this.#closed && this.#idle.length < this.#maxIdle) this.#idle.push(sock);
      else sock.close();
    }
  }

  /** Closes the idle sockets; sockets in use are closed when their request ends. */
  close(): void {
    this.#closed = true;
    for (const sock of this.#idle.splice(0)) sock.close();
  }
}
