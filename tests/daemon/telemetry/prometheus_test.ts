import { assertEquals } from "deno-std/assert/mod.js";
import {
  Counter,
  exposition,
  formatValue,
  Gauge,
  Histogram,
} from "../../../daemon/telemetry/prometheus.ts";

Deno.test("a counter family prints HELP, TYPE and one line per label set in first-seen order", () => {
  const c = new Counter("x_total", "things\nand \\ more", ["a", "b"]);
  c.inc({ a: "1", b: "2" });
  c.inc({ b: "2", a: "1" }, 2);
  c.inc({ a: 'q"\\\n', b: "" });
  assertEquals(exposition([c]).split("\n"), [
    "# HELP x_total things\\nand \\\\ more",
    "# TYPE x_total counter",
    'x_total{a="1",b="2"} 3',
    'x_total{a="q\\"\\\\\\n",b=""} 1',
    "",
  ]);
});

Deno.test("a histogram's buckets are cumulative with le last, then +Inf, sum and count", () => {
  const h = new Histogram("d_seconds", "d", ["op"], [0.01, 0.1]);
  h.observe({ op: "ADD" }, 0.005);
  h.observe({ op: "ADD" }, 0.05);
  h.observe({ op: "ADD" }, 3);
  assertEquals(h.lines(), [
    "# HELP d_seconds d",
    "# TYPE d_seconds histogram",
    'd_seconds_bucket{op="ADD",le="0.01"} 1',
    'd_seconds_bucket{op="ADD",le="0.1"} 2',
    'd_seconds_bucket{op="ADD",le="+Inf"} 3',
    'd_seconds_sum{op="ADD"} 3.055',
    'd_seconds_count{op="ADD"} 3',
  ]);
});

Deno.test("a gauge reads its samples at each scrape; no labels print no braces", () => {
  let n = 1;
  const g = new Gauge("g", "g", () => [[{}, n], [{ k: "v" }, Infinity]]);
  assertEquals(g.lines().slice(2), ["g 1", 'g{k="v"} +Inf']);
  n = 7;
  assertEquals(g.lines()[2], "g 7");
  assertEquals([formatValue(NaN), formatValue(-Infinity), formatValue(0.25)], [
    "NaN",
    "-Inf",
    "0.25",
  ]);
});
