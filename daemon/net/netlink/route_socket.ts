/**
 * A NETLINK_ROUTE socket that sends one request at a time and waits for its answer. Synchronous
 * (the kernel answers rtnetlink requests before `send` returns), so a request and its answer
 * never interleave with another's.
 *
 * @module
 */
import { type NetlinkSys, SyscallError } from "./libc.ts";
import { NL, parseReplies, type Reply } from "./messages.ts";
import { concatBytes } from "../../../lib/bytes.ts";

/**
 * The kernel's refusal of a request, read from its answer (an `NLMSG_ERROR` with an errno): the
 * socket itself is fine, unlike after a {@link SyscallError} from a send or receive.
 */
export class NetlinkRefusal extends SyscallError {
  /** Creates the error for `what` refused with `errno`. */
  constructor(what: string, errno: number) {
    super(what, errno);
    this.name = "NetlinkRefusal";
  }
}

/** A request builder: the message for a sequence number. */
export type Build = (seq: number) => Uint8Array;

/**
 * A receive buffer for sockets that only send requests and read their acks (and single-link
 * answers): a plug opens two such sockets, and zeroing 64 KiB for each is wasted work.
 */
export const ACK_BUFFER_BYTES = 8 * 1024;

/**
 * The most requests {@link RouteSocket.ackAll} sends in one batch: their acks (about 1 KiB of the
 * receive queue each, with the kernel's overhead) stay well within a socket's default queue of
 * 208 KiB.
 */
export const MAX_BATCH_STEPS = 64;

/** One request of a batch: what it does (named in an error) and its builder. */
export interface Step {
  /** What the request does, e.g. `add address 10.0.0.2/24`. */
  what: string;
  /** Its message. */
  build: Build;
}

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
  readonly #buf: Uint8Array;
  #seq = Math.floor(Math.random() * 1e6);

  /**
   * Wraps an open socket descriptor. `bufferBytes` bounds one answer: dumps need the default
   * (the kernel fills up to 32 KiB per message); a socket that only takes acks (each at most the
   * request echoed back with an error text) can do with {@link ACK_BUFFER_BYTES}.
   */
  constructor(libc: NetlinkSys, fd: number, bufferBytes = 64 * 1024) {
    this.#libc = libc;
    this.#fd = fd;
    this.#buf = new Uint8Array(bufferBytes);
  }

  #exchange(what: string, build: Build): Reply {
    const seq = ++this.#seq;
    this.#libc.send(this.#fd, build(seq));
    for (;;) {
      const n = this.#libc.recv(this.#fd, this.#buf);
      const reply = parseReplies(this.#buf.subarray(0, n)).find((r) => r.seq === seq);
      if (!reply) continue; // a late answer to an earlier request
      if (reply.type === NL.ERROR && reply.error) throw new NetlinkRefusal(what, -reply.error);
      return reply;
    }
  }

  /**
   * Like {@link RouteSocket.ack}, but the kernel's work happens on a worker thread, so the JS
   * thread keeps serving meanwhile (creating or deleting a veth pair takes milliseconds). Use a
   * socket of its own: requests on one socket must not overlap.
   */
  async ackOffThread(what: string, build: Build): Promise<void> {
    await this.ackAllOffThread([{ what, build }]);
  }

  /**
   * Sends `steps` as one batch (the kernel handles the messages of one `send` in order, each
   * whatever became of the ones before) from a worker thread, then collects the answers; throws
   * {@link NetlinkRefusal} naming the first step that failed. The kernel does the work inside
   * `send`, so its answers are queued by the time it returns and are read on the JS thread
   * without another trip to a worker (one is taken only if an answer were somehow late). Use a
   * socket of its own: requests on one socket must not overlap.
   */
  async ackAllOffThread(steps: Step[]): Promise<void> {
    const seqs = steps.map(() => ++this.#seq);
    await this.#libc.sendOffThread(this.#fd, concatBytes(steps.map((s, i) => s.build(seqs[i]))));
    const pending = new Set(seqs);
    while (pending.size > 0) {
      const n = this.#libc.tryRecv(this.#fd, this.#buf) ??
        await this.#libc.recvOffThread(this.#fd, this.#buf);
      this.#take(steps, seqs, pending, n);
    }
  }

  /**
   * Sends `steps` as batches from the JS thread and collects the answers; throws
   * {@link NetlinkRefusal} naming the first step that failed (the batches after it are not
   * sent). A batch holds at most {@link MAX_BATCH_STEPS} steps: the kernel queues every ack
   * before `send` returns, and more than the socket's receive queue holds would be lost
   * (ENOBUFS).
   */
  ackAll(steps: Step[]): void {
    for (let from = 0; from < steps.length; from += MAX_BATCH_STEPS) {
      const part = steps.slice(from, from + MAX_BATCH_STEPS);
      const seqs = part.map(() => ++this.#seq);
      this.#libc.send(this.#fd, concatBytes(part.map((s, i) => s.build(seqs[i]))));
      const pending = new Set(seqs);
      while (pending.size > 0) {
        this.#take(part, seqs, pending, this.#libc.recv(this.#fd, this.#buf));
      }
    }
  }

  /**
   * Takes the answers in the first `n` bytes of the buffer off `pending`, throwing for a refused
   * step (answers come in the order of the requests, so the first refusal read is the first
   * refused; answers left unread are skipped by later requests, whose sequence numbers differ).
   */
  #take(steps: Step[], seqs: number[], pending: Set<number>, n: number): void {
    for (const reply of parseReplies(this.#buf.subarray(0, n))) {
      if (!pending.delete(reply.seq)) continue; // a late answer to an earlier request
      if (reply.type === NL.ERROR && reply.error) {
        throw new NetlinkRefusal(steps[seqs.indexOf(reply.seq)].what, -reply.error);
      }
    }
  }

  /** Sends a request that asks for an ack; throws {@link NetlinkRefusal} on a kernel error. */
  ack(what: string, build: Build): void {
    this.#exchange(what, build);
  }

  /**
   * The index of the link called `name` in this socket's namespace, without a netlink request
   * (see {@link NetlinkSys.ifIndex}); throws {@link SyscallError} naming `what`.
   */
  indexOf(what: string, name: string): number {
    try {
      return this.#libc.ifIndex(this.#fd, name);
    } catch (e) {
      if (e instanceof SyscallError) throw new SyscallError(what, e.errno);
      throw e;
    }
  }

  /** Sends a request and returns its answer (one message, e.g. a link's for RTM_GETLINK). */
  request(what: string, build: Build): Reply {
    return this.#exchange(what, build);
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
        if (reply.type === NL.ERROR && reply.error) throw new NetlinkRefusal(what, -reply.error);
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
