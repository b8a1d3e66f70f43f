/**
 * A NETLINK_ROUTE socket that sends one request at a time and waits for its answer. Synchronous
 * (the kernel answers rtnetlink requests before `send` returns), so a request and its answer
 * never interleave with another's.
 *
 * @module
 */
import { type NetlinkSys, SyscallError } from "./libc.ts";
import { NL, parseReplies, type Reply } from "./messages.ts";

/** A request builder: the message for a sequence number. */
export type Build = (seq: number) => Uint8Array;

/**
 * One socket.
 *
 * @example
 * ```ts
 * const sock = new RouteSocket(libc, libc.netlinkSocket());
 * sock.ack("link up", (seq) => linkUp(seq, 1));
 * ```
 */
export class RouteSocket {
  readonly #libc: NetlinkSys;
  readonly #fd: number;
  readonly #buf = new Uint8Array(64 * 1024);
  #seq = Math.floor(Math.random() * 1e6);

  /** Wraps an open socket descriptor. */
  constructor(libc: NetlinkSys, fd: number) {
    this.#libc = libc;
    this.#fd = fd;
  }

  #exchange(what: string, build: Build): Reply {
    const seq = ++this.#seq;
    this.#libc.send(this.#fd, build(seq));
    for (;;) {
      const n = this.#libc.recv(this.#fd, this.#buf);
      const reply = parseReplies(this.#buf.subarray(0, n)).find((r) => r.seq === seq);
      if (!reply) continue; // a late answer to an earlier request
      if (reply.type === NL.ERROR && reply.error) throw new SyscallError(what, -reply.error);
      return reply;
    }
  }

  /**
   * Like {@link RouteSocket.ack}, but sending and waiting on a worker thread, so the JS thread
   * keeps serving while the kernel works (deleting a veth pair waits for an RCU grace period).
   * Use a socket of its own: requests on one socket must not overlap.
   */
  async ackOffThread(what: string, build: Build): Promise<void> {
    const seq = ++this.#seq;
    await this.#libc.sendOffThread(this.#fd, build(seq));
    for (;;) {
      const n = await this.#libc.recvOffThread(this.#fd, this.#buf);
      const reply = parseReplies(this.#buf.subarray(0, n)).find((r) => r.seq === seq);
      if (!reply) continue;
      if (reply.type === NL.ERROR && reply.error) throw new SyscallError(what, -reply.error);
      return;
    }
  }

  /** Sends a request that asks for an ack; throws {@link SyscallError} on a kernel error. */
  ack(what: string, build: Build): void {
    this.#exchange(what, build);
  }

  /** Sends a RTM_GETLINK request; resolves to the link's index. */
  linkIndex(what: string, build: Build): number {
    const reply = this.#exchange(what, build);
    if (reply.index === undefined) throw new SyscallError(what, 22);
    return reply.index;
  }

  /** Sends a dump request; returns every message of the answer up to its end. */
  dump(what: string, build: Build): Reply[] {
    const seq = ++this.#seq;
    this.#libc.send(this.#fd, build(seq));
    const out: Reply[] = [];
    for (;;) {
      const n = this.#libc.recv(this.#fd, this.#buf);
      for (const reply of parseReplies(this.#buf.subarray(0, n))) {
        if (reply.seq !== seq) continue;
        if (reply.type === NL.ERROR && reply.error) throw new SyscallError(what, -reply.error);
        if (reply.type === NL.DONE) return out;
        out.push(reply);
      }
    }
  }

  /** Sends a RTM_GETLINK request; the link's name. */
  linkName(what: string, build: Build): string {
    const reply = this.#exchange(what, build);
    if (reply.name === undefined) throw new SyscallError(what, 22);
    return reply.name;
  }

  /** Closes the socket. */
  close(): void {
    this.#libc.close(this.#fd);
  }
}

/**
 * Runs `fn` on a fresh socket of `sys`, closed afterwards (also when `fn` throws).
 *
 * @example
 * ```ts
 * const routes = withRouteSocket(libc, (sock) => sock.dump("list routes", (seq) => dumpRoutes(seq, 4)));
 * ```
 */
export function withRouteSocket<T>(sys: NetlinkSys, fn: (sock: RouteSocket) => T): T {
  const sock = new RouteSocket(sys, sys.netlinkSocket());
  try {
    return fn(sock);
  } finally {
    sock.close();
  }
}
