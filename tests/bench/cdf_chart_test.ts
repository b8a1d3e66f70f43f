import { assert, assertEquals } from "deno-std/assert/mod.js";
import { cdfChart, cdfPoints, logTicks } from "../../bench/cdf_chart.ts";

Deno.test("a cumulative curve rises by one sample's share at each sorted latency", () => {
  assertEquals(cdfPoints([30, 10, 20, 40]), [[10, 0.25], [20, 0.5], [30, 0.75], [40, 1]]);
});

Deno.test("log-scale ticks are 1-2-5 steps, finer when the range is narrow", () => {
  assertEquals(logTicks(8, 1200), [10, 20, 50, 100, 200, 500, 1000]);
  assertEquals(logTicks(14, 60), [15, 20, 30, 40, 50, 60]);
});

Deno.test("the chart has a panel title, a curve and a legend entry per series, and escapes text", () => {
  const svg = cdfChart([{
    title: "ADD <p50>",
    series: [{ name: "Ferry & co", samples: [20, 25, 30] }, { name: "ref", samples: [10, 12] }],
  }], "2 CPUs");
  assert(svg.startsWith("<svg"));
  assert(svg.includes("ADD &lt;p50&gt;"));
  assert(svg.includes("Ferry &amp; co"));
  assertEquals(svg.match(/<path /g)?.length, 2);
});
