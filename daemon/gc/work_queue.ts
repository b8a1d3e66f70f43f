/**
 * A rate-limited work queue of keys, in the shape of client-go's workqueue as the
 * sample-controller uses it: a key queued several times before it is worked on is worked on
 * once; a key is never worked on by two workers at once (queued again meanwhile, it runs again
 * after); a failed key is retried after an exponential backoff, at most `maxRetries` times, then
 * dropped with its last error reported. One worker here: the work is node-local and small.
 *
 * @module
 */

/** What happened to a key in the end. */
export type Outcome =
  | { key: string; ok: true }
  | { key: string; ok: false; error: unknown; attempts: number };

/** Options of the queue. */
export interface WorkQueueOptions {
  /** Retries after the first failure before a key is dropped (default 2). */
  maxRetries?: number;
  /** The first retry's delay, doubled each time (ms, default 500). */
  baseDelayMs?: number;
  /** The longest retry delay (ms, default 30 s). */
  maxDelayMs?: number;
}

/**
 * The queue; `sync` is the idempotent work for one key.
 *
 * @example
 * ```ts
 * const queue = new WorkQueue((key) => releasePod(key), (o) => report(o), { maxRetries: 2 });
 * queue.add("uid-1");
 * ```
 */
export class WorkQueue {
  readonly #sync: (key: string) => Promise<void>;
  readonly #done: (outcome: Outcome) => void;
  readonly #o: Required<WorkQueueOptions>;
  readonly #queue: string[] = [];
  readonly #queued = new Set<string>();
  readonly #failures = new Map<string, number>();
  readonly #timers = new Map<string, ReturnType<typeof setTimeout>>();
  #active?: string;
  #running?: Promise<void>;
  #closed = false;

  /** Creates the queue. */
  constructor(
    sync: (key: string) => Promise<void>,
    done: (outcome: Outcome) => void,
    options: WorkQueueOptions = {},
  ) {
    this.#sync = sync;
    this.#done = done;
    this.#o = { maxRetries: 2, baseDelayMs: 500, maxDelayMs: 30_000, ...options };
  }

  /** Queues `key` (once, however often it is added before it runs). */
  add(key: string): void {
    if (this.#closed || this.#queued.has(key)) return;
    this.#queued.add(key);
    this.#queue.push(key);
    this.#start();
  }

  #start(): void {
    // A key added between the drain's last check and this `finally` starts another drain.
    this.#running ??= this.#drain().finally(() => {
      this.#running = undefined;
      if (this.#queue.length && !this.#closed) this.#start();
    });
  }

  /** Queues `key` after `ms` (a retry, or work that must wait for a grace period). */
  addAfter(key: string, ms: number): void {
    if (this.#closed || this.#timers.has(key)) return;
    const timer = setTimeout(() => {
      this.#timers.delete(key);
      this.add(key);
    }, ms);
    Deno.unrefTimer(timer as unknown as number);
    this.#timers.set(key, timer);
  }

  async #drain(): Promise<void> {
    // Let keys added in this tick join before the first runs.
    await Promise.resolve();
    while (this.#queue.length && !this.#closed) {
      const key = this.#queue.shift()!;
      this.#queued.delete(key);
      this.#active = key;
      try {
        await this.#sync(key);
        this.#failures.delete(key);
        this.#done({ key, ok: true });
      } catch (error) {
        const attempts = (this.#failures.get(key) ?? 0) + 1;
        if (attempts > this.#o.maxRetries) {
          this.#failures.delete(key);
          this.#done({ key, ok: false, error, attempts });
        } else {
          this.#failures.set(key, attempts);
          const delay = Math.min(this.#o.maxDelayMs, this.#o.baseDelayMs * 2 ** (attempts - 1));
          this.addAfter(key, delay);
        }
      } finally {
        this.#active = undefined;
      }
    }
  }

  /** Keys waiting, in work, or waiting for a retry. */
  get length(): number {
    return this.#queue.length + (this.#active ? 1 : 0) + this.#timers.size;
  }

  /** Settles once nothing is queued or in work (keys waiting for a timer do not count). */
  async idle(): Promise<void> {
    while (this.#running) await this.#running;
  }

  /** Stops: queued keys and timers are dropped; the key in work finishes. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const t of this.#timers.values()) clearTimeout(t);
    this.#timers.clear();
    this.#queue.length = 0;
    this.#queued.clear();
    await this.#running;
  }
}
