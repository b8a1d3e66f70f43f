import { assertEquals } from "deno-std/assert/mod.js";
import { PhaseStats } from "../../../daemon/telemetry/phase_stats.ts";

Deno.test("phase percentiles are computed over a fixed window of the most recent samples", () => {
  const phases = new PhaseStats(100);
  for (let i = 1; i <= 100; i++) phases.record("plug", i);
  assertEquals(phases.summary().plug, { n: 100, p50: 51, p90: 91, p99: 100, max: 100 });
  for (let i = 0; i < 100; i++) phases.record("plug", 1000);
  assertEquals(phases.summary().plug, { n: 100, p50: 1000, p90: 1000, p99: 1000, max: 1000 });
  assertEquals(phases.summary().total, undefined);
});

Deno.test("timing a phase records it even when the work fails", async () => {
  const phases = new PhaseStats();
  await phases.time("record", () => Promise.reject(new Error("x"))).catch(() => {});
  assertEquals(phases.summary().record?.n, 1);
});
