// The operator's RBAC in deploy/base/rbac.yaml grants what `kubectl ferry` does (OPERATOR_API_USE)
// and nothing more, with node access only through Ferry's namespace.
import { assertEquals } from "deno-std/assert/mod.js";
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
