/**
 * A deadline whose timer goes away when the work is done. `AbortSignal.timeout(ms)` keeps its
 * timer, the signal and everything listening to it alive for the full `ms` even when the work
 * finished long before: with a 60 s pod wait, a few per request and hundreds of requests a
 * minute, that held tens of megabytes (`deno task bench`, the memory churn). Use it with `using`,
 * so the timer is cleared however the scope is left.
 *
 * @module
 */

/**
 * Aborts its signal with a `TimeoutError` (as `AbortSignal.timeout` does) after `ms`, unless
 * disposed first.
 *
 * @example
 * ```ts
 * using deadline = new Deadline(60_000);
 * await registry.waitFor(ref, deadline.signal);
 * ```
 */
export class Deadline implements Disposable {
  readonly #controller = new AbortController();
  readonly #timer: ReturnType<typeof setTimeout>;

  /** Starts the timer. */
  constructor(ms: number) {
    this.#timer = setTimeout(
      () => this.#controller.abort(new DOMException("Signal timed out.", "TimeoutError")),
      ms,
    );
  }

  /** The signal that aborts at the deadline. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Clears the timer; the signal never aborts after this. */
  [Symbol.dispose](): void {
    clearTimeout(this.#timer);
  }
}
