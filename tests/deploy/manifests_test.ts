// The manifests in deploy/ against a real API server (FERRY_TEST_KUBECONFIG, `deno task test:real`):
// the server accepts them all, and Ferry's ServiceAccount can do what the daemon does and no more.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { DAEMON_API_USE } from "../../daemon/k8s/api_use.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { parse } from "deno-std/yaml/parse.js";
import { type IpPoolObject, parsePool } from "../../daemon/ipam/ip_pools.ts";
import { formatCidr } from "../../daemon/ipam/cidr.ts";

const DEPLOY = new URL("../../deploy/", import.meta.url).pathname;
/** The base the kustomizations of deploy/ build on: the manifests themselves. */
const BASE = `${DEPLOY}base/`;
const SA = "system:serviceaccount:kube-system:ferry";
const opts = { ignore: !REAL_KUBECONFIG };

/** Whether the authorizer allows Ferry's ServiceAccount `verb` on `resource` (`plural.group`). */
async function subjectAccessReview(verb: string, resource: string): Promise<boolean> {
  const dot = resource.indexOf(".");
  const review = {
    apiVersion: "authorization.k8s.io/v1",
    kind: "SubjectAccessReview",
    spec: {
      user: SA,
      groups: [
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
      ],
      resourceAttributes: {
        verb,
        resource: dot < 0 ? resource : resource.slice(0, dot),
        group: dot < 0 ? "" : resource.slice(dot + 1),
      },
    },
  };
  const child = new Deno.Command("kubectl", {
    args: ["create", "-f", "-", "-o", "jsonpath={.status.allowed}"],
    env: { KUBECONFIG: REAL_KUBECONFIG ?? "" },
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(JSON.stringify(review)));
  await writer.close();
  const out = await child.output();
  return new TextDecoder().decode(out.stdout).trim() === "true";
}

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
    const files = ["rbac.yaml", "daemonset.yaml", "crds/"].map((f) => ["-f", `${BASE}${f}`])
      .flat();
    const res = await kubectl("apply", "--dry-run=server", ...files);
    assertEquals(res.code, 0, res.out);
  },
});

Deno.test({
  name:
    "kubectl apply -k deploy/ (its overlays, and the test node's overlay) is accepted by the server, the DaemonSet with its install step",
  ...opts,
  fn: async () => {
    // The CRDs first, as a first apply -k would leave them (the pool needs its CRD established).
    assertEquals((await kubectl("apply", "-f", `${BASE}crds/`)).code, 0);
    for (
      const dir of [
        DEPLOY,
        `${DEPLOY}overlays/vxlan/`,
        `${DEPLOY}overlays/pool/`,
        `${DEPLOY}overlays/privileged/`,
        new URL("../node/overlay/", import.meta.url).pathname,
      ]
    ) {
      const res = await kubectl("apply", "-k", dir, "--dry-run=server");
      assertEquals(res.code, 0, res.out);
      for (
        const kind of ["daemonset.apps/ferry", "configmap/ferry-config", "ippool.ferry.dev/default"]
      ) {
        assert(res.out.includes(kind), `${kind} in:\n${res.out}`);
      }
    }
  },
});

Deno.test({
  name: "Ferry's ServiceAccount may do what the daemon does and nothing more",
  ...opts,
  fn: async () => {
    const applied = await kubectl("apply", "-f", `${BASE}rbac.yaml`);
    assertEquals(applied.code, 0, applied.out);
    try {
      const canI = async (verb: string, resource: string) => {
        const asked = await kubectl(
          "auth",
          "can-i",
          verb,
          resource,
          "--all-namespaces",
          `--as=${SA}`,
        );
        // A resource the server does not serve (another project's CRD, such as whereabouts'
        // IPPools, read when present) is asked of the authorizer directly.
        if (!asked.out.includes("doesn't have a resource type")) {
          return asked.out.trim().startsWith("yes");
        }
        return await subjectAccessReview(verb, resource);
      };
      const named = (u: { group: string; resource: string }) =>
        u.group ? `${u.resource}.${u.group}` : u.resource;
      for (const use of DAEMON_API_USE) {
        for (const verb of use.verbs) {
          assertEquals(await canI(verb, named(use)), true, `${verb} ${named(use)}: ${use.why}`);
        }
      }
      const allowed = new Set(
        DAEMON_API_USE.flatMap((u) => u.verbs.map((v) => `${v} ${named(u)}`)),
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
          "multi-networkpolicies.k8s.cni.cncf.io",
          "networkpolicies.networking.k8s.io",
          "ippools.ferry.dev",
          "ipblocks.ferry.dev",
          "networkblocks.ferry.dev",
          "networkowners.ferry.dev",
          "ippools.whereabouts.cni.cncf.io",
          "leases.coordination.k8s.io",
        ].map((r) => [verb, r])
      );
      for (const [verb, resource] of probes) {
        if (allowed.has(`${verb} ${resource}`)) continue;
        assertEquals(await canI(verb, resource), false, `${verb} ${resource} must be denied`);
      }
    } finally {
      await kubectl("delete", "--ignore-not-found", "-f", `${BASE}rbac.yaml`);
    }
  },
});

