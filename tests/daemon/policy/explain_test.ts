// policy-explain's logic (daemon/policy/explain.ts): the sender's egress and the receiver's
// ingress, each with the rule that allows the connection or the reason none does; the view it
// reads (daemon/tools/policy_explain.ts) as the nodes read it.
import { assertEquals } from "deno-std/assert/mod.js";
import type { PolicyPod, PolicyView } from "../../../daemon/policy/compile.ts";
import { explain } from "../../../daemon/policy/explain.ts";
import type { KubeClient } from "../../../daemon/k8s/client.ts";
import { readPolicyView } from "../../../daemon/tools/policy_explain.ts";

const pod = (name: string, app: string, ip: string): PolicyPod => ({
  namespace: "prod",
  name,
  labels: { app },
  ips: [ip],
  hostNetwork: false,
  done: false,
  ports: [{ name: "pg", port: 5432, protocol: "TCP" }],
});
const db = pod("db", "db", "10.1.0.1");
const web = pod("web", "web", "10.1.0.2");
const view: PolicyView = {
  namespaces: new Map([["prod", {}]]),
  pods: [db, web],
  policies: [{
    metadata: { namespace: "prod", name: "db" },
    spec: {
      podSelector: { matchLabels: { app: "db" } },
      ingress: [{
        from: [{ podSelector: { matchLabels: { app: "web" } } }],
        ports: [{ port: "pg" }],
      }],
    },
  }],
};

Deno.test("a connection a rule allows is explained by that rule; one no rule allows is denied with the reason", () => {
  assertEquals(explain(view, web, db, "TCP", 5432), {
    allowed: true,
    egress: { allowed: true, why: "no policy selects prod/web for egress: open" },
    ingress: { allowed: true, why: "ingress[0] of policy prod/db allows it" },
  });
  const denied = explain(view, web, db, "TCP", 80);
  assertEquals(denied.allowed, false);
  assertEquals(
    denied.ingress!.why,
    "prod/db is isolated for ingress and none of its 1 rule(s) allows it",
  );
  assertEquals(explain(view, "192.0.2.9", db, "TCP", 5432).allowed, false, "an outside address");
  assertEquals(explain(view, db, web, "UDP", 53).allowed, true, "web is open");
});

Deno.test("policy-explain reads an invalid policy as the nodes enforce it: isolating, none of its rules", async () => {
  const items: Record<string, unknown[]> = {
    networkpolicies: [{
      metadata: { namespace: "prod", name: "bad" },
      spec: {
        podSelector: { matchLabels: { app: "db" } },
        ingress: [{ from: [{ ipBlock: { cidr: "not-a-cidr" } }] }],
      },
    }],
    namespaces: [{ metadata: { name: "prod" } }],
    pods: [],
  };
  const client = {
    listAll: (rt: { plural: string }) => Promise.resolve({ items: items[rt.plural] }),
  } as unknown as KubeClient;
  const read = await readPolicyView(client);
  assertEquals(read.policies[0].spec, {
    podSelector: { matchLabels: { app: "db" } },
    policyTypes: ["Ingress"],
  });
});
