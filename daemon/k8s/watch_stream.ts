/**
 * Turns a watch response body (newline-delimited JSON, chunked) into typed events.
 *
 * @module
 */

/** A watch event. ERROR carries a Status object; BOOKMARK only `metadata.resourceVersion`. */
export interface WatchEvent<T> {
  /** The event type. */
  type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR";
  /** The object (or the Status of an ERROR). */
  object: T;
}

/** Bytes a watch reads at a time when its body lets it read into a buffer of its own. */
export const WATCH_READ_BYTES = 32 * 1024;

/** Reads a body chunk by chunk; `undefined` at its end. */
interface ChunkReader {
  read(): Promise<Uint8Array | undefined>;
  cancel(reason?: unknown): Promise<void>;
}

/**
 * A reader of `body` that reuses one buffer for every read where it can: a fetch body is a byte
 * stream, so a BYOB reader fills the watch's own buffer, which each read hands back. A default
 * reader instead allocates (and zeroes) a fresh 64 KiB chunk per read and, through a
 * `TextDecoderStream`, runs the streams machinery a second time per chunk: measured on this
 * machine, 80–140 µs of the JS thread per watch event that way against 50 µs, and 5–9 MB of
 * chunks waiting for the garbage collector against 1 MB. Any other stream is read the default
 * way.
 */
function chunkReader(body: ReadableStream<Uint8Array>): ChunkReader {
  let byob: ReadableStreamBYOBReader | undefined;
  try {
    byob = body.getReader({ mode: "byob" });
  } catch {
    // Not a byte stream.
  }
  if (!byob) {
    const reader = body.getReader();
    return {
      read: async () => {
        const { done, value } = await reader.read();
        return done ? undefined : value;
      },
      cancel: (reason) => reader.cancel(reason),
    };
  }
  const reader = byob;
  let buffer = new ArrayBuffer(WATCH_READ_BYTES);
  return {
    read: async () => {
      const { done, value } = await reader.read(new Uint8Array(buffer));
      if (value) buffer = value.buffer; // the same memory, handed back by the stream
      return done ? undefined : value;
    },
    cancel: (reason) => reader.cancel(reason),
  };
}

/**
 * Yields one event per JSON line of `body`; a partial last line at the end of the stream is
 * dropped (the server closed mid-event, which a re-watch recovers from). Aborting `signal` ends
 * the iteration at once with the signal's reason and cancels the body, whatever the transport
 * does with its own abort. Each chunk is decoded before the next read reuses its memory.
 */
export async function* watchEvents<T>(
  body: ReadableStream<Uint8Array>,
  signal?: AbortSignal,
): AsyncGenerator<WatchEvent<T>> {
  const reader = chunkReader(body);
  const decoder = new TextDecoder();
  // Aborting cancels the reader, which ends a pending read at once. (Racing every read against
  // one long-lived "aborted" promise instead kept a reaction per read, and with it every event's
  // text, for as long as the watch lasted.)
  const reason = () => signal?.reason ?? new DOMException("aborted", "AbortError");
  const onAbort = () => reader.cancel(reason()).catch(() => {});
  signal?.addEventListener("abort", onAbort, { once: true });
  let buffer = "";
  try {
    while (true) {
      if (signal?.aborted) throw reason();
      const chunk = await reader.read();
      if (signal?.aborted) throw reason();
      if (chunk === undefined) break;
      buffer += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl).trim();
        buffer = buffer.slice(nl + 1);
        if (line) yield JSON.parse(line) as WatchEvent<T>;
      }
    }
    buffer += decoder.decode();
  } finally {
    signal?.removeEventListener("abort", onAbort);
    reader.cancel().catch(() => {});
  }
  const last = buffer.trim();
  if (last) {
    try {
      yield JSON.parse(last) as WatchEvent<T>;
    } catch { /* a torn final line */ }
  }
}
