/**
 * The guard and its floor (`bench/results/guard_floor.json`, `deno task bench:guard-floor`,
 * `guard_floor.ts`): the result and its Markdown. Pure: JSON in, text out.
 *
 * @module
 */
import type { TcpSample } from "./tcp_probe.ts";
import { type RatioInterval, verdictOf } from "./paired.ts";

/** One metric's per-set ratios over off: the guard's and its floor's. */
export interface FloorMetric {
  /** The metric (`TcpSample`'s key). */
  metric: keyof TcpSample;
  /** The guard on over off. */
  guard: RatioInterval;
  /** The least guard over off. */
  least: RatioInterval;
}

/** What `bench:guard-floor` writes. */
export interface GuardFloorResult {
  /** When. */
  date: string;
  /** What ran it. */
  machine: string;
  /** Sets per metric. */
  sets: number;
  /** One window's length, in seconds. */
  windowS: number;
  /** The load average before and after. */
  loadavg: { before: string; after: string };
  /** Per metric measured. */
  metrics: FloorMetric[];
  /** Every window's rate, per series (`on`, `off`, `lookup`). */
  samples: Record<string, TcpSample[]>;
}

/** Port security on over off: `bench:guard-floor`'s target (`bench:dataplane`'s too). */
const GUARD_TARGET = 0.97;

const NAMES: Partial<Record<keyof TcpSample, string>> = {
  gbps: "throughput",
  rrPerS: "req/resp",
  connsPerS: "conn/s",
};

/** The Markdown of a result: a row per metric, the guard's and the floor's interval and verdict. */
export function guardFloorReport(r: GuardFloorResult, heading = "#"): string {
  const show = (i: RatioInterval) =>
    `${i.median.toFixed(3)} [${i.low.toFixed(3)}–${i.high.toFixed(3)}]`;
  const said = (i: RatioInterval) => {
    const v = verdictOf(i, GUARD_TARGET);
    return v === "not met" ? "wholly below 0.97" : v === "met" ? "at or above 0.97" : "undecided";
  };
  return [
    `${heading} The guard and its floor, one case (\`deno task bench:guard-floor\`)`,
    "",
    `${r.date}, ${r.machine}, ${r.sets} sets of three adjacent ${r.windowS} s windows (the guard ` +
    "on, off and at its least, switched in place, every order in turn); two pods of one node, no " +
    `policy selecting the server; load average ${r.loadavg.before} before, ${r.loadavg.after} after`,
    "",
    "| metric | guard on / off | | least guard / off | |",
    "| --- | --- | --- | --- | --- |",
    ...r.metrics.map((m) =>
      `| ${NAMES[m.metric] ?? m.metric} | ${show(m.guard)} | ${said(m.guard)} | ${
        show(m.least)
      } | ${said(m.least)} |`
    ),
    "",
    "Medians of the per-set ratios with their distribution-free 95 % intervals. Where the least " +
    "guard's interval lies wholly below 0.97, no guard of per-pod set elements meets the target " +
    "in that metric on this machine.",
    "",
  ].join("\n");
}
