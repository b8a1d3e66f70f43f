// What makes a policy spec enforceable (daemon/policy/policy_check.ts): every field a tenant's
// MultiNetworkPolicy may carry that the CRD schema lets through is checked, and an invalid policy
// is enforced fail-closed (isolating what it selects, none of its rules).
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { checkedPolicy, failClosed, specProblems } from "../../../daemon/policy/policy_check.ts";

Deno.test("valid specs have no problems, the upstream examples among them", () => {
  for (
    const spec of [
      {},
      { podSelector: {} },
      {
        podSelector: { matchLabels: { role: "db" } },
        policyTypes: ["Ingress", "Egress"],
        ingress: [{
          from: [
            { ipBlock: { cidr: "172.17.0.0/16", except: ["172.17.1.0/24"] } },
            { namespaceSelector: { matchLabels: { project: "myproject" } } },
            {
              podSelector: { matchExpressions: [{ key: "role", operator: "In", values: ["fe"] }] },
            },
          ],
          ports: [{ protocol: "TCP", port: 6379 }],
        }],
        egress: [{
          to: [{ ipBlock: { cidr: "fd00::/8" } }],
          ports: [{ protocol: "TCP", port: 5978 }, { port: 32000, endPort: 32768 }, {
            port: "http",
          }],
        }],
      },
      { ingress: [{}], egress: [{ ports: [{ protocol: "UDP" }] }] },
    ]
  ) {
    assertEquals(specProblems(spec), [], JSON.stringify(spec));
  }
});

Deno.test("every field the CRD schema lets through is checked: CIDRs, excepts, ports, names, protocols, selectors, types", () => {
  const cases: [unknown, string][] = [
    [{ ingress: [{ from: [{ ipBlock: { cidr: "not-a-cidr" } }] }] }, "is not a CIDR"],
    [{ ingress: [{ from: [{ ipBlock: { cidr: "10.0.0.1" } }] }] }, "is not a CIDR"],
    [{ ingress: [{ from: [{ ipBlock: { cidr: "10.0.0.0/33" } }] }] }, "is not a CIDR"],
    [
      { egress: [{ to: [{ ipBlock: { cidr: "10.0.0.0/8", except: ["11.0.0.0/16"] } }] }] },
      "is not inside",
    ],
    [{ egress: [{ to: [{ ipBlock: { cidr: "10.0.0.0/8", except: ["x }"] } }] }] }, "is not a CIDR"],
    [{ ingress: [{ ports: [{ port: 0 }] }] }, "is not 1-65535"],
    [{ ingress: [{ ports: [{ port: 70000 }] }] }, "is not 1-65535"],
    [{ ingress: [{ ports: [{ port: 1.5 }] }] }, "is not 1-65535"],
    [{ ingress: [{ ports: [{ port: "a b; accept" }] }] }, "neither a port number nor a port name"],
    [{ ingress: [{ ports: [{ port: 80, endPort: 70 }] }] }, "is not from the port to 65535"],
    [{ ingress: [{ ports: [{ port: "http", endPort: 90 }] }] }, "needs a numeric port"],
    [{ ingress: [{ ports: [{ protocol: "ICMP", port: 1 }] }] }, "is not TCP, UDP or SCTP"],
    [{ podSelector: { matchLabels: { app: 1 } } }, "is not a label value"],
    [
      { podSelector: { matchExpressions: [{ key: "a", operator: "Is", values: ["x"] }] } },
      "operator",
    ],
    [{ podSelector: { matchExpressions: [{ key: "a", operator: "In" }] } }, "In needs values"],
    [
      { ingress: [{ from: [{ ipBlock: { cidr: "10.0.0.0/8" }, podSelector: {} }] }] },
      "with selectors",
    ],
    [{ ingress: [{ from: [{}] }] }, "names no peer"],
    [{ policyTypes: ["Ingres"] }, "policyTypes"],
    [{ ingress: { from: [] } }, "ingress is not a list"],
    ["spec", "not an object"],
  ];
  for (const [spec, expected] of cases) {
    const problems = specProblems(spec);
    assert(
      problems.some((p) => p.includes(expected)),
      `${JSON.stringify(spec)}: wanted a problem with "${expected}", got ${
        JSON.stringify(problems)
      }`,
    );
  }
});

Deno.test("an invalid policy is enforced fail-closed: what it selects isolated for its types, none of its rules", () => {
  const spec = {
    podSelector: { matchLabels: { app: "db" } },
    ingress: [{ from: [{ ipBlock: { cidr: "not-a-cidr" } }] }],
  };
  assertEquals(failClosed(spec), {
    podSelector: { matchLabels: { app: "db" } },
    policyTypes: ["Ingress"],
  });
  assertEquals(failClosed({ ...spec, egress: [{ ports: [{ port: 0 }] }] }).policyTypes, [
    "Ingress",
    "Egress",
  ]);
  // Neither its selector nor its types readable: every pod of its namespace, both ways.
  assertEquals(
    failClosed({ podSelector: { matchLabels: { app: 7 } }, policyTypes: ["Sideways"] }),
    { podSelector: {}, policyTypes: ["Ingress", "Egress"] },
  );
  const { policy, problems } = checkedPolicy({ metadata: { name: "p" }, spec });
  assertEquals(problems.length, 1);
  assertEquals(policy, { metadata: { name: "p" }, spec: failClosed(spec) });
  const valid = { metadata: { name: "q" }, spec: { podSelector: {} } };
  assertEquals(checkedPolicy(valid), { policy: valid, problems: [] });
});
