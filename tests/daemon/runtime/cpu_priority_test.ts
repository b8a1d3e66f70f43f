// The daemon's CPU priority: every thread gets the nice value, a thread that ended meanwhile is
// skipped, a refusal (no CAP_SYS_NICE) is reported instead of thrown. The daemon process itself is
// tested in main_process_test.ts.
import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import { applyNice, type PrioritySys } from "../../../daemon/runtime/cpu_priority.ts";
import { SyscallError } from "../../../daemon/net/netlink/libc.ts";

const EPERM = 1, ESRCH = 3, EACCES = 13, EINVAL = 22;

/** Threads with a nice value each; `fail` maps a thread to the errno its setpriority fails with. */
function fakeSys(tids: number[], fail: Record<number, number> = {}) {
  const nice = new Map<number, number>(tids.map((t) => [t, 0]));
  const sys: PrioritySys = {
    threads: () => tids,
    setNice(tid, value) {
      if (fail[tid]) throw new SyscallError(`setpriority(${tid})`, fail[tid]);
      nice.set(tid, value);
    },
  };
  return { sys, nice };
}

Deno.test("every thread of the process gets the nice value", () => {
  const { sys, nice } = fakeSys([10, 11, 12]);
  assertEquals(applyNice(-10, sys), { threads: 3 });
  assertEquals([...nice.values()], [-10, -10, -10]);
});

Deno.test("a thread that ended while the list was walked is skipped", () => {
  const { sys, nice } = fakeSys([10, 11, 12], { 11: ESRCH });
  assertEquals(applyNice(-5, sys), { threads: 2 });
  assertEquals(nice.get(12), -5);
});

Deno.test("a refusal (no CAP_SYS_NICE) is reported, not thrown", () => {
  for (const errno of [EPERM, EACCES]) {
    const { sys } = fakeSys([10, 11], { 10: errno });
    const out = applyNice(-10, sys);
    assertEquals(out.threads, 0);
    assertEquals(out.refused, new SyscallError("setpriority(10)", errno).message);
  }
});

Deno.test("any other failure of setpriority is thrown", () => {
  const { sys } = fakeSys([10], { 10: EINVAL });
  assertThrows(() => applyNice(-10, sys), SyscallError);
});
