/**
 * One HTTP/1.1 exchange on one connection, as the daemon's socket speaks it: a request (head and
 * body) must arrive whole within a deadline and within size limits, the handler gets it as a
 * {@link SocketRequest} whose `signal` aborts when the client goes away (its connection closes,
 * as a shim that timed out does), and its {@link SocketReply} is written with `Connection:
 * close`. Anything that does not parse, is too large or too slow never reaches the handler:
 * `reject` builds its answer.
 *
 * Deno.serve has no deadline for a request that arrives slowly, and no bound on connections;
 * this is the piece that adds both, kept small because the shim sends one request per connection.
 * The request and the reply are plain values, not the web's `Request` and `Response`: the body
 * is read whole here anyway, and building those (headers, body streams, URL parsing) for every
 * CNI call cost the JS thread about 0.2 ms per request, a fifth of a health check's CPU time
 * (measured one request at a time, two daemons alternating).
 *
 * @module
 */
import { STATUS_TEXT } from "deno-std/http/status.js";
import { Deadline } from "../runtime/deadline.ts";
import { concatBytes, indexOfBytes } from "../../lib/bytes.ts";

/** A request read whole from the socket, as a handler gets it. */
export interface SocketRequest {
  /**
   * The method: the standard ones upper-cased whatever their case (as fetch reads them), others
   * as sent.
   */
  readonly method: string;
  /** The request target's path, without its query. */
  readonly path: string;
  /** Header values by lower-case name; a repeated header's values joined with `, `. */
  readonly headers: ReadonlyMap<string, string>;
  /** The body, whole (empty when there is none). */
  readonly body: Uint8Array;
  /** Aborts when the client goes away before its answer is written. */
  readonly signal: AbortSignal;
  /**
   * Registers `fn` to run if the answer cannot be delivered: the client hung up before it was
   * written, or the write failed. A handler uses it to undo work nobody will learn of.
   */
  whenUndelivered(fn: () => Promise<void>): void;
}

/** An answer to write. */
export interface SocketReply {
  /** The HTTP status. */
  status: number;
  /** The body's media type; plain UTF-8 text when not given. */
  contentType?: string;
  /** The body. */
  body: string;
}

/** Serves one request. */
export type SocketHandler = (req: SocketRequest) => Promise<SocketReply>;

/** Limits on one exchange. */
export interface ExchangeLimits {
  /** The whole request (head and body) must arrive within this many milliseconds. */
  readTimeoutMs: number;
  /** The response must be written within this many milliseconds. */
  writeTimeoutMs: number;
  /** The largest request head (request line and headers), in bytes. */
  maxHeaderBytes: number;
  /** The largest request body, in bytes. */
  maxBodyBytes: number;
}

/** Builds the answer to a request that never reached the handler. */
export type Reject = (status: number, message: string) => SocketReply;

/** A request that cannot be served, with the HTTP status that says why. */
export class BadRequest extends Error {
  /** The HTTP status to answer with (or 0 when the client is gone and nothing can be sent). */
  readonly status: number;
  /** Creates the error. */
  constructor(status: number, message: string) {
    super(message);
    this.name = "BadRequest";
    this.status = status;
  }
}

const CRLF2 = [13, 10, 13, 10];
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** A header value (RFC 9110 field-value: visible characters, spaces, tabs, obs-text). */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
/** Spaces and tabs around a header value (only these: a Latin-1 no-break space is obs-text). */
const OUTER_WHITESPACE = /^[\t ]+|[\t ]+$/g;
const REQUEST_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) (\/\S*) HTTP\/1\.[01]$/;

/** A connection read with a deadline, and a buffer of what arrived beyond the part consumed. */
class Input {
  #pending: Uint8Array = new Uint8Array(0);
  readonly #conn: Deno.Conn;
  readonly #deadline: Promise<never>;

