// KUBECONFIG with several files (`a:b:c`), as kubectl reads it: for each context, cluster and user
// the first file that names it wins, current-context comes from the first file that sets it,
// files that do not exist are skipped; `--kubeconfig` names one file only; kubectl exec is given
// the same list.
import { assertEquals } from "deno-std/assert/mod.js";
import { KubeStandin } from "../../daemon/dev/kube_standin/server.ts";
import { withTempDir } from "../../daemon/dev/netns.ts";
import { parseCli } from "../../cli/cli.ts";
import { KubectlExec } from "../../cli/pod_exec.ts";

const MAIN = new URL("../../cli/main.ts", import.meta.url).pathname;

const yaml = (lines: string[]) => ["apiVersion: v1", "kind: Config", ...lines, ""].join("\n");

Deno.test("the files of KUBECONFIG are merged as kubectl merges them: the first to name a context, cluster or user wins, current-context from the first that sets it", () =>
  withTempDir(async (dir) => {
    const token = crypto.randomUUID();
    const api = await KubeStandin.start({ token });
    try {
      // a: the current context's name and the user with the right token (a token file, relative
      // to a); b: the context and the cluster, a user of the same name with a wrong token, and a
      // current-context of its own (both lose to a's).
      await Deno.mkdir(`${dir}/a`);
      await Deno.writeTextFile(`${dir}/a/token`, token);
      await Deno.writeTextFile(
        `${dir}/a/config`,
        yaml(["current-context: x", "users: [{name: u, user: {tokenFile: token}}]"]),
      );
      await Deno.writeTextFile(
        `${dir}/b`,
        yaml([
          "current-context: y",
          "contexts: [{name: x, context: {cluster: c, user: u}}, {name: y, context: {cluster: nowhere, user: u}}]",
          `clusters: [{name: c, cluster: {server: "${api.url}"}}]`,
          "users: [{name: u, user: {token: wrong}}]",
        ]),
      );
      const run = async (env: Record<string, string>, ...args: string[]) => {
        const out = await new Deno.Command(Deno.execPath(), {
          args: ["run", "--allow-all", "--frozen", "--quiet", MAIN, "ipam", "check", ...args],
          env: { HOME: dir, ...env },
          stdout: "piped",
          stderr: "piped",
        }).output();
        const text = (b: Uint8Array) => new TextDecoder().decode(b);
        return { code: out.code, text: text(out.stdout) + text(out.stderr) };
      };
      const merged = await run({ KUBECONFIG: `${dir}/a/config:${dir}/missing::${dir}/b` });
      assertEquals(merged.code, 0, `the merged files: ${merged.text}`);
      assertEquals(
        merged.text,
        "ipam check: 0 IPPools, 0 IPBlocks, 0 nodes, 0 pods: no address held twice, leaked or out of place\n",
      );
      // The other order: b's current context (y, a cluster no file names) and b's wrong token.
      const reversed = await run({ KUBECONFIG: `${dir}/b:${dir}/a/config` });
      assertEquals(reversed.code, 2, `b first: ${reversed.text}`);
      assertEquals(
        /kubeconfig has no cluster named "nowhere"/.test(reversed.text),
        true,
        `b first names y's cluster: ${reversed.text}`,
      );
      const withContext = await run(
        { KUBECONFIG: `${dir}/b:${dir}/a/config` },
        "--context",
        "x",
      );
      assertEquals(withContext.code, 2, `b's user wins: ${withContext.text}`);
      assertEquals(/401|Unauthorized/i.test(withContext.text), true, withContext.text);
      // --kubeconfig names one file, whatever KUBECONFIG says.
      const flag = await run({ KUBECONFIG: `${dir}/b` }, "--kubeconfig", `${dir}/a/config`);
      assertEquals(flag.code, 2, flag.text);
      assertEquals(/no context named "x"/.test(flag.text), true, flag.text);
      const none = await run({ KUBECONFIG: `${dir}/missing:${dir}/gone` });
      assertEquals(none.code, 2, none.text);
      assertEquals(/none of the kubeconfig files exists/.test(none.text), true, none.text);
    } finally {
      await api.stop();
    }
  }));

Deno.test("KUBECONFIG's files are parsed as a list, empty entries dropped; --kubeconfig and the default name one file", () => {
  const env = (vars: Record<string, string>) => (n: string) => vars[n];
  assertEquals(parseCli(["status"], env({ KUBECONFIG: "/a::/b:", HOME: "/h" })).kube, {
    kubeconfigs: ["/a", "/b"],
    context: undefined,
  });
  assertEquals(
    parseCli(["status", "--kubeconfig", "/k"], env({ KUBECONFIG: "/a:/b" })).kube.kubeconfig,
    "/k",
  );
  assertEquals(parseCli(["status"], env({ KUBECONFIG: "", HOME: "/h" })).kube, {
    kubeconfig: "/h/.kube/config",
    context: undefined,
  });
});

Deno.test("kubectl exec is given KUBECONFIG's files as its own KUBECONFIG, and no --kubeconfig", () =>
  withTempDir(async (dir) => {
    const kubectl = `${dir}/kubectl`;
    await Deno.writeTextFile(kubectl, `#!/bin/sh\necho "KUBECONFIG=$KUBECONFIG"\necho "$@"\n`, {
      mode: 0o755,
    });
    const exec = new KubectlExec({ kubeconfigs: ["/a", "/b"], context: "prod", kubectl });
    const r = await exec.exec(
      { namespace: "kube-system", name: "ferry-x", container: "ferry" },
      ["true"],
      AbortSignal.timeout(10_000),
    );
    assertEquals(r.stdout.split("\n").slice(0, 2), [
      "KUBECONFIG=/a:/b",
      "--context=prod exec --namespace=kube-system ferry-x --container=ferry -- true",
    ]);
  }));
