/**
 * Serialises work per key: two requests for the same container run one after the other, requests
 * for different containers run concurrently.
 *
 * @module
 */

/**
 * A mutex per key; keys with no waiter hold no memory.
 *
 * @example
 * ```ts
 * const locks = new KeyedMutex();
 * await locks.run("container-1", async () => { … });
 * ```
 */
export class KeyedMutex {
  readonly #tails = new Map<string, Promise<void>>();

  /**
   * Runs `fn` once every earlier `run` with the same key has settled. When `signal` aborts while
   * it waits, `fn` never runs and the promise rejects with the signal's reason (later runs of
   * the key still wait for the earlier ones, not for this one).
   */
  async run<T>(key: string, fn: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    const previous = this.#tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const tail = previous.then(() => mine);
    this.#tails.set(key, tail);
    try {
      await (signal ? abortable(previous, signal) : previous);
    } catch (e) {
      // Give the turn on only once the earlier holders are done.
      previous.then(release, release);
      previous.then(() => this.#tails.get(key) === tail && this.#tails.delete(key));
      throw e;
    }
    try {
      signal?.throwIfAborted();
      return await fn();
    } finally {
      release();
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    }
  }
}

function abortable(p: Promise<void>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    });
  });
}
