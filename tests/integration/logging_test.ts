// The daemon's log as an operator reads it: JSON lines whose messages are sentences, request lines
// naming pod and container, logLevel honoured, and SIGHUP applying a new level without a restart.
// Needs root (the daemon runs in a namespace of the test's own, whose loopback stays down).
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { IS_ROOT, withNetns } from "../../daemon/dev/netns.ts";
import { standaloneDaemonProcess } from "../../daemon/dev/harness.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { CNI_REQUEST_PATH } from "../../lib/socket_api.ts";

Deno.test({
  name:
    "request lines name pod and container in plain sentences; debug appears only once SIGHUP applies logLevel debug",
  ignore: !IS_ROOT,
  fn: () =>
    withNetns(1, async ([ns]) => {
      const dir = await Deno.makeTempDir({ prefix: "ferry-log-" });
      const { daemon, socket, log, writeConfig } = standaloneDaemonProcess(dir, ns.name, "fylog0");
      const config = (logLevel: string) => writeConfig({ logLevel });
      await config("info");
      const status = () =>
        unixRequest(
          socket,
          "POST",
          CNI_REQUEST_PATH,
          JSON.stringify({
            command: "STATUS",
            args: { K8S_POD_NAMESPACE: "default", K8S_POD_NAME: "web-0" },
            path: [],
            config: { cniVersion: "1.1.0", name: "ferry", type: "ferry" },
          }),
          AbortSignal.timeout(5000),
        );
      const lines = async () =>
        (await Deno.readTextFile(log)).trim().split("\n").map((l) =>
          JSON.parse(l) as { level: string; message: string }
        );
      try {
        await daemon.start();
        await status();
        await new Promise((r) => setTimeout(r, 200));
        const before = await lines();
        assertEquals(before.filter((l) => l.level === "DEBUG"), [], "no debug lines at info");
        // Its namespace's loopback is down: the TCP port cannot be bound, which is said, and the
        // socket serves anyway.
        assert(
          before.some((l) =>
            l.level === "ERROR" && l.message.startsWith("probes and metrics are not served")
          ),
          JSON.stringify(before),
        );
        const ok = before.find((l) => l.message.startsWith("STATUS of pod"))!;
        assert(ok, JSON.stringify(before));
        assertEquals(ok.message.includes('"'), false, `no JSON quotes: ${ok.message}`);
        assert(ok.message.startsWith("STATUS of pod default/web-0, container -"), ok.message);
        await config("debug");
        daemon.signal("SIGHUP");
        const deadline = Date.now() + 5000;
        while (!(await lines()).some((l) => l.message.includes("log level now debug"))) {
          if (Date.now() > deadline) {
            throw new Error(
              `SIGHUP was not applied: ${await Deno.readTextFile(log)}`,
            );
          }
          await new Promise((r) => setTimeout(r, 50));
        }
        await status();
        await new Promise((r) => setTimeout(r, 200));
        const after = await lines();
        assert(
          after.some((l) => l.level === "DEBUG" && l.message.includes("received")),
          "a debug line once the level is debug",
        );
      } finally {
        await daemon.stop().catch(() => {});
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      }
    }),
});
