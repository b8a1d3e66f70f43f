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
 * dropped (the server closed mid-event, which a re-watch recovers from).
 */
export async function* watchEvents<T>(
  body: ReadableStream<Uint8Array>,
): AsyncGenerator<WatchEvent<T>> {
  let buffer = "";
  for await (const text of body.pipeThrough(new TextDecoderStream())) {
    buffer += text;
    let nl: number;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (line) yield JSON.parse(line) as WatchEvent<T>;
    }
  }
  const last = buffer.trim();
  if (last) {
    try {
      yield JSON.parse(last) as WatchEvent<T>;
    } catch { /* a torn final line */ }
  }
}
