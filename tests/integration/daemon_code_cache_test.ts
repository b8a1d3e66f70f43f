// The daemon runs without V8's code cache (`--no-code-cache` in daemon/runtime/runtime_flags.ts): the
// cache is a SQLite file in DENO_DIR that Deno maps into the process, megabytes of the daemon's
// resident memory for compiling its modules a little sooner once at start. Needs root (the daemon
// runs in a namespace of the test's own).
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { IS_ROOT, withNetns } from "../../daemon/dev/netns.ts";
import { standaloneDaemonProcess } from "../../daemon/dev/harness.ts";

Deno.test({
  name: "the daemon's process neither maps nor opens V8's code cache",
  ignore: !IS_ROOT,
  fn: () =>
    withNetns(1, async ([ns]) => {
      const dir = await Deno.makeTempDir({ prefix: "ferry-codecache-" });
      const { daemon, writeConfig } = standaloneDaemonProcess(dir, ns.name, "fycc0");
      await writeConfig();
      try {
        await daemon.start();
        const pid = daemon.pid!;
        // The shell and `ip netns exec` exec Deno in turn: the child's pid is the daemon's.
        const exe = await Deno.readLink(`/proc/${pid}/exe`);
        assert(exe.endsWith("deno"), `pid ${pid} is ${exe}, not the daemon`);
        const maps = await Deno.readTextFile(`/proc/${pid}/maps`);
        // Deno's module caches are mapped the same way: the check can see a cache when there is one.
        assert(maps.includes("dep_analysis_cache"), "the dependency cache is not mapped");
        const open: string[] = [];
        for await (const fd of Deno.readDir(`/proc/${pid}/fd`)) {
          open.push(await Deno.readLink(`/proc/${pid}/fd/${fd.name}`).catch(() => ""));
        }
        assertEquals(
          maps.split("\n").filter((l) => l.includes("v8_code_cache")),
          [],
          "the code cache is mapped",
        );
        assertEquals(open.filter((f) => f.includes("v8_code_cache")), [], "it is open");
      } finally {
        await daemon.stop().catch(() => {});
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      }
    }),
});
