import { assert, assertEquals } from "deno-std/assert/mod.js";
import { sleep } from "../../../daemon/runtime/sleep.ts";

Deno.test("a sleep ends at its time, or at once when its signal aborts, and leaves no timer behind", async () => {
  const never = new AbortController();
  let started = performance.now();
  await sleep(30, never.signal);
  assert(performance.now() - started >= 25, "ended before its time");

  const closing = new AbortController();
  started = performance.now();
  const pausing = sleep(60_000, closing.signal, { unref: true });
  closing.abort();
  await pausing;
  assert(performance.now() - started < 1000, "waited out its time after the abort");

  let ended = false;
  await sleep(60_000, closing.signal).then(() => ended = true);
  assertEquals(ended, true, "an aborted signal ends a new sleep at once");
});
