/**
 * A pause that ends early when its signal aborts: back-off between retries that a shutdown must
 * not wait out.
 *
 * @module
 */

/**
 * Resolves after `ms`, or as soon as `signal` aborts (never rejects; the timer and the listener
 * go either way). With `unref`, the pending timer does not keep the process alive.
 *
 * @example
 * ```ts
 * const closing = new AbortController();
 * await sleep(30_000, closing.signal); // ends at once when closing.abort() is called
 * ```
 */
export function sleep(
  ms: number,
  signal: AbortSignal,
  options: { unref?: boolean } = {},
): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    if (options.unref) Deno.unrefTimer(timer);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
