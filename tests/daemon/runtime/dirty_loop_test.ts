import { assertEquals } from "deno-std/assert/mod.js";
import { DirtyLoop } from "../../../daemon/runtime/dirty_loop.ts";

Deno.test("a pass that throws is reported, never rejects idle(), and the next kick runs a pass again", async () => {
  const errors: unknown[] = [];
  let passes = 0;
  const loop = new DirtyLoop(
    async () => {
      passes++;
      await Promise.resolve();
      if (passes === 1) throw new Error('invalid IP address "not-a-cidr"');
    },
    () => true,
    (e) => errors.push(e),
  );
  loop.kick();
  await loop.idle();
  assertEquals(passes, 1, "the first pass ran");
  assertEquals(errors.map((e) => (e as Error).message), ['invalid IP address "not-a-cidr"']);
  assertEquals(loop.busy, false, "the loop settled after the failed pass");
  loop.kick();
  await loop.idle();
  assertEquals(passes, 2, "a kick after the failure runs another pass");
  assertEquals(errors.length, 1, "the second pass did not fail");
});

Deno.test("a failed pass does not stop the passes kicked while it ran", async () => {
  let passes = 0;
  let release!: () => void;
  const gate = new Promise<void>((r) => release = r);
  const loop = new DirtyLoop(
    async () => {
      passes++;
      if (passes === 1) {
        await gate;
        throw new Error("boom");
      }
    },
    () => true,
    () => {},
  );
  loop.kick();
  await Promise.resolve();
  await Promise.resolve();
  loop.kick(); // lands while the first pass runs
  release();
  await loop.idle();
  assertEquals(passes, 2, "the kick made during the failing pass still ran");
});

Deno.test("without an onError, a throwing pass is logged and leaves no unhandled rejection", async () => {
  const loop = new DirtyLoop(() => Promise.reject(new Error("boom")));
  loop.kick();
  await loop.idle();
  // An unhandled rejection would fail this test (Deno's test runner reports it).
  await new Promise((r) => setTimeout(r, 0));
  assertEquals(loop.busy, false);
});
