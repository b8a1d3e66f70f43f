import { assertEquals } from "deno-std/assert/mod.js";
import { KubeStandin } from "../../daemon/dev/kube_standin/server.ts";
import { withTempDir } from "../../daemon/dev/netns.ts";

const MAIN = new URL("../../cli/main.ts", import.meta.url).pathname;

Deno.test("a kubeconfig with an exec credential plugin is used through kubectl proxy, which is gone afterwards", () =>
  withTempDir(async (dir) => {
    // No token asked: kubectl sends no credentials to a plain-HTTP server (the stand-in's), so
    // what this proves is the path through kubectl proxy, not the plugin's authentication.
    const token = crypto.randomUUID();
    const api = await KubeStandin.start();
    try {
      const plugin = `${dir}/credential`;
      await Deno.writeTextFile(
        plugin,
        `#!/bin/sh\necho '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"${token}"}}'\n`,
        { mode: 0o755 },
      );
      await Deno.writeTextFile(
        `${dir}/kubeconfig`,
        [
          "apiVersion: v1",
          "kind: Config",
          `clusters: [{name: c, cluster: {server: "${api.url}"}}]`,
          `users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: ${plugin}, interactiveMode: Never}}}]`,
          "contexts: [{name: x, context: {cluster: c, user: u}}]",
          "current-context: x",
          "",
        ].join("\n"),
      );
      const tmp = `${dir}/tmp`;
      await Deno.mkdir(tmp);
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "--allow-all", "--frozen", "--quiet", MAIN, "ipam", "check"],
        env: { KUBECONFIG: `${dir}/kubeconfig`, TMPDIR: tmp },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
      assertEquals(out.code, 0, text);
      assertEquals(
        text,
        "ipam check: 0 IPPools, 0 IPBlocks, 0 nodes, 0 pods: no address held twice, leaked or out of place\n",
      );
      assertEquals(
        await Array.fromAsync(Deno.readDir(tmp)),
        [],
        "the proxy's socket directory is removed",
      );
    } finally {
      await api.stop();
    }
  }));
