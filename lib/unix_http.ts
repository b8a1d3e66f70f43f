/**
 * A minimal HTTP/1.1 client over a unix socket, built on `Deno.connect` alone. The shim uses it
 * because `fetch` through a unix-socket client also asks for net permission to the URL's host,
 * which would widen the shim's sandbox; the daemon uses it to probe a socket before replacing it.
 *
 * @module
 */
import { concatBytes, indexOfBytes } from "./bytes.ts";

/** A complete HTTP response. */
export interface UnixHttpResponse {
  /** The status code. */
  status: number;
  /** Header names in lower case. */
  headers: Map<string, string>;
  /** The body as text. */
  body: string;
}

/** The request could not be delivered: nothing listens, or the socket does not exist. */
export class SocketUnavailableError extends Error {
  /** Creates the error for `socketPath`. */
  constructor(socketPath: string, options?: ErrorOptions) {
    super(`nothing is listening on unix socket ${socketPath}`, options);
    this.name = "SocketUnavailableError";
  }
}

/** Responses larger than this are refused (the daemon's replies are a few KiB). */
const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;

/**
 * Sends one request and reads the whole response; the connection is closed afterwards.
 * Aborting `signal` closes the connection and rejects with the signal's reason.
 *
 * @example
 * ```ts
 * const res = await unixRequest("/run/ferry/ferry.sock", "GET", "/healthz", undefined, AbortSignal.timeout(1000));
 * ```
 */
export async function unixRequest(
  socketPath: string,
  method: string,
  path: string,
  body: string | undefined,
  signal: AbortSignal,
): Promise<UnixHttpResponse> {
  signal.throwIfAborted();
  let conn: Deno.UnixConn;
  try {
    conn = await Deno.connect({ transport: "unix", path: socketPath });
  } catch (e) {
    if (e instanceof Deno.errors.NotFound || e instanceof Deno.errors.ConnectionRefused) {
      throw new SocketUnavailableError(socketPath, { cause: e });
    }
    throw e;
  }
  const onAbort = () => {
    try {
      conn.close();
    } catch { /* already closed */ }
  };
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    const payload = body === undefined ? new Uint8Array() : new TextEncoder().encode(body);
    const head = `${method} ${path} HTTP/1.1\r\nHost: ferry\r\nConnection: close\r\n` +
      (body === undefined ? "" : "Content-Type: application/json\r\n") +
      `Content-Length: ${payload.length}\r\n\r\n`;
    try {
      await writeAll(conn, concatBytes([new TextEncoder().encode(head), payload]));
    } catch (e) {
      // The server may answer before taking the whole request (a body over its limit) and close:
      // its answer is still there to read.
      if (!(e instanceof Deno.errors.BrokenPipe || e instanceof Deno.errors.ConnectionReset)) {
        throw e;
      }
    }
    const raw = await readAll(conn);
    signal.throwIfAborted();
    return parseResponse(raw);
  } catch (e) {
    if (signal.aborted) throw signal.reason;
    throw e;
  } finally {
    signal.removeEventListener("abort", onAbort);
    onAbort();
  }
}

async function writeAll(conn: Deno.Conn, data: Uint8Array): Promise<void> {
  let off = 0;
  while (off < data.length) off += await conn.write(data.subarray(off));
}

async function readAll(conn: Deno.Conn): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let total = 0;
  const buf = new Uint8Array(64 * 1024);
  while (true) {
    const n = await conn.read(buf);
    if (n === null) break;
    total += n;
    if (total > MAX_RESPONSE_BYTES) throw new Error("response too large");
    chunks.push(buf.slice(0, n));
  }
  return concatBytes(chunks);
}

/**
 * Parses a complete HTTP/1.1 response (status line, headers, then a body delimited by
 * Content-Length, chunked encoding, or the end of the connection).
 *
 * @throws Error for a malformed response.
 */
export function parseResponse(raw: Uint8Array): UnixHttpResponse {
  const sep = indexOfBytes(raw, [13, 10, 13, 10]);
  if (sep < 0) throw new Error("malformed HTTP response: no end of headers");
  const lines = new TextDecoder().decode(raw.subarray(0, sep)).split("\r\n");
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0]);
  if (!m) throw new Error(`malformed HTTP status line: ${JSON.stringify(lines[0])}`);
  const headers = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    if (colon > 0) {
      headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
    }
  }
  let bodyBytes = raw.subarray(sep + 4);
  if (headers.get("transfer-encoding")?.toLowerCase() === "chunked") {
    bodyBytes = dechunk(bodyBytes);
  } else if (headers.has("content-length")) {
    const len = Number(headers.get("content-length"));
    if (!Number.isInteger(len) || len > bodyBytes.length) {
      throw new Error("truncated HTTP response body");
    }
    bodyBytes = bodyBytes.subarray(0, len);
  }
  return { status: Number(m[1]), headers, body: new TextDecoder().decode(bodyBytes) };
}

function dechunk(data: Uint8Array): Uint8Array {
  const parts: Uint8Array[] = [];
  let off = 0;
  while (true) {
    const eol = indexOfBytes(data, [13, 10], off);
    if (eol < 0) throw new Error("malformed chunked body");
    const size = parseInt(new TextDecoder().decode(data.subarray(off, eol)).split(";")[0], 16);
    if (Number.isNaN(size)) throw new Error("malformed chunk size");
    if (size === 0) return concatBytes(parts);
    const start = eol + 2;
    if (start + size > data.length) throw new Error("truncated chunked body");
    parts.push(data.subarray(start, start + size));
    off = start + size + 2;
  }
}
