import { assert, assertEquals } from "deno-std/assert/mod.js";
import { Deadline } from "../../../daemon/runtime/deadline.ts";

Deno.test("a Deadline aborts its signal with a TimeoutError once its time has passed", async () => {
  using deadline = new Deadline(20);
  assertEquals(deadline.signal.aborted, false);
  await new Promise((r) => deadline.signal.addEventListener("abort", r, { once: true }));
  assertEquals((deadline.signal.reason as DOMException).name, "TimeoutError");
});

Deno.test("a Deadline left before its time never aborts, and leaves no timer running", async () => {
  let signal: AbortSignal;
  {
    using deadline = new Deadline(20);
    signal = deadline.signal;
  }
  await new Promise((r) => setTimeout(r, 60));
  assert(!signal.aborted);
  // The test sanitizer fails a test that leaves a timer behind; reaching here means none was.
});
