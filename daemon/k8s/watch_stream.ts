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

/**
 * Yields one event per JSON line of `body`; a partial last line at the end of the stream is
 * dropped (the server closed mid-event, which a re-watch recovers from). Aborting `signal` ends
 * the iteration at once with the signal's reason and cancels the body, whatever the transport
 * does with its own abort.
 */
export async function* watchEvents<T>(
  body: ReadableStream<Uint8Array>,
  signal?: AbortSignal,
): AsyncGenerator<WatchEvent<T>> {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
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
      const { done, value } = await reader.read();
      if (signal?.aborted) throw reason();
      if (done) break;
      buffer += value;
      let nl: number;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl).trim();
        buffer = buffer.slice(nl + 1);
        if (line) yield JSON.parse(line) as WatchEvent<T>;
      }
    }
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
