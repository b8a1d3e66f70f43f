// The delegate driver running Debian's reference plugins in real namespaces. Needs root.
import { assertEquals, assertMatch, assertRejects } from "deno-std/assert/mod.js";
import { delegate } from "../../daemon/net/delegate.ts";
import {
  ipIn,
  IS_ROOT,
  linkInNetns,
  run,
  uniqueToken,
  withNetns,
  withTempDir,
} from "../../daemon/dev/netns.ts";
import { CniError } from "../../lib/cni/errors.ts";
import type { NetConf } from "../../lib/cni/schemas.ts";

const HAVE_PLUGINS = await Deno.stat("/usr/lib/cni/bridge").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !HAVE_PLUGINS };
const PATH = ["/usr/lib/cni"];

function bridgeConf(bridge: string, dataDir: string, subnet: string): NetConf {
  return {
    cniVersion: "1.0.0",
    name: `net-${bridge}`,
    type: "bridge",
    bridge,
    isGateway: true,
    ipam: { type: "host-local", ranges: [[{ subnet }]], dataDir } as NetConf["ipam"],
  } as NetConf;
}

Deno.test({
  name:
    "ADD and DEL through the reference bridge plugin with host-local IPAM, DEL getting the cached result",
  ...opts,
  fn: () =>
    withTempDir((dir) =>
      withNetns(1, async ([ns]) => {
        const bridge = `fb${uniqueToken().slice(0, 8)}`;
        const config = bridgeConf(
          bridge,
          `${dir}/ipam`,
          `10.251.${1 + Math.floor(Math.random() * 250)}.0/24`,
        );
        const cid = `d${uniqueToken()}`;
        try {
          const result = await delegate({
            command: "ADD",
            config,
            containerId: cid,
            netns: ns.path,
            ifname: "net1",
            path: PATH,
          });
          assertEquals(result!.cniVersion, "1.1.0");
          const address = result!.ips![0].address;
          assertMatch(await ipIn(ns, "addr", "show", "dev", "net1"), new RegExp(`inet ${address}`));
          await delegate({
            command: "CHECK",
            config,
            containerId: cid,
            netns: ns.path,
            ifname: "net1",
            path: PATH,
            prevResult: { ...result!, cniVersion: "1.0.0" },
          });
          await delegate({
            command: "DEL",
            config,
            containerId: cid,
            netns: ns.path,
            ifname: "net1",
            path: PATH,
            prevResult: { ...result!, cniVersion: "1.0.0" },
          });
          assertEquals(await linkInNetns(ns, "net1"), false);
          const left = [];
          for await (
            const e of Deno.readDir(`${dir}/ipam/${config.name}`)
          ) if (/^\d/.test(e.name)) left.push(e.name);
          assertEquals(left, [], "host-local released the address");
        } finally {
          await run("ip", "link", "del", bridge).catch(() => {});
        }
      })
    ),
});

Deno.test({
  name: "a plugin's own error passes through with its code; a missing plugin is invalid config (7)",
  ...opts,
  fn: () =>
    withNetns(1, async ([ns]) => {
      const broken = { cniVersion: "1.0.0", name: "n", type: "host-local" } as NetConf;
      const err = await assertRejects(
        () =>
          delegate({
            command: "ADD",
            config: broken,
            containerId: "c1",
            netns: ns.path,
            ifname: "net1",
            path: PATH,
          }),
        CniError,
      );
      assertEquals(err.message.startsWith("plugin host-local:"), true, err.message);
      const missing = await assertRejects(
        () =>
          delegate({
            command: "ADD",
            config: { ...broken, type: "no-such-plugin" },
            containerId: "c1",
            netns: ns.path,
            ifname: "net1",
            path: PATH,
          }),
        CniError,
      );
      assertEquals(missing.code, 7);
    }),
});

for (const by of ["its signal aborts", "its timeout passes"] as const) {
  Deno.test({
    name: `a plugin that hangs is killed when ${by}`,
    ...opts,
    fn: () =>
      withTempDir(async (dir) => {
        await Deno.writeTextFile(`${dir}/hang`, "#!/bin/sh\nexec sleep 30\n", { mode: 0o755 });
        const started = Date.now();
        const err = await assertRejects(
          () =>
            delegate({
              command: "ADD",
              config: { cniVersion: "1.0.0", name: "n", type: "hang" } as NetConf,
              containerId: "c1",
              netns: "/var/run/netns/none",
              ifname: "net1",
              path: [dir],
              ...(by === "its signal aborts"
                ? { signal: AbortSignal.timeout(300) }
                : { timeoutMs: 300 }),
            }),
          CniError,
        );
        assertEquals(err.code, 5);
        assertEquals(Date.now() - started < 10_000, true);
      }),
  });
}

