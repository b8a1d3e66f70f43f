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

  /** Runs `fn` once every earlier `run` with the same key has settled. */
  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.#tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const tail = previous.then(() => mine);
    this.#tails.set(key, tail);
    await previous;
    try {
      return await fn();
    } finally {
      release();
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    }
  }
}
