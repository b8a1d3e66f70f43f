// The manifests in deploy/ against a real API server (FERRY_TEST_KUBECONFIG, `deno task test:real`):
// the server accepts them all, and Ferry's ServiceAccount can do what the daemon does and no more.
import { assertEquals } from "deno-std/assert/mod.js";
import { DAEMON_API_USE } from "../../daemon/k8s/api_use.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";

const DEPLOY = new URL("../../deploy/", import.meta.url).pathname;
const SA = "system:serviceaccount:kube-system:ferry";
const opts = { ignore: !REAL_KUBECONFIG };

async function kubectl(...args: string[]): Promise<{ code: number; out: string }> {
  const res = await new Deno.Command("kubectl", {
    args,
    env: { KUBECONFIG: REAL_KUBECONFIG ?? "" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  return {
    code: res.code,
    out: new TextDecoder().decode(res.stdout) + new TextDecoder().decode(res.stderr),
  };
}

Deno.test({
  name: "kubectl apply --dry-run=server accepts every manifest in deploy/",
  ...opts,
  fn: async () => {
    const files = ["rbac.yaml", "daemonset.yaml", "crds/"].map((f) => ["-f", `${DEPLOY}${f}`])
      .flat();
    const res = await kubectl("apply", "--dry-run=server", ...files);
    assertEquals(res.code, 0, res.out);
  },
});

Deno.test({
  name: "Ferry's ServiceAccount may do what the daemon does and nothing more",
  ...opts,
  fn: async () => {
    const applied = await kubectl("apply", "-f", `${DEPLOY}rbac.yaml`);
    assertEquals(applied.code, 0, applied.out);
    try {
      const canI = async (verb: string, resource: string) =>
        (await kubectl("auth", "can-i", verb, resource, "--all-namespaces", `--as=${SA}`)).out
          .trim().startsWith("yes");
      for (const use of DAEMON_API_USE) {
        for (const verb of use.verbs) {
          assertEquals(await canI(verb, use.resource), true, `${verb} ${use.resource}: ${use.why}`);
        }
      }
      const allowed = new Set(
        DAEMON_API_USE.flatMap((u) => u.verbs.map((v) => `${v} ${u.resource}`)),
      );
      const probes = ["get", "list", "watch", "create", "update", "patch", "delete"].flatMap((
        verb,
      ) =>
        [
          "pods",
          "nodes",
          "secrets",
          "configmaps",
          "events",
          "network-attachment-definitions.k8s.cni.cncf.io",
        ].map((r) => [verb, r])
      );
      for (const [verb, resource] of probes) {
        if (allowed.has(`${verb} ${resource}`)) continue;
        assertEquals(await canI(verb, resource), false, `${verb} ${resource} must be denied`);
      }
    } finally {
      await kubectl("delete", "--ignore-not-found", "-f", `${DEPLOY}rbac.yaml`);
    }
  },
});
