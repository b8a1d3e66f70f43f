// NetworkPolicy semantics (daemon/policy/compile.ts, selector.ts): a table of policies × peers ×
// ports, each case naming the rule of the API it proves.
import { assertEquals } from "deno-std/assert/mod.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import {
  compilePolicies,
  ipInBlock,
  type PolicyPod,
  policyTypes,
  type PolicyView,
} from "../../../daemon/policy/compile.ts";
import { selects } from "../../../daemon/policy/selector.ts";

function pod(
  ns: string,
  name: string,
  labels: Record<string, string>,
  ip: string,
  extra: Partial<PolicyPod> = {},
): PolicyPod {
  return {
    namespace: ns,
    name,
    labels,
    ips: [ip],
    hostNetwork: false,
    done: false,
    ports: [],
    ...extra,
  };
}

const db = pod("prod", "db", { app: "db" }, "10.1.0.1", {
  ports: [{ name: "pg", port: 5432, protocol: "TCP" }],
});
const web = pod("prod", "web", { app: "web" }, "10.1.0.2", {
  ports: [{ name: "http", port: 8080, protocol: "TCP" }],
});
const dev = pod("dev", "web", { app: "web" }, "10.2.0.2", {
  ports: [{ name: "http", port: 9090, protocol: "TCP" }],
});
const host = pod("prod", "agent", { app: "web" }, "192.168.0.5", { hostNetwork: true });
const done = pod("prod", "job", { app: "web" }, "10.1.0.9", { done: true });

function view(...policies: NetworkPolicy[]): PolicyView {
  return {
    policies,
    namespaces: new Map([["prod", { env: "prod" }], ["dev", { env: "dev" }]]),
    pods: [db, web, dev, host, done],
  };
}

const np = (spec: NetworkPolicy["spec"], name = "p", ns = "prod"): NetworkPolicy => ({
  metadata: { name, namespace: ns },
  spec,
});

/** Ingress rules of db under `policies` (undefined: db not isolated for ingress). */
function dbIngress(...policies: NetworkPolicy[]) {
  return compilePolicies(view(...policies), [db], ipInBlock)[0]?.ingress;
}

Deno.test("label selectors: matchLabels and every matchExpressions operator; the empty selector selects all", () => {
  const l = { app: "db", tier: "data" };
  assertEquals(selects({}, {}), true);
  assertEquals(selects({ matchLabels: { app: "db" } }, l), true);
  assertEquals(selects({ matchLabels: { app: "web" } }, l), false);
  assertEquals(
    selects({ matchExpressions: [{ key: "app", operator: "In", values: ["db", "x"] }] }, l),
    true,
  );
  assertEquals(
    selects({ matchExpressions: [{ key: "app", operator: "NotIn", values: ["db"] }] }, l),
    false,
  );
  assertEquals(
    selects({ matchExpressions: [{ key: "zone", operator: "NotIn", values: ["a"] }] }, l),
    true,
  );
  assertEquals(selects({ matchExpressions: [{ key: "tier", operator: "Exists" }] }, l), true);
  assertEquals(
    selects({ matchExpressions: [{ key: "tier", operator: "DoesNotExist" }] }, l),
    false,
  );
  assertEquals(selects({ matchExpressions: [{ key: "tier", operator: "Bogus" }] }, l), false);
});

Deno.test("policyTypes: Ingress always implied, Egress implied only by egress rules", () => {
  assertEquals(policyTypes(np({ podSelector: {} })), { ingress: true, egress: false });
  assertEquals(policyTypes(np({ podSelector: {}, egress: [{}] })), { ingress: true, egress: true });
  assertEquals(policyTypes(np({ podSelector: {}, policyTypes: ["Egress"] })), {
    ingress: false,
    egress: true,
  });
});

Deno.test("a pod no policy selects is open; one a policy selects with no rules receives nothing", () => {
  assertEquals(dbIngress(), undefined);
  assertEquals(
    dbIngress(np({ podSelector: { matchLabels: { app: "web" } } })),
    undefined,
    "selects web only",
  );
  assertEquals(
    dbIngress(np({ podSelector: {} }, "p", "dev")),
    undefined,
    "another namespace's policy",
  );
  assertEquals(dbIngress(np({ podSelector: {} })), [], "deny all");
  assertEquals(dbIngress(np({ podSelector: {}, ingress: [] })), []);
});

Deno.test("a rule with no peers allows every peer, with no ports every port", () => {
  assertEquals(dbIngress(np({ podSelector: {}, ingress: [{}] })), [
    { policy: "prod/p", rule: 0, peers: "any", ports: "any" },
  ]);
  assertEquals(dbIngress(np({ podSelector: {}, ingress: [{ from: [] }] }))![0].peers, "any");
});

