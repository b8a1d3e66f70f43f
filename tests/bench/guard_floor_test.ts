import { assert, assertEquals } from "deno-std/assert/mod.js";
import { summarizeFloor } from "../../bench/guard_floor.ts";
import { guardFloorReport } from "../../bench/guard_floor_report.ts";

/** `n` off windows of 1000 conn/s, and `on` and `lookup` scaled by the ratios given per set. */
function samples(on: number[], lookup: number[]) {
  const off = on.map(() => ({ gbps: 0, rrPerS: 0, connsPerS: 1000 }));
  const scaled = (ks: number[]) => off.map((x, i) => ({ ...x, connsPerS: x.connsPerS * ks[i] }));
  return { off, on: scaled(on), lookup: scaled(lookup) };
}

Deno.test("the guard floor's summary is each state over off set by set, and the report says which side of 0.97 each interval lies", () => {
  const straddling = [0.95, 1.0, 0.99, 1.01, 0.96, 1.02, 0.98, 1.0, 0.97, 1.03];
  const below = straddling.map((x) => x - 0.08);
  const s = samples(straddling, below);
  const [m] = summarizeFloor(s, ["connsPerS"]);
  // Ten sets: the interval is the 2nd and 9th of the sorted ratios.
  assertEquals(m.guard, { median: 0.995, low: 0.96, high: 1.02, n: 10, coverage: 0.979 });
  assertEquals([m.least.low, m.least.high], [0.88, 0.94]);
  const md = guardFloorReport({
    date: "2026-11-27T00:00:00Z",
    machine: "2 CPUs",
    sets: 10,
    windowS: 0.12,
    loadavg: { before: "1 1 1", after: "2 2 2" },
    metrics: [m],
    samples: s,
  });
  assert(
    md.includes(
      "| conn/s | 0.995 [0.960–1.020] | undecided | 0.915 [0.880–0.940] | wholly below 0.97 |",
    ),
    md,
  );
  // A set whose off window is missing pairs with nothing: only the sets measured whole count.
  const short = { ...s, off: s.off.slice(0, 8) };
  assertEquals(summarizeFloor(short, ["connsPerS"])[0].guard.n, 8);
});
