/**
 * One HTTP/1.1 exchange on one connection, as the daemon's socket speaks it: a request (head and
 * body) must arrive whole within a deadline and within size limits, the handler gets a standard
 * `Request` whose `signal` aborts when the client goes away (its connection closes, as a shim
 * that timed out does), and the response is written with `Connection: close`. Anything that does
 * not parse, is too large or too slow never reaches the handler: `reject` builds its answer.
 *
 * Deno.serve has no deadline for a request that arrives slowly, and no bound on connections;
 * this is the piece that adds both, kept small because the shim sends one request per connection.
 *
 * @module
 */
import { Deadline } from "./deadline.ts";
import { concatBytes, indexOfBytes } from "../lib/bytes.ts";

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

/** Builds the response to a request that never reached the handler. */
export type Reject = (status: number, message: string) => Response;

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
  target: string;
  headers: Headers;
}

function parseHead(bytes: Uint8Array): Head {
  const text = new TextDecoder("utf-8", { fatal: false }).decode(bytes.subarray(0, -4));
  const [first, ...rest] = text.split("\r\n");
  const m = REQUEST_LINE.exec(first);
  if (!m) throw new BadRequest(400, "malformed request line");
  const headers = new Headers();
  for (const line of rest) {
    const colon = line.indexOf(":");
    const name = line.slice(0, colon);
    if (colon <= 0 || !TOKEN.test(name)) throw new BadRequest(400, "malformed header line");
    try {
      headers.append(name, line.slice(colon + 1).trim());
    } catch {
      throw new BadRequest(400, `malformed value of header ${name}`);
    }
  }
  return { method: m[1], target: m[2], headers };
}

async function readBody(input: Input, head: Head, limit: number): Promise<Uint8Array> {
  const te = head.headers.get("transfer-encoding");
  const cl = head.headers.get("content-length");
  if (te !== null) {
    if (cl !== null) throw new BadRequest(400, "both Content-Length and Transfer-Encoding");
    if (te.toLowerCase() !== "chunked") {
      throw new BadRequest(501, `transfer encoding ${te} is not supported`);
    }
    return await readChunked(input, limit);
  }
  if (cl === null) return new Uint8Array(0);
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

/**
 * Watches the connection after the request was read: the client sends nothing more, so the end
 * of the stream (or an error) means it went away.
 */
function watchForHangUp(conn: Deno.Conn, gone: AbortController, done: { value: boolean }) {
  (async () => {
    const buf = new Uint8Array(1024);
    try {
      while (!done.value) {
        if ((await conn.read(buf)) === null) break;
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

/** Serialises a response with `Connection: close`. */
export async function responseBytes(res: Response): Promise<Uint8Array> {
  const body = new Uint8Array(await res.arrayBuffer());
  let head = `HTTP/1.1 ${res.status} ${res.statusText || "Status"}\r\n`;
  for (const [k, v] of res.headers) {
    if (k !== "content-length" && k !== "connection" && k !== "transfer-encoding") {
      head += `${k}: ${v}\r\n`;
    }
  }
  head += `content-length: ${body.length}\r\nconnection: close\r\n\r\n`;
  return concatBytes([new TextEncoder().encode(head), body]);
}

/** How long, and how much, a closing connection is drained of what the client still sends. */
const LINGER_MS = 1000;
const LINGER_MAX_BYTES = 16 * 1024 * 1024;

/**
 * Writes `res` and closes. What the client sent and the server did not read (a request refused
 * before its body was read) is drained first, for at most a second and 16 MiB: closing with unread data
 * would reset the connection and the client could lose the answer. Failures (a client that is
 * gone) are ignored.
 */
export async function answer(
  conn: Deno.Conn,
  res: Response,
  writeTimeoutMs: number,
): Promise<boolean> {
  let delivered = false;
  try {
    await writeWithin(conn, await responseBytes(res), writeTimeoutMs);
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

const undeliveredHooks = new WeakMap<Request, (() => Promise<void>)[]>();

/**
 * Registers `fn` to run if the answer to `req` cannot be delivered: its client hung up before the
 * answer was written, or the write failed. A handler uses it to undo work nobody will learn of.
 *
 * @example
 * ```ts
 * whenUndelivered(req, () => rollBack(key));
 * ```
 */
export function whenUndelivered(req: Request, fn: () => Promise<void>): void {
  const hooks = undeliveredHooks.get(req) ?? [];
  hooks.push(fn);
  undeliveredHooks.set(req, hooks);
}

async function runUndelivered(req: Request): Promise<void> {
  for (const fn of undeliveredHooks.get(req) ?? []) await fn().catch(() => {});
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
  handler: (req: Request) => Promise<Response>,
  limits: ExchangeLimits,
  reject: Reject,
): Promise<void> {
  const done = { value: false };
  let response: Response;
  let request: Request | undefined;
  let gone: AbortController | undefined;
  try {
    using readDeadline = new Deadline(limits.readTimeoutMs);
    const input = new Input(conn, readDeadline.signal);
    const head = parseHead(await input.head(limits.maxHeaderBytes));
    const body = await readBody(input, head, limits.maxBodyBytes);
    gone = new AbortController();
    watchForHangUp(conn, gone, done);
    try {
      request = new Request(`http://ferry${head.target}`, {
        method: head.method,
        headers: head.headers,
        body: head.method === "GET" || head.method === "HEAD" ? undefined : body.slice(),
        signal: gone.signal,
      });
    } catch (e) {
      throw new BadRequest(400, e instanceof Error ? e.message : String(e));
    }
    response = await handler(request);
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
    response = reject(e.status, e.message);
  }
  const hungUp = gone?.signal.aborted ?? false;
  done.value = true;
  const delivered = !hungUp && await answer(conn, response, limits.writeTimeoutMs);
  if (hungUp) {
    try {
      conn.close();
    } catch { /* already closed */ }
  }
  if (!delivered && request) await runUndelivered(request);
}