Deno.test({
  name: "a plugin that finishes in time leaves no timer behind",
  ...opts,
  fn: () =>
    withTempDir(async (dir) => {
      await Deno.writeTextFile(`${dir}/quick`, "#!/bin/sh\nexit 0\n", { mode: 0o755 });
      // Every timer started during the call, and whether it was cleared.
      const pending = new Set<ReturnType<typeof setTimeout>>();
      const { setTimeout: set, clearTimeout: clear } = globalThis;
      globalThis.setTimeout = ((fn: () => void, ms?: number) => {
        const id = set(() => (pending.delete(id), fn()), ms);
        pending.add(id);
        return id;
      }) as typeof setTimeout;
      globalThis.clearTimeout = ((
        id?: ReturnType<typeof setTimeout>,
      ) => (pending.delete(id!), clear(id))) as typeof clearTimeout;
      try {
        const out = await delegate({
          command: "DEL",
          config: { cniVersion: "1.0.0", name: "n", type: "quick" } as NetConf,
          containerId: "c1",
          ifname: "net1",
          path: [dir],
          timeoutMs: 60_000,
        });
        assertEquals(out, undefined);
      } finally {
        globalThis.setTimeout = set;
        globalThis.clearTimeout = clear;
      }
      assertEquals(pending.size, 0, "a timer outlived the plugin");
    }),
});

Deno.test({
  name: "a plugin that exits without reading its config is judged by its exit status and output",
  ...opts,
  fn: () =>
    withTempDir(async (dir) => {
      // The config is larger than a pipe holds, so its write is still under way when the plugin
      // closes its stdin and exits: the write always finds the pipe broken.
      const big = "x".repeat(1024 * 1024);
      const call = (type: string) =>
        delegate({
          command: "DEL",
          config: { cniVersion: "1.0.0", name: "n", type, padding: big } as NetConf,
          containerId: "c1",
          ifname: "net1",
          path: [dir],
          timeoutMs: 60_000,
        });
      await Deno.writeTextFile(`${dir}/done`, "#!/bin/sh\nexec 0<&-\nexit 0\n", { mode: 0o755 });
      assertEquals(await call("done"), undefined);
      await Deno.writeTextFile(
        `${dir}/refuses`,
        '#!/bin/sh\nexec 0<&-\necho \'{"code": 7, "msg": "no"}\'\nexit 1\n',
        { mode: 0o755 },
      );
      const err = await assertRejects(() => call("refuses"), CniError);
      assertEquals([err.code, err.message], [7, "plugin refuses: no"]);
    }),
});

/** Processes whose command line contains `marker`, still running. */
async function processesWith(marker: string): Promise<string[]> {
  const out = await new Deno.Command("pgrep", { args: ["-f", marker], stdout: "piped" }).output();
  return new TextDecoder().decode(out.stdout).split("\n").filter(Boolean);
}

Deno.test({
  name:
    "a plugin whose child keeps its stdout open is killed with its whole process group at the deadline (code 5, saying so)",
  ignore: !IS_ROOT,
  fn: () =>
    withTempDir(async (dir) => {
      // The probe's `sh -c 'cat; sleep 300'`: the plugin's child holds the pipe after it.
      const marker = `ferrylinger${uniqueToken()}`;
      await Deno.writeTextFile(
        `${dir}/lingers`,
        `#!/bin/sh\ncat >/dev/null\nsh -c 'sleep 300; echo ${marker}' &\nsleep 300\n`,
        { mode: 0o755 },
      );
      const started = performance.now();
      const err = await assertRejects(
        () =>
          delegate({
            command: "ADD",
            config: { cniVersion: "1.0.0", name: "n", type: "lingers" } as NetConf,
            containerId: "c1",
            netns: "/proc/self/ns/net",
            ifname: "net1",
            path: [dir],
            timeoutMs: 500,
          }),
        CniError,
      );
      assertEquals(err.code, 5, err.message);
      assertMatch(err.message, /did not finish ADD within 500 ms/);
      assertEquals(performance.now() - started < 5000, true, "the call ends at its deadline");
      // Nothing of the group is left.
      const deadline = Date.now() + 3000;
      while ((await processesWith(marker)).length && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
      }
      assertEquals(await processesWith(marker), []);
    }),
});

Deno.test({
  name: "a plugin that prints without end is killed once it passes the output cap (code 5)",
  ignore: !IS_ROOT,
  fn: () =>
    withTempDir(async (dir) => {
      await Deno.writeTextFile(`${dir}/chatty`, "#!/bin/sh\nexec yes\n", { mode: 0o755 });
      await Deno.writeTextFile(`${dir}/noisy`, "#!/bin/sh\nyes >&2\n", { mode: 0o755 });
      for (const [type, stream] of [["chatty", "stdout"], ["noisy", "stderr"]]) {
        const err = await assertRejects(
          () =>
            delegate({
              command: "ADD",
              config: { cniVersion: "1.0.0", name: "n", type } as NetConf,
              containerId: "c1",
              netns: "/proc/self/ns/net",
              ifname: "net1",
              path: [dir],
              timeoutMs: 60_000,
              maxOutputBytes: 64 * 1024,
            }),
          CniError,
        );
        assertEquals(err.code, 5, err.message);
        assertEquals(
          err.message,
          `plugin ${type} printed more than 65536 bytes on ${stream}; it was killed`,
        );
      }
    }),
});
