// The daemon's child processes end with it: an `nft` still running when the daemon is told to
// stop (SIGTERM) is killed, not left an orphan (#42 item 4: two `nft` processes outlived a daemon).
// A stand-in `nft` first on PATH sleeps instead of writing. Needs root (the daemon runs in a
// namespace of the test's own).
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { IS_ROOT, withNetns } from "../../daemon/dev/netns.ts";
import { standaloneDaemonProcess } from "../../daemon/dev/harness.ts";

/** Whether process `pid` runs (a zombie, killed and not yet reaped by its new parent, does not). */
const alive = (pid: string) =>
  Deno.readTextFile(`/proc/${pid}/stat`).then(
    (stat) => !/^\d+ \(.*\) Z /.test(stat),
    () => false,
  );

Deno.test({
  name: "an nft still running when the daemon stops is killed with it",
  ignore: !IS_ROOT,
  fn: () =>
    withNetns(1, async ([ns]) => {
      const dir = await Deno.makeTempDir({ prefix: "ferry-children-" });
      const bin = `${dir}/bin`;
      await Deno.mkdir(bin);
      // The nft that writes the masquerade table says its pid, then sleeps; every other one (port
      // security's table at start, reads without a ruleset) ends at once, so the start goes on.
      await Deno.writeTextFile(
        `${bin}/nft`,
        `#!/bin/sh\nif grep -q masquerade; then echo $$ >> ${dir}/nft-pids; exec sleep 120; fi\n`,
      );
      await Deno.chmod(`${bin}/nft`, 0o755);
      const { daemon, log, writeConfig } = standaloneDaemonProcess(dir, ns.name, "fychl0");
      await writeConfig({ masquerade: { enabled: true, nonMasqueradeCIDRs: [], table: "ferry" } });
      const path = Deno.env.get("PATH") ?? "";
      const pids = () =>
        Deno.readTextFile(`${dir}/nft-pids`).then((t) => t.trim().split("\n"), () => []);
      try {
        Deno.env.set("PATH", `${bin}:${path}`);
        await daemon.start();
        for (let i = 0; i < 1000 && (await pids()).length === 0; i++) {
          await new Promise((r) => setTimeout(r, 20));
        }
        const started = await pids();
        assert(
          started.length > 0,
          `the daemon started no nft; its log: ${await Deno.readTextFile(log)}`,
        );
        for (const pid of started) assert(await alive(pid), `nft ${pid} should still run`);
        await daemon.stop();
        const orphans = [];
        for (const pid of await pids()) if (await alive(pid)) orphans.push(pid);
        assertEquals(orphans, [], "nft processes outlived the daemon");
      } finally {
        Deno.env.set("PATH", path);
        await daemon.kill();
        for (const pid of await pids()) {
          try {
            Deno.kill(Number(pid), "SIGKILL");
          } catch { /* gone */ }
        }
        await Deno.remove(dir, { recursive: true });
      }
    }),
});
