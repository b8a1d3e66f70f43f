import { assertEquals } from "deno-std/assert/mod.js";
import { IdleTrimmer, mallocTrim, type TrimTimers } from "../../../daemon/runtime/idle_trim.ts";

/** Timers on a clock the test moves by hand. */
function manualTimers() {
  let now = 0, next = 1;
  const due = new Map<number, { at: number; fn: () => void }>();
  const timers: TrimTimers = {
    start(fn, ms) {
      due.set(next, { at: now + ms, fn });
      return next++;
    },
    cancel: (id) => void due.delete(id),
  };
  const advance = (ms: number) => {
    const until = now + ms;
    while (true) {
      const [id, t] = [...due].sort((a, b) => a[1].at - b[1].at)[0] ?? [];
      if (id === undefined || t!.at > until) break;
      due.delete(id);
      now = t!.at;
      t!.fn();
    }
    now = until;
  };
  return { timers, advance, armed: () => due.size };
}

Deno.test("memory is trimmed once when requests stop, not while they keep coming, and again after new ones", () => {
  const { timers, advance, armed } = manualTimers();
  let trims = 0;
  const trimmer = new IdleTrimmer(() => trims++, 5000, timers);
  advance(60_000);
  assertEquals(trims, 0, "nothing to give back before any request");
  for (let i = 0; i < 30; i++) { // a request every second for 30 s
    trimmer.touch();
    advance(1000);
  }
  assertEquals(trims, 0, "never while busy");
  assertEquals(armed(), 1, "one timer, whatever the request rate");
  advance(10_000);
  assertEquals(trims, 1, "once quiet");
  advance(60_000);
  assertEquals([trims, armed()], [1, 0], "once per quiet spell, and no timer left");
  trimmer.touch();
  advance(10_000);
  assertEquals([trims, trimmer.trims], [2, 2]);
});

Deno.test("a stopped trimmer trims nothing", () => {
  const { timers, advance, armed } = manualTimers();
  let trims = 0;
  const trimmer = new IdleTrimmer(() => trims++, 5000, timers);
  trimmer.touch();
  trimmer.stop();
  advance(60_000);
  assertEquals([trims, armed()], [0, 0]);
});

Deno.test("glibc's malloc_trim is found and can be called", () => {
  const trim = mallocTrim();
  assertEquals(typeof trim, "function");
  trim!();
});
