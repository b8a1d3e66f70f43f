// The operator's RBAC in deploy/base/rbac.yaml grants what `kubectl ferry` does (OPERATOR_API_USE)
// and nothing more, with node access only through Ferry's namespace: checked against the file, and
// on a real API server (FERRY_TEST_KUBECONFIG) by asking it as a user bound to the roles.
import { assertEquals } from "deno-std/assert/mod.js";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { parseAll } from "deno-std/yaml/parse.js";
import { OPERATOR_API_USE } from "../../daemon/k8s/api_use.ts";

interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}
interface Doc {
  kind: string;
  metadata: { name: string; namespace?: string };
  rules?: Rule[];
}

const RBAC = new URL("../../deploy/base/rbac.yaml", import.meta.url).pathname;

const grants = (rules: Rule[] = []) =>
  rules.flatMap((r) =>
    r.apiGroups.flatMap((g) => r.resources.flatMap((res) => r.verbs.map((v) => `${v} ${res}.${g}`)))
  ).sort();

Deno.test("the operator's ClusterRoles and Role grant exactly what kubectl ferry does", async () => {
  const docs = parseAll(await Deno.readTextFile(RBAC)) as Doc[];
  const clusterRole = docs.find((d) =>
    d.kind === "ClusterRole" && d.metadata.name === "ferry-operator"
  );
  const role = docs.find((d) => d.kind === "Role" && d.metadata.name === "ferry-operator");
  assertEquals(role?.metadata.namespace, "kube-system", "the exec Role is in Ferry's namespace");
  const used = (scope: string) =>
    OPERATOR_API_USE.filter((u) => u.scope === scope)
      .flatMap((u) => u.verbs.map((v) => `${v} ${u.resource}.${u.group}`)).sort();
  assertEquals(grants(clusterRole?.rules), used("cluster"), "ClusterRole ferry-operator");
  assertEquals(grants(role?.rules), used("ferry-namespace"), "Role ferry-operator");
  const connectivity = docs.find((d) =>
    d.kind === "ClusterRole" && d.metadata.name === "ferry-connectivity-test"
  );
  assertEquals(grants(connectivity?.rules), used("connectivity-test"), "ferry-connectivity-test");
  assertEquals(
    docs.filter((d) => d.kind.endsWith("Binding") && d.metadata.name !== "ferry"),
    [],
    "nothing is bound to anyone by the manifests",
  );
});

async function kubectl(args: string[], stdin?: string): Promise<{ code: number; out: string }> {
  const child = new Deno.Command("kubectl", {
    args,
    env: { KUBECONFIG: REAL_KUBECONFIG ?? "" },
    stdin: stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (stdin !== undefined) {
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(stdin));
    await w.close();
  }
  const res = await child.output();
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: res.code, out: text(res.stdout) + text(res.stderr) };
}

/** Which role grants each scope's uses. */
const ROLE_OF = {
  "cluster": { kind: "ClusterRole", name: "ferry-operator" },
  "ferry-namespace": { kind: "Role", name: "ferry-operator" },
  "connectivity-test": { kind: "ClusterRole", name: "ferry-connectivity-test" },
} as const;

Deno.test({
  name: "a real API server lets a user bound to each operator role do what it is for, and no more",
  ignore: !REAL_KUBECONFIG,
  fn: async () => {
    const docs = parseAll(await Deno.readTextFile(RBAC)) as Doc[];
    const id = crypto.randomUUID().slice(0, 8);
    const scopes = Object.keys(ROLE_OF) as (keyof typeof ROLE_OF)[];
    const userOf = (scope: string) => `ferry-operator-test-${id}-${scope}`;
    // Each role under a name of this run's own, bound to a user of its own.
    const items = scopes.flatMap((scope) => {
      const { kind, name } = ROLE_OF[scope];
      const role = docs.find((d) => d.kind === kind && d.metadata.name === name)!;
      const renamed = { ...role, metadata: { ...role.metadata, name: `${name}-${id}` } };
      const binding = {
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: kind === "Role" ? "RoleBinding" : "ClusterRoleBinding",
        metadata: { name: `${name}-${id}-${scope}`, namespace: role.metadata.namespace },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind, name: `${name}-${id}` },
        subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: userOf(scope) }],
      };
      return [renamed, binding];
    });
    const manifest = JSON.stringify({ apiVersion: "v1", kind: "List", items });
    const applied = await kubectl(["apply", "-f", "-"], manifest);
    assertEquals(applied.code, 0, applied.out);
    try {
      /** `resource` as `plural[.group][/subresource]`. */
      const canI = async (user: string, verb: string, resource: string, namespace: string) => {
        const [res, sub] = resource.split("/");
        const args = ["auth", "can-i", verb, res, ...(sub ? [`--subresource=${sub}`] : [])];
        return (await kubectl([...args, "-n", namespace, `--as=${user}`])).out.trim()
          .startsWith("yes");
      };
      for (const use of OPERATOR_API_USE) {
        const [plural, sub] = use.resource.split("/");
        const resource = `${plural}${use.group ? `.${use.group}` : ""}${sub ? `/${sub}` : ""}`;
        const ns = use.scope === "ferry-namespace" ? "kube-system" : "ferry-connectivity-x";
        for (const verb of use.verbs) {
          assertEquals(
            await canI(userOf(use.scope), verb, resource, ns),
            true,
            `${verb} ${use.resource} as the ${use.scope} user: ${use.why}`,
          );
        }
      }
      const denied: [string, string, string, string][] = [
        ["cluster", "create", "pods/exec", "kube-system"],
        ["cluster", "get", "secrets", "kube-system"],
        ["ferry-namespace", "create", "pods/exec", "default"],
        ["ferry-namespace", "get", "pods/exec", "default"],
        ["ferry-namespace", "get", "secrets", "kube-system"],
        ["ferry-namespace", "delete", "pods", "kube-system"],
        ["ferry-namespace", "update", "daemonsets.apps", "kube-system"],
        ["connectivity-test", "get", "secrets", "default"],
        ["connectivity-test", "delete", "pods", "default"],
        ["connectivity-test", "delete", "networkpolicies.networking.k8s.io", "default"],
      ];
      for (const [scope, verb, resource, ns] of denied) {
        assertEquals(
          await canI(userOf(scope), verb, resource, ns),
          false,
          `${scope}: ${verb} ${resource} in ${ns}`,
        );
      }
    } finally {
      await kubectl(["delete", "--ignore-not-found", "-f", "-"], manifest);
    }
  },
});