  constructor(conn: Deno.Conn, deadline: AbortSignal) {
    this.#conn = conn;
    this.#deadline = new Promise((_, reject) => {
      const fire = () => reject(new BadRequest(408, "the request did not arrive in time"));
      if (deadline.aborted) fire();
      else deadline.addEventListener("abort", fire, { once: true });
    });
    this.#deadline.catch(() => {});
  }

  /** Reads more bytes; false at end of stream. */
  async #fill(): Promise<boolean> {
    const buf = new Uint8Array(16 * 1024);
    const n = await Promise.race([this.#conn.read(buf), this.#deadline]);
    if (n === null) return false;
    this.#pending = concatBytes([this.#pending, buf.subarray(0, n)]);
    return true;
  }

  /** Everything up to and including the first blank line, at most `limit` bytes. */
  async head(limit: number): Promise<Uint8Array> {
    while (true) {
      const at = indexOfBytes(this.#pending, CRLF2);
      if (at >= 0 && at + 4 <= limit) return this.take(at + 4);
      if (at >= 0 || this.#pending.length > limit) {
        throw new BadRequest(431, `request head exceeds ${limit} bytes`);
      }
      if (!(await this.#fill())) {
        throw new BadRequest(this.#pending.length ? 400 : 0, "connection closed mid-request");
      }
    }
  }

  /** Exactly `n` bytes. */
  async exactly(n: number): Promise<Uint8Array> {
    while (this.#pending.length < n) {
      if (!(await this.#fill())) throw new BadRequest(400, "connection closed mid-body");
    }
    return this.take(n);
  }

  /** One CRLF-terminated line (for chunk sizes), at most `limit` bytes. */
  async line(limit: number): Promise<string> {
    while (true) {
      const at = indexOfBytes(this.#pending, [13, 10]);
      if (at >= 0) return new TextDecoder().decode(this.take(at + 2).subarray(0, at));
      if (this.#pending.length > limit) throw new BadRequest(400, "malformed chunked body");
      if (!(await this.#fill())) throw new BadRequest(400, "connection closed mid-body");
    }
  }

  take(n: number): Uint8Array {
    const out = this.#pending.subarray(0, n);
    this.#pending = this.#pending.subarray(n);
    return out;
  }
}

/** A parsed request head. */
interface Head {
  method: string;
  path: string;
  headers: Map<string, string>;
}

const LATIN1 = new TextDecoder("latin1");
/** Methods written in any case that name the standard ones (as the Fetch standard reads them). */
const NORMALIZED = new Set(["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"]);
/** Methods the Fetch standard forbids: a tunnel or a trace has no place on this socket. */
const FORBIDDEN = new Set(["CONNECT", "TRACE", "TRACK"]);

function method(token: string): string {
  const upper = token.toUpperCase();
  if (FORBIDDEN.has(upper)) throw new BadRequest(400, `the method ${token} is not allowed`);
  return NORMALIZED.has(upper) ? upper : token;
}

function parseHead(bytes: Uint8Array): Head {
  // Latin-1: every byte is one character, so a header's bytes are checked as they came.
  const text = LATIN1.decode(bytes.subarray(0, -4));
  const [first, ...rest] = text.split("\r\n");
  const m = REQUEST_LINE.exec(first);
  if (!m) throw new BadRequest(400, "malformed request line");
  const headers = new Map<string, string>();
  for (const line of rest) {
    const colon = line.indexOf(":");
    const name = line.slice(0, colon);
    if (colon <= 0 || !TOKEN.test(name)) throw new BadRequest(400, "malformed header line");
    const value = line.slice(colon + 1).replace(OUTER_WHITESPACE, "");
    if (!FIELD_VALUE.test(value)) throw new BadRequest(400, `malformed value of header ${name}`);
    const key = name.toLowerCase();
    const before = headers.get(key);
    headers.set(key, before === undefined ? value : `${before}, ${value}`);
  }
  const query = m[2].search(/[?#]/);
  return { method: method(m[1]), path: query < 0 ? m[2] : m[2].slice(0, query), headers };
}

async function readBody(input: Input, head: Head, limit: number): Promise<Uint8Array> {
  const te = head.headers.get("transfer-encoding");
  const cl = head.headers.get("content-length");
  if (te !== undefined) {
    if (cl !== undefined) throw new BadRequest(400, "both Content-Length and Transfer-Encoding");
    if (te.toLowerCase() !== "chunked") {
      throw new BadRequest(501, `transfer encoding ${te} is not supported`);
    }
    return await readChunked(input, limit);
  }
  if (cl === undefined) return new Uint8Array(0);
  if (!/^\d{1,15}$/.test(cl)) throw new BadRequest(400, "malformed Content-Length");
  const length = Number(cl);
  if (length > limit) throw new BadRequest(413, `request body exceeds ${limit} bytes`);
  return await input.exactly(length);
}

async function readChunked(input: Input, limit: number): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let total = 0;
  while (true) {
    const sizeText = (await input.line(1024)).split(";")[0].trim();
    if (!/^[0-9a-fA-F]{1,8}$/.test(sizeText)) throw new BadRequest(400, "malformed chunk size");
    const size = parseInt(sizeText, 16);
    if (size === 0) {
      while ((await input.line(8192)) !== "") { /* trailers are ignored */ }
      return concatBytes(parts);
    }
    total += size;
    if (total > limit) throw new BadRequest(413, `request body exceeds ${limit} bytes`);
    parts.push(await input.exactly(size));
    if ((await input.line(2)) !== "") throw new BadRequest(400, "malformed chunk end");
  }
}

/** How often a half-closed connection is asked whether its client is still there. */
const HALF_CLOSED_POLL_MS = 200;

/**
 * Whether the client can still take an answer after it closed its sending side: a write of no
 * bytes fails (broken pipe) on a unix socket whose peer closed entirely, and succeeds on one
 * whose peer only half-closed (HTTP allows a client to shut down its writing side once its
 * request is sent, and still expect the answer).
 */
async function stillListening(conn: Deno.Conn): Promise<boolean> {
  try {
    await conn.write(new Uint8Array(0));
    return true;
  } catch {
    return false;
  }
}

/**
 * Watches the connection after the request was read: the client sends nothing more, so the end
 * of the stream (or an error) means it went away, unless it only half-closed (see
 * {@link stillListening}); such a connection is asked again every {@link HALF_CLOSED_POLL_MS}
 * until the answer is written.
 */
function watchForHangUp(conn: Deno.Conn, gone: AbortController, done: { value: boolean }) {
  (async () => {
    const buf = new Uint8Array(1024);
    try {
      while (!done.value) {
        if ((await conn.read(buf)) === null) break;
      }
      while (!done.value && await stillListening(conn)) {
        await new Promise((r) => setTimeout(r, HALF_CLOSED_POLL_MS));
      }
    } catch { /* closed */ }
    if (!done.value) gone.abort(new DOMException("the requester went away", "AbortError"));
  })();
}

async function writeWithin(conn: Deno.Conn, data: Uint8Array, ms: number): Promise<void> {
  using deadline = new Deadline(ms);
  const timedOut = new Promise<never>((_, reject) =>
    deadline.signal.addEventListener("abort", () => reject(deadline.signal.reason), {
      once: true,
    })
  );
  timedOut.catch(() => {}); // a write that ends in time leaves it pending, then collected
  let off = 0;
  while (off < data.length) off += await Promise.race([conn.write(data.subarray(off)), timedOut]);
}

const ENCODER = new TextEncoder();

/** Serialises a reply with `Connection: close`. */
export function replyBytes(reply: SocketReply): Uint8Array {
  const body = ENCODER.encode(reply.body);
  const reason = (STATUS_TEXT as Record<number, string>)[reply.status] ?? "Status";
  const head = `HTTP/1.1 ${reply.status} ${reason}\r\n` +
    `content-type: ${reply.contentType ?? "text/plain; charset=utf-8"}\r\n` +
    `content-length: ${body.length}\r\nconnection: close\r\n\r\n`;
  return concatBytes([ENCODER.encode(head), body]);
}

/** How long, and how much, a closing connection is drained of what the client still sends. */
const LINGER_MS = 1000;
const LINGER_MAX_BYTES = 16 * 1024 * 1024;

/**
 * Writes `reply` and closes. What the client sent and the server did not read (a request refused
 * before its body was read) is drained first, for at most a second and 16 MiB: closing with unread data
 * would reset the connection and the client could lose the answer. Failures (a client that is
 * gone) are ignored.
 */
export async function answer(
  conn: Deno.Conn,
  reply: SocketReply,
  writeTimeoutMs: number,
): Promise<boolean> {
  let delivered = false;
  try {
    await writeWithin(conn, replyBytes(reply), writeTimeoutMs);
    delivered = true;
    await conn.closeWrite();
    using linger = new Deadline(LINGER_MS);
    const stop = new Promise<null>((r) => linger.signal.addEventListener("abort", () => r(null)));
    const buf = new Uint8Array(16 * 1024);
    let drained = 0;
    while (drained < LINGER_MAX_BYTES) {
      const n = await Promise.race([conn.read(buf), stop]);
      if (n === null) break;
      drained += n;
    }
  } catch { /* the client is gone or does not read */ }
  try {
    conn.close();
  } catch { /* already closed */ }
  return delivered;
}

/**
 * Serves one request on `conn` and closes it.
 *
 * @example
 * ```ts
 * for await (const conn of listener) serveExchange(conn, handler, limits, reject);
 * ```
 */
export async function serveExchange(
  conn: Deno.Conn,
  handler: SocketHandler,
  limits: ExchangeLimits,
  reject: Reject,
): Promise<void> {
  const done = { value: false };
  const undelivered: (() => Promise<void>)[] = [];
  let reply: SocketReply;
  let gone: AbortController | undefined;
  try {
    using readDeadline = new Deadline(limits.readTimeoutMs);
    const input = new Input(conn, readDeadline.signal);
    const head = parseHead(await input.head(limits.maxHeaderBytes));
    const body = await readBody(input, head, limits.maxBodyBytes);
    gone = new AbortController();
    watchForHangUp(conn, gone, done);
    reply = await handler({
      method: head.method,
      path: head.path,
      headers: head.headers,
      body,
      signal: gone.signal,
      whenUndelivered: (fn) => void undelivered.push(fn),
    });
  } catch (err) {
    // A connection reset while reading means the client is gone; anything else unexpected is
    // still answered, so that no connection is left open.
    const e = err instanceof BadRequest
      ? err
      : err instanceof Deno.errors.ConnectionReset || err instanceof Deno.errors.BrokenPipe
      ? new BadRequest(0, "the client went away")
      : new BadRequest(500, err instanceof Error ? err.message : String(err));
    if (e.status === 0) {
      done.value = true;
      try {
        conn.close();
      } catch { /* already closed */ }
      return;
    }
    reply = reject(e.status, e.message);
  }
  const hungUp = gone?.signal.aborted ?? false;
  done.value = true;
  const delivered = !hungUp && await answer(conn, reply, limits.writeTimeoutMs);
  if (hungUp) {
    try {
      conn.close();
    } catch { /* already closed */ }
  }
  if (!delivered) { for (const fn of undelivered) await fn().catch(() => {}); }
}
