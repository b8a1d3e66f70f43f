/**
 * Numbered passes of a coalescing loop, so that a caller can wait for "a pass that started after
 * now" instead of for the loop to go idle (which never happens while other changes keep starting
 * passes: an ADD behind another tenant's churn would wait without end).
 *
 * @module
 */

/**
 * Counts passes started and done; waiters settle once the pass they wait for (or a later one) is
 * done.
 *
 * @example
 * ```ts
 * const passes = new PassCounter();
 * const n = passes.next; // the first pass that starts from now on
 * loop.kick();
 * await passes.done(n, signal);
 * // in the pass: const n = passes.start(); try { … } finally { passes.finish(n); }
 * ```
 */
export class PassCounter {
  #started = 0;
  #done = 0;
  readonly #waiters = new Set<{ pass: number; settle: () => void }>();

  /** The number the next pass to start gets. */
  get next(): number {
    return this.#started + 1;
  }

  /** A pass starts: its number. */
  start(): number {
    return ++this.#started;
  }

  /** Pass `n` is done (whether it wrote or failed): its waiters and earlier ones settle. */
  finish(n: number): void {
    if (n > this.#done) this.#done = n;
    for (const w of this.#waiters) if (w.pass <= this.#done) w.settle();
  }

  /** Settles once pass `pass` (or a later one) is done; rejects with the reason when `signal` aborts. */
  done(pass: number, signal: AbortSignal): Promise<void> {
    if (this.#done >= pass) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        this.#waiters.delete(waiter);
        reject(signal.reason);
      };
      const waiter = {
        pass,
        settle: () => {
          this.#waiters.delete(waiter);
          signal.removeEventListener("abort", onAbort);
          resolve();
        },
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener("abort", onAbort, { once: true });
      this.#waiters.add(waiter);
    });
  }
}
