/**
 * Percentile summaries of latency samples, shared by the benchmarks.
 *
 * @module
 */

/** Summary of one series, in milliseconds (one decimal). */
export interface Series {
  /** Samples. */
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
 * Nearest-rank percentiles of `samples`.
 *
 * @example
 * ```ts
 * summarize([3, 1, 2]).p50; // 2
 * ```
 */
export function summarize(samples: number[]): Series {
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
