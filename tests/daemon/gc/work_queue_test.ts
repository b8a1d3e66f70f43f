import { assertEquals } from "deno-std/assert/mod.js";
import { type Outcome, WorkQueue } from "../../../daemon/gc/work_queue.ts";

const tick = (ms = 0) => new Promise((r) => setTimeout(r, ms));

Deno.test("a key added many times before it runs is worked on once", async () => {
  const runs: string[] = [];
  const q = new WorkQueue((k) => Promise.resolve(void runs.push(k)), () => {});
  for (let i = 0; i < 5; i++) q.add("a");
  q.add("b");
  await q.idle();
  assertEquals(runs, ["a", "b"]);
  await q.close();
});

Deno.test("a key added while it is in work runs again after, never twice at once", async () => {
  let active = 0, most = 0, runs = 0;
  const q = new WorkQueue(async () => {
    active++;
    most = Math.max(most, active);
    runs++;
    await tick(20);
    active--;
  }, () => {});
  q.add("a");
  await tick(5);
  q.add("a");
  await tick(60);
  await q.idle();
  assertEquals([runs, most], [2, 1]);
  await q.close();
});

Deno.test("a failing key is retried with backoff at most maxRetries times, then reported once", async () => {
  const outcomes: Outcome[] = [];
  let attempts = 0;
  const q = new WorkQueue(
    () => {
      attempts++;
      return Promise.reject(new Error("boom"));
    },
    (o) => outcomes.push(o),
    { maxRetries: 2, baseDelayMs: 10 },
  );
  q.add("k");
  for (let i = 0; i < 50 && outcomes.length === 0; i++) await tick(10);
  assertEquals(attempts, 3);
  assertEquals(outcomes.length, 1);
  assertEquals(outcomes[0].ok, false);
  assertEquals((outcomes[0] as { attempts: number }).attempts, 3);
  await q.close();
});

Deno.test("a key that succeeds on a retry is reported as done", async () => {
  const outcomes: Outcome[] = [];
  let attempts = 0;
  const q = new WorkQueue(
    () => {
      attempts++;
      return attempts < 2 ? Promise.reject(new Error("once")) : Promise.resolve();
    },
    (o) => outcomes.push(o),
    { maxRetries: 2, baseDelayMs: 10 },
  );
  q.add("k");
  for (let i = 0; i < 50 && outcomes.length === 0; i++) await tick(10);
  assertEquals(outcomes, [{ key: "k", ok: true }]);
  await q.close();
});
