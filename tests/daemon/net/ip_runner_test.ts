// The iproute2 runner: a batch into a namespace that is gone fails as an `ip` failure carrying
// nsenter's words (what the plumber's forgiving DEL looks for), whatever the batch's size.
import { assert, assertEquals, assertMatch, assertRejects } from "deno-std/assert/mod.js";
import { IpCommandError, SpawningIpRunner } from "../../../daemon/net/ip_runner.ts";
import { ChildKilledError } from "../../../daemon/runtime/child_set.ts";
import { IS_ROOT, withNetns } from "../../../daemon/dev/netns.ts";

const HAVE_IP = await Deno.stat("/usr/bin/nsenter").then(() => true, () => false);

Deno.test({
  name: "a batch into a namespace that is gone fails with nsenter's message, not a broken pipe",
  ignore: !HAVE_IP,
  fn: async () => {
    // More lines than a pipe holds: nsenter exits before reading them.
    const lines = Array.from({ length: 40_000 }, (_, i) => `link set dev x${i} up`);
    const err = await assertRejects(
      () => new SpawningIpRunner().batch(lines, { netns: "/run/netns/ferry-gone-for-good" }),
      IpCommandError,
    );
    assertMatch(err.stderr, /No such file or directory/);
  },
});

/** Pids of the processes whose command line mentions `text`. */
async function processesWith(text: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    const cmdline = await Deno.readTextFile(`/proc/${e.name}/cmdline`).catch(() => "");
    if (cmdline.includes(text)) out.push(e.name);
  }
  return out;
}

Deno.test({
  name:
    "a batch still running when its runner closes (the daemon stops) is killed, not left an orphan",
  ignore: !HAVE_IP || !IS_ROOT,
  fn: () =>
    withNetns(1, async ([ns]) => {
      // The sysctl written before ip runs is a FIFO nobody reads: the child blocks on it.
      const dir = await Deno.makeTempDir({ prefix: "ferry-ip-close-" });
      try {
        await new Deno.Command("mkfifo", { args: [`${dir}/blocker`] }).output();
        const runner = new SpawningIpRunner(dir);
        const batch = runner.batch(["link show"], { netns: ns.path, sysctls: [["blocker", "1"]] });
        for (let i = 0; i < 500 && (await processesWith(dir)).length === 0; i++) {
          await new Promise((r) => setTimeout(r, 10));
        }
        assert((await processesWith(dir)).length > 0, "the blocked batch never started");
        runner.close();
        let timer: ReturnType<typeof setTimeout> | undefined;
        const ended = await Promise.race([
          batch.then(() => "resolved", (e) => e),
          new Promise((
            r,
          ) => (timer = setTimeout(() => r("still running 10 s after close"), 10_000))),
        ]).finally(() => clearTimeout(timer));
        assert(ended instanceof ChildKilledError, `the batch after close: ${ended}`);
        assertEquals(await processesWith(dir), [], "a child of the batch outlived its runner");
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    }),
});