Deno.test("peers: podSelector alone is the policy's namespace, namespaceSelector alone every pod there, both together the intersection; host-network and finished pods are never peers", () => {
  const peersOf = (
    from: NonNullable<NonNullable<NetworkPolicy["spec"]>["ingress"]>[number]["from"],
  ) =>
    dbIngress(np({ podSelector: { matchLabels: { app: "db" } }, ingress: [{ from }] }))![0].peers;
  assertEquals(peersOf([{ podSelector: { matchLabels: { app: "web" } } }]), {
    ips: ["10.1.0.2"],
    blocks: [],
  });
  assertEquals(peersOf([{ namespaceSelector: { matchLabels: { env: "dev" } } }]), {
    ips: ["10.2.0.2"],
    blocks: [],
  });
  assertEquals(peersOf([{ namespaceSelector: {}, podSelector: { matchLabels: { app: "web" } } }]), {
    ips: ["10.1.0.2", "10.2.0.2"],
    blocks: [],
  });
  assertEquals(
    peersOf([{ namespaceSelector: { matchLabels: { env: "none" } }, podSelector: {} }]),
    { ips: [], blocks: [] },
  );
});

Deno.test("ports: numbers, ranges (endPort), protocols, and names resolved on the receiving pod", () => {
  const ports = dbIngress(np({
    podSelector: {},
    ingress: [{
      ports: [
        { port: 5432 },
        { protocol: "UDP", port: 1000, endPort: 1010 },
        { protocol: "SCTP" },
        { port: "pg" },
        { port: "http" },
      ],
    }],
  }))![0].ports;
  assertEquals(ports, [
    { protocol: "TCP", port: 5432 },
    { protocol: "UDP", port: 1000, endPort: 1010 },
    { protocol: "SCTP" },
    { protocol: "TCP", port: 5432 }, // "pg" is db's 5432; "http" is no port of db: nothing
  ]);
  assertEquals(
    dbIngress(np({ podSelector: {}, ingress: [{ ports: [{ port: "http" }] }] })),
    [],
    "a rule whose only port resolves to nothing allows nothing",
  );
});

Deno.test("egress to a named port: each peer's own number for the name", () => {
  const [v] = compilePolicies(
    view(np({
      podSelector: { matchLabels: { app: "db" } },
      egress: [{
        to: [{ namespaceSelector: {}, podSelector: { matchLabels: { app: "web" } } }],
        ports: [{ port: "http" }],
      }],
    })),
    [db],
    ipInBlock,
  );
  assertEquals(v.ingress, [], "Ingress implied too");
  assertEquals(v.egress![0].triples, [
    { ip: "10.1.0.2", protocol: "TCP", port: 8080 },
    { ip: "10.2.0.2", protocol: "TCP", port: 9090 },
  ]);
});

Deno.test("ipBlock: a CIDR less its excepts, of either family", () => {
  assertEquals(ipInBlock("10.1.2.3", { cidr: "10.0.0.0/8", except: ["10.1.0.0/16"] }), false);
  assertEquals(ipInBlock("10.2.2.3", { cidr: "10.0.0.0/8", except: ["10.1.0.0/16"] }), true);
  assertEquals(ipInBlock("fd00::1", { cidr: "10.0.0.0/8", except: [] }), false);
  assertEquals(ipInBlock("fd00::1", { cidr: "fd00::/64", except: [] }), true);
  assertEquals(
    dbIngress(np({
      podSelector: {},
      ingress: [{ from: [{ ipBlock: { cidr: "10.0.0.0/8", except: ["10.1.0.0/16"] } }] }],
    }))![0].peers,
    { ips: [], blocks: [{ cidr: "10.0.0.0/8", except: ["10.1.0.0/16"] }] },
  );
});

Deno.test("policies add up: every selecting policy's rules allow", () => {
  const rules = dbIngress(
    np({ podSelector: {}, ingress: [{ ports: [{ port: 1 }] }] }, "a"),
    np({ podSelector: { matchLabels: { app: "db" } }, ingress: [{ ports: [{ port: 2 }] }] }, "b"),
  )!;
  assertEquals(rules.map((r) => [r.policy, r.ports]), [
    ["prod/a", [{ protocol: "TCP", port: 1 }]],
    ["prod/b", [{ protocol: "TCP", port: 2 }]],
  ]);
});

Deno.test("host-network pods are never isolated", () => {
  assertEquals(compilePolicies(view(np({ podSelector: {} })), [host], ipInBlock), []);
});
