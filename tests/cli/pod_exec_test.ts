import { assertEquals } from "deno-std/assert/mod.js";
import { KubectlExec } from "../../cli/pod_exec.ts";
import { withTempDir } from "../../daemon/dev/netns.ts";

const pod = { namespace: "kube-system", name: "ferry-x7k2p", container: "ferry" };

Deno.test("kubectl exec and logs carry the operator's kubeconfig and context, and the pod's container", () =>
  withTempDir(async (dir) => {
    const kubectl = `${dir}/kubectl`;
    await Deno.writeTextFile(
      kubectl,
      `#!/bin/sh\nfor a in "$@"; do printf '%s\\n' "$a"; done\necho oops >&2\nexit 3\n`,
      { mode: 0o755 },
    );
    const exec = new KubectlExec({ kubeconfig: "/k/config", context: "prod", kubectl });
    const r = await exec.exec(pod, ["deno", "run", "a b.ts"], AbortSignal.timeout(10_000));
    assertEquals(r, {
      code: 3,
      stdout: [
        "--kubeconfig=/k/config",
        "--context=prod",
        "exec",
        "--namespace=kube-system",
        "ferry-x7k2p",
        "--container=ferry",
        "--",
        "deno",
        "run",
        "a b.ts",
        "",
      ].join("\n"),
      stderr: "oops\n",
    });
    const logs = await exec.logs(pod, true, AbortSignal.timeout(10_000));
    assertEquals(logs.stdout.split("\n").slice(2, 8), [
      "logs",
      "--namespace=kube-system",
      "ferry-x7k2p",
      "--container=ferry",
      "--timestamps",
      "--previous",
    ]);
  }));

Deno.test("a missing kubectl is exit status 127 with a sentence, not an exception", async () => {
  const exec = new KubectlExec({ kubectl: "/nonexistent/kubectl" });
  const r = await exec.exec(pod, ["true"], AbortSignal.timeout(10_000));
  assertEquals(r.code, 127);
  assertEquals(r.stderr, "kubectl is not installed (or not on the PATH)");
});
