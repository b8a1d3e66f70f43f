/**
 * Paired comparisons on a shared machine: A and B measured back to back many times (in ABBA
 * order, so that neither always goes first), the ratio A/B taken per pair (the machine's drift
 * between pairs cancels in it), and the median of those ratios given with a distribution-free
 * confidence interval (order statistics of the binomial, as for a sign test: no assumption about
 * the noise's shape). A target on the ratio is then met when the whole interval is on its side,
 * missed when the whole interval is on the other, and otherwise not decided by this run. Pure.
 *
 * @module
 */

/** The median of paired ratios and its confidence interval. */
export interface RatioInterval {
  /** The median of the ratios. */
  median: number;
  /** The interval's low end (an order statistic of the ratios). */
  low: number;
  /** Its high end. */
  high: number;
  /** Pairs measured. */
  n: number;
  /** The probability that the interval holds the true median (at least the one asked for when `n` allows it). */
  coverage: number;
}

/** What a ratio interval says about a target "ratio ≥ floor". */
export type Verdict = "met" | "not met" | "undecided";

const round = (x: number, places = 3) => Math.round(x * 10 ** places) / 10 ** places;

/** The median of `xs` (undefined for none). */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

/** P(X ≤ k) for X ~ Binomial(n, 1/2). */
function binomialCdf(k: number, n: number): number {
  let term = 0.5 ** n; // C(n, 0) / 2^n
  let sum = 0;
  for (let i = 0; i <= k; i++) {
    sum += term;
    term = term * (n - i) / (i + 1);
  }
  return sum;
}

/**
 * The median of `ratios` with the narrowest interval [x₍ₖ₎, x₍ₙ₊₁₋ₖ₎] of order statistics whose
 * coverage is at least `confidence`; with too few pairs for that, the whole range and its
 * (lower) coverage.
 *
 * @example
 * ```ts
 * medianInterval([0.99, 1.01, 0.98, 1.02, 1.0, 0.97, 1.03, 0.99, 1.0, 1.01]);
 * // { median: 1, low: 0.98, high: 1.02, n: 10, coverage: 0.979 }
 * ```
 */
export function medianInterval(ratios: number[], confidence = 0.95): RatioInterval {
  const s = ratios.filter(Number.isFinite).sort((a, b) => a - b);
  const n = s.length;
  if (!n) return { median: NaN, low: NaN, high: NaN, n, coverage: 0 };
  let k = 1;
  while (k + 1 <= n / 2 && 1 - 2 * binomialCdf(k, n) >= confidence) k++;
  return {
    median: round(median(s)),
    low: round(s[k - 1]),
    high: round(s[n - k]),
    n,
    coverage: round(1 - 2 * binomialCdf(k - 1, n)),
  };
}

/**
 * Met when the whole interval is at or above `floor`, not met when all of it is below, undecided
 * when it straddles `floor` (this run cannot tell).
 *
 * @example
 * ```ts
 * verdictOf({ median: 0.99, low: 0.975, high: 1.01, n: 10, coverage: 0.979 }, 0.97); // "met"
 * ```
 */
export function verdictOf(r: RatioInterval, floor: number): Verdict {
  if (!(r.n > 0)) return "undecided";
  if (r.low >= floor) return "met";
  if (r.high < floor) return "not met";
  return "undecided";
}

/**
 * The order of A (true) and B (false) in pair `i` of an ABBA sequence: AB, BA, BA, AB, AB, BA, …
 * (each first as often as the other, and a linear drift falls on both alike).
 *
 * @example
 * ```ts
 * [0, 1, 2, 3].map(abbaFirst); // [true, false, false, true]
 * ```
 */
export function abbaFirst(i: number): boolean {
  return (i + 1) % 4 < 2;
}
