// Standalone mode (no API): a DEL the runtime sent while the daemon was down is made good at the
// next start, because the pod's network namespace is gone. Needs root.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { IS_ROOT, run, uniqueToken, withNetns } from "../../daemon/dev/netns.ts";
import { cniEnv, netconf, runShimAt, standaloneDaemonProcess } from "../../daemon/dev/harness.ts";
import { install, installUnder } from "../../cni/install.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { STATS_PATH } from "../../lib/socket_api.ts";

async function files(dir: string): Promise<string[]> {
  try {
    return (await Array.fromAsync(Deno.readDir(dir))).map((e) => e.name).filter((n) =>
      !n.startsWith(".")
    );
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return [];
    throw e;
  }
}

Deno.test({
  name:
    "standalone: ADD, SIGKILL, DEL answered while down, sandbox removed, restart: the attachment and its address are released within seconds",
  ignore: !IS_ROOT,
  fn: () =>
    withNetns(1, async ([node]) => {
      const dir = await Deno.makeTempDir({ prefix: "ferry-sweep-" });
      const bridge = `fys${uniqueToken().slice(0, 8)}`;
      const { daemon, socket, writeConfig } = standaloneDaemonProcess(dir, node.name, bridge);
      await writeConfig();
      const { shim } = await install(installUnder(dir, socket));
      const pods = Array.from({ length: 5 }, () => `fyp-${uniqueToken()}`);
      try {
        await daemon.start();
        for (const [i, name] of pods.entries()) {
          await run("ip", "netns", "add", name);
          const add = await runShimAt(
            shim,
            cniEnv("ADD", { path: `/var/run/netns/${name}` }, `sweep${i}`, "eth0"),
            netconf(),
          );
          assertEquals(add.code, 0, add.stdout + add.stderr);
        }
        assertEquals((await files(`${dir}/state/attachments`)).length, 5);
        await daemon.kill();
        for (const [i, name] of pods.entries()) {
          // The runtime's DEL while the daemon is down: answered (a runtime must be able to tear
          // a sandbox down), and then the sandbox goes.
          const del = await runShimAt(
            shim,
            cniEnv("DEL", { path: `/var/run/netns/${name}` }, `sweep${i}`, "eth0"),
            netconf(),
          );
          assertEquals(del.code, 0, del.stdout + del.stderr);
          await run("ip", "netns", "del", name);
        }
        await daemon.start();
        const deadline = Date.now() + 15_000;
        while (Date.now() < deadline && (await files(`${dir}/state/attachments`)).length) {
          await new Promise((r) => setTimeout(r, 200));
        }
        assertEquals(await files(`${dir}/state/attachments`), [], "no record left");
        const pools = await files(`${dir}/state/ipam`);
        for (const p of pools) {
          const held = (await files(`${dir}/state/ipam/${p}`)).filter((n) => /^\d/.test(n));
          assertEquals(held, [], `no address held in ${p}`);
        }
        const stats = JSON.parse(
          (await unixRequest(socket, "GET", STATS_PATH, undefined, AbortSignal.timeout(5000))).body,
        );
        assert(stats.netnsSweep.released >= 5, JSON.stringify(stats.netnsSweep));
        const links = await run("ip", "-n", node.name, "-br", "link", "show", "master", bridge);
        assertEquals(links.trim(), "", "no host end left on the bridge");
      } finally {
        await daemon.stop().catch(() => {});
        for (const name of pods) await run("ip", "netns", "del", name).catch(() => {});
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      }
    }),
});
