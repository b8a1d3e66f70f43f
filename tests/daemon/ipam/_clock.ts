/**
 * A clock for the IPAM's quarantine that a test moves by hand: its sleeps end only when the test
 * advances it past their end, so a wait for the reuse quarantine is fast and deterministic.
 *
 * @module
 */
import type { IpamClock } from "../../../daemon/ipam/quarantine.ts";

interface Sleeper {
  at: number;
  wake: () => void;
}

/**
 * The clock.
 *
 * @example
 * ```ts
 * const clock = new ManualClock();
 * const woken = clock.sleep(1000);
 * clock.advance(1000); // woken resolves
 * ```
 */
export class ManualClock implements IpamClock {
  #now = 1_000_000;
  readonly #sleepers = new Set<Sleeper>();
  readonly #watchers = new Set<() => void>();

  /** Now (ms). */
  now(): number {
    return this.#now;
  }

  /** Resolves once the clock is advanced to `ms` from now, or when `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const s: Sleeper = {
        at: this.#now + ms,
        wake: () => {
          this.#sleepers.delete(s);
          for (const w of [...this.#watchers]) w();
          resolve();
        },
      };
      if (signal?.aborted) return resolve();
      signal?.addEventListener("abort", s.wake, { once: true });
      this.#sleepers.add(s);
      for (const w of [...this.#watchers]) w();
    });
  }

  /** Moves the clock to `at` (ms), waking every sleep that ends by then. */
  advanceTo(at: number): void {
    this.#now = at;
    for (const s of [...this.#sleepers]) if (s.at <= at) s.wake();
  }

  /** The ends of the sleeps under way, earliest first. */
  get sleeping(): number[] {
    return [...this.#sleepers].map((s) => s.at).sort((a, b) => a - b);
  }

  /**
   * Resolves once `n` sleeps are under way; rejects, saying what it got instead, when `work`
   * settles first (an allocation that answered instead of waiting).
   */
  untilSleeping(n: number, work: Promise<unknown>, what: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (this.#sleepers.size < n) return;
        this.#watchers.delete(check);
        resolve();
      };
      this.#watchers.add(check);
      check();
      work.then(
        (v) => reject(new Error(`${what}: answered ${JSON.stringify(v)} instead of waiting`)),
        (e) => reject(new Error(`${what}: failed instead of waiting: ${e?.message ?? e}`)),
      ).finally(() => this.#watchers.delete(check));
    });
  }
}

/** Whether `p` has settled by the time the tasks queued now have run. */
export async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  p.then(() => done = true, () => done = true);
  await new Promise((r) => setTimeout(r, 0));
  return done;
}
