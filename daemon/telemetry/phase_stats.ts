/**
 * Where an ADD's time goes: the duration of each phase (waiting for the container's turn,
 * waiting for the pod to reach the watch, plugging and, within it, allocating addresses,
 * recording, putting its network policy in place, the whole) over the most recent
 * requests, summarised as percentiles for `GET /v1/stats`. A fixed window per phase, so memory
 * stays flat however many requests are served.
 *
 * @module
 */

/** The phases of an ADD. */
export type AddPhase = "turn" | "podWait" | "plug" | "ipam" | "record" | "policy" | "total";

/** Percentiles of one phase, in milliseconds. */
export interface PhaseSummary {
  /** Samples in the window. */
  n: number;
  /** Median. */
  p50: number;
  /** 90th percentile. */
  p90: number;
  /** 99th percentile. */
  p99: number;
  /** Largest. */
  max: number;
}

/**
 * The recorder.
 *
 * @example
 * ```ts
 * const phases = new PhaseStats();
 * const t = performance.now(); await plug(); phases.record("plug", performance.now() - t);
 * phases.summary().plug?.p50;
 * ```
 */
export class PhaseStats {
  readonly #window: number;
  readonly #samples = new Map<AddPhase, number[]>();
  readonly #next = new Map<AddPhase, number>();

  readonly #observe?: (phase: AddPhase, ms: number) => void;

  /** Keeps the last `window` samples of each phase; `observe` also hears of every one. */
  constructor(window = 1024, observe?: (phase: AddPhase, ms: number) => void) {
    this.#window = window;
    this.#observe = observe;
  }

  /** Records one duration (ms). */
  record(phase: AddPhase, ms: number): void {
    this.#observe?.(phase, ms);
    const samples = this.#samples.get(phase) ?? [];
    this.#samples.set(phase, samples);
    const at = this.#next.get(phase) ?? 0;
    samples[at % this.#window] = ms;
    this.#next.set(phase, at + 1);
  }

  /** Times `fn` as `phase`. */
  async time<T>(phase: AddPhase, fn: () => Promise<T>): Promise<T> {
    const started = performance.now();
    try {
      return await fn();
    } finally {
      this.record(phase, performance.now() - started);
    }
  }

  /** Percentiles per phase over the window. */
  summary(): Partial<Record<AddPhase, PhaseSummary>> {
    const out: Partial<Record<AddPhase, PhaseSummary>> = {};
    for (const [phase, samples] of this.#samples) out[phase] = summarize(samples);
    return out;
  }
}

/**
 * Nearest-rank percentiles of `samples` (ms, one decimal); the benchmarks use it too.
 *
 * @example
 * ```ts
 * summarize([3, 1, 2]).p50; // 2
 * ```
 */
export function summarize(samples: number[]): PhaseSummary {
  const s = [...samples].sort((a, b) => a - b);
  const at = (q: number) =>
    Math.round(s[Math.min(s.length - 1, Math.floor(q * s.length))] * 10) / 10;
  return {
    n: s.length,
    p50: at(0.5),
    p90: at(0.9),
    p99: at(0.99),
    max: Math.round(s[s.length - 1] * 10) / 10,
  };
}