Deno.test({
  name:
    "the default IPPool is accepted by the server once the CRDs are in, and the daemon can use it",
  ...opts,
  fn: async () => {
    const crds = await kubectl("apply", "-f", `${BASE}crds/`);
    assertEquals(crds.code, 0, crds.out);
    const established = await kubectl(
      "wait",
      "--for=condition=Established",
      "--timeout=30s",
      "crd/ippools.ferry.dev",
      "crd/ipblocks.ferry.dev",
    );
    assertEquals(established.code, 0, established.out);
    const res = await kubectl("apply", "--dry-run=server", "-f", `${BASE}ippool-default.yaml`);
    assertEquals(res.code, 0, res.out);
    const pool = parse(await Deno.readTextFile(`${BASE}ippool-default.yaml`)) as IpPoolObject;
    const families = parsePool(pool);
    assertEquals(pool.metadata?.name, "default");
    assertEquals(families.map((f) => [formatCidr(f.cidr), f.blockPrefix]), [["10.244.0.0/16", 26]]);
  },
});

Deno.test({
  name:
    "the MultiNetworkPolicy CRD refuses what a schema can check (CIDRs, protocols, ports, endPorts) and takes what upstream takes",
  ...opts,
  fn: async () => {
    const crd = await kubectl("apply", "-f", `${BASE}crds/multi-networkpolicies.yaml`);
    assertEquals(crd.code, 0, crd.out);
    const established = await kubectl(
      "wait",
      "--for=condition=Established",
      "--timeout=30s",
      "crd/multi-networkpolicies.k8s.cni.cncf.io",
    );
    assertEquals(established.code, 0, established.out);
    const dryRun = async (name: string, rule: unknown) => {
      const file = await Deno.makeTempFile({ suffix: ".json" });
      try {
        await Deno.writeTextFile(
          file,
          JSON.stringify({
            apiVersion: "k8s.cni.cncf.io/v1beta1",
            kind: "MultiNetworkPolicy",
            metadata: { name, namespace: "default" },
            spec: { podSelector: {}, ingress: [rule] },
          }),
        );
        return await kubectl("create", "--dry-run=server", "-f", file);
      } finally {
        await Deno.remove(file);
      }
    };
    const refused: [string, unknown][] = [
      ["not-a-cidr", { from: [{ ipBlock: { cidr: "not-a-cidr" } }] }],
      ["no-length", { from: [{ ipBlock: { cidr: "10.0.0.1" } }] }],
      ["injected", { from: [{ ipBlock: { cidr: "10.0.0.0/8 } accept" } }] }],
      ["bad-except", { from: [{ ipBlock: { cidr: "10.0.0.0/8", except: ["x"] } }] }],
      ["port-zero", { ports: [{ port: 0 }] }],
      ["port-high", { ports: [{ port: 70000 }] }],
      ["port-name", { ports: [{ port: "a b;" }] }],
      ["end-port", { ports: [{ port: 80, endPort: 70000 }] }],
      ["protocol", { ports: [{ protocol: "ICMP", port: 80 }] }],
    ];
    for (const [name, rule] of refused) {
      const res = await dryRun(`refused-${name}`, rule);
      assert(res.code !== 0, `${name}: the server took ${JSON.stringify(rule)}: ${res.out}`);
      assert(/Invalid value|Unsupported value/.test(res.out), `${name}: ${res.out}`);
    }
    const taken: [string, unknown][] = [
      ["v4", { from: [{ ipBlock: { cidr: "192.168.0.0/16", except: ["192.168.9.0/24"] } }] }],
      ["v6", { from: [{ ipBlock: { cidr: "fd00:1::/64" } }] }],
      ["ports", { ports: [{ protocol: "UDP", port: 53 }, { port: 30000, endPort: 32767 }] }],
      ["named", { ports: [{ protocol: "SCTP", port: "http-alt" }] }],
    ];
    for (const [name, rule] of taken) {
      const res = await dryRun(`taken-${name}`, rule);
      assertEquals(res.code, 0, `${name}: ${res.out}`);
    }
  },
});
