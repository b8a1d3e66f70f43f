// The daemon as an operator runs it: `deno task daemon` flags, a config file, a clear refusal of a
// second daemon on the same socket, and a graceful SIGTERM that removes the socket.
import { assert, assertEquals, assertMatch } from "deno-std/assert/mod.js";
import { HEALTHZ_PATH } from "../../lib/socket_api.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { removeBridge, testSubnet } from "../../daemon/dev/harness.ts";
import { IS_ROOT, uniqueToken } from "../../daemon/dev/netns.ts";

const MAIN = new URL("../../daemon/main.ts", import.meta.url).pathname;

function spawnDaemon(args: string[]) {
  return new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", "--frozen", MAIN, ...args],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
}

async function waitHealthy(socket: string): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    try {
      if (
        (await unixRequest(socket, "GET", HEALTHZ_PATH, undefined, AbortSignal.timeout(500)))
          .status === 200
      ) return;
    } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("daemon did not become healthy");
}

Deno.test({
  name:
    "the daemon runs from a config file, refuses a second instance, and stops cleanly on SIGTERM",
  // The daemon sets up its bridge at start: root only, like every daemon that plugs pods.
  ignore: !IS_ROOT,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    const socket = `${dir}/run/ferry.sock`;
    // Its own bridge and range; the host's forwarding sysctls left alone.
    const network = { subnet: testSubnet(), bridge: `fb${uniqueToken()}`, forwarding: false };
    await Deno.writeTextFile(
      `${dir}/ferry.json`,
      JSON.stringify({
        standalone: true,
        stateDir: `${dir}/state`,
        logLevel: "warning",
        network,
        // It runs in the host's namespace: the node's nftables are not its to own, and its
        // probes and metrics take any free port.
        masquerade: { enabled: false },
        server: { httpPort: 0 },
      }),
    );
    const first = spawnDaemon(["--config", `${dir}/ferry.json`, "--socket", socket]);
    try {
      await waitHealthy(socket);
      const second = await spawnDaemon(["--config", `${dir}/ferry.json`, "--socket", socket])
        .output();
      assertEquals(second.code, 1);
      assertMatch(
        new TextDecoder().decode(second.stderr),
        /another Ferry daemon is already serving/,
      );
      first.kill("SIGTERM");
      const out = await first.output();
      assertEquals(out.code, 0, new TextDecoder().decode(out.stderr));
      assert(!(await Deno.stat(socket).then(() => true, () => false)), "the socket is removed");
    } finally {
      try {
        first.kill("SIGKILL");
      } catch { /* exited */ }
      await removeBridge(network.bridge);
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("an invalid config file stops the daemon with a message naming the field", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(
      `${dir}/ferry.json`,
      JSON.stringify({ network: { subnet: "10.0.0.0/24", mtu: 9 } }),
    );
    const out = await spawnDaemon(["--config", `${dir}/ferry.json`]).output();
    assertEquals(out.code, 1);
    assertMatch(new TextDecoder().decode(out.stderr), /\/network\/mtu/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
