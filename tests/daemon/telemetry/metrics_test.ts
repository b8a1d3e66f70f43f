// The daemon's metrics (daemon/telemetry/metrics.ts): NetworkPolicy counters summed per policy
// rule and per pod, since one policy rule is several nft rules (families, peers, pods).
import { assertEquals } from "deno-std/assert/mod.js";
import { FerryMetrics } from "../../../daemon/telemetry/metrics.ts";
import { spoofedByPod } from "../../../daemon/portsec/spoofing.ts";

Deno.test("the policy counters of one rule, or one pod's drops, are one series each, summed", () => {
  const metrics = new FerryMetrics({
    policyRules: () => [
      { comment: "a/db-in ingress[0]", packets: 3 },
      { comment: "a/db-in ingress[0]", packets: 4 },
      { comment: "a/db-in egress[0]", packets: 1 },
      { comment: "a/db: no ingress rule allows it", packets: 2 },
      { comment: "a/db: no ingress rule allows it", packets: 5 },
    ],
  });
  const lines = metrics.text().split("\n").filter((l) => l.startsWith("ferry_policy_"));
  assertEquals(lines.sort(), [
    'ferry_policy_allowed_packets{policy="a/db-in",rule="egress[0]"} 1',
    'ferry_policy_allowed_packets{policy="a/db-in",rule="ingress[0]"} 7',
    'ferry_policy_denied_packets{pod="a/db",direction="ingress"} 7',
  ]);
});

Deno.test("without detail, the series naming tenants' pods, policies and networks are summed with those labels left out", () => {
  const metrics = new FerryMetrics({
    policyRules: () => [
      { comment: "prb3a/s1-deny ingress[0]", packets: 3 },
      { comment: "prb3b/other ingress[1]", packets: 4 },
      { comment: "prb3a/prb3-s1: no ingress rule allows it", packets: 2 },
      { comment: "prb3b/web: no ingress rule allows it", packets: 5 },
      { comment: "prb3b/web: no egress rule allows it", packets: 1 },
    ],
    attachments: () => ({ ferry: 3, "prb3a/secret-net": 2 }),
  });
  const text = metrics.text(false);
  for (const name of ["prb3a", "prb3b", "s1-deny", "secret-net", "pod=", "policy=", "network="]) {
    assertEquals(text.includes(name), false, `${name} in\n${text}`);
  }
  const lines = text.split("\n").filter((l) => /^ferry_(policy_|attachments)/.test(l));
  assertEquals(lines.sort(), [
    "ferry_attachments 5",
    "ferry_policy_allowed_packets 7",
    'ferry_policy_denied_packets{direction="egress"} 1',
    'ferry_policy_denied_packets{direction="ingress"} 7',
  ]);
  assertEquals(metrics.text().includes('network="prb3a/secret-net"} 2'), true);
});

Deno.test("the ranges of other nodes this node cannot route are a gauge, 0 without a cluster", () => {
  const gauge = (m: FerryMetrics) =>
    m.text().split("\n").filter((l) => l.startsWith("ferry_cluster_unroutable_ranges"));
  assertEquals(gauge(new FerryMetrics({ unroutableRanges: () => 2 })), [
    "ferry_cluster_unroutable_ranges 2",
  ]);
  assertEquals(gauge(new FerryMetrics()), ["ferry_cluster_unroutable_ranges 0"]);
});

Deno.test("what the policy enforcers refused or failed is one series per kind and problem", () => {
  const metrics = new FerryMetrics({
    policyProblems: () => [
      { kind: "MultiNetworkPolicy", problem: "invalid_policies", count: 1 },
      { kind: "MultiNetworkPolicy", problem: "failed_passes", count: 2 },
      { kind: "MultiNetworkPolicy", problem: "dropped_addresses", count: 3 },
    ],
  });
  const lines = metrics.text().split("\n").filter((l) => l.startsWith("ferry_policy_problems"));
  assertEquals(lines.sort(), [
    'ferry_policy_problems{kind="MultiNetworkPolicy",problem="dropped_addresses"} 3',
    'ferry_policy_problems{kind="MultiNetworkPolicy",problem="failed_passes"} 2',
    'ferry_policy_problems{kind="MultiNetworkPolicy",problem="invalid_policies"} 1',
  ]);
});

Deno.test("each policy the size limits refuse is one series of 1, none when none is", () => {
  const refused: string[] = [];
  const metrics = new FerryMetrics({ policyRefused: () => refused });
  const series = () =>
    metrics.text().split("\n").filter((l) => l.startsWith("ferry_policy_refused"));
  assertEquals(series(), []);
  refused.push("t/huge", "t/huge2");
  assertEquals(series(), [
    'ferry_policy_refused{policy="t/huge"} 1',
    'ferry_policy_refused{policy="t/huge2"} 1',
  ]);
});

Deno.test("port security's drops are one series per pod and kind of forgery", () => {
  const metrics = new FerryMetrics({
    spoofed: () =>
      spoofedByPod(
        [
          { port: "fy1", kind: "arp", packets: 2 },
          { port: "fy1", kind: "ipv4", packets: 5 },
          { port: "fy9", kind: "ra", packets: 1 },
        ],
        [{ hostIfname: "fy1", pod: { namespace: "a", name: "evil" } }],
      ),
  });
  const lines = metrics.text().split("\n").filter((l) => l.startsWith("ferry_spoofed_"));
  assertEquals(lines.sort(), [
    'ferry_spoofed_packets{namespace="",pod="fy9",kind="ra"} 1',
    'ferry_spoofed_packets{namespace="a",pod="evil",kind="arp"} 2',
    'ferry_spoofed_packets{namespace="a",pod="evil",kind="ipv4"} 5',
  ]);
});

Deno.test("the node's ipam check of NAD networks is one series per network with detail, summed without", () => {
  const metrics = new FerryMetrics({
    ipamCheck: () => ({
      conflicts: 0,
      leaked: 0,
      networks: [
        { network: "ippool:telco/v4", conflicts: 2, leaked: 1 },
        { network: "v4", conflicts: 1, leaked: 0 },
      ],
    }),
  });
  const lines = (text: string) =>
    text.split("\n").filter((l) => /^ferry_(nad_)?ipam_(conflicts|leaked)/.test(l)).sort();
  assertEquals(lines(metrics.text()), [
    "ferry_ipam_conflicts 0",
    "ferry_ipam_leaked_addresses 0",
    'ferry_nad_ipam_conflicts{network="ippool:telco/v4"} 2',
    'ferry_nad_ipam_conflicts{network="v4"} 1',
    'ferry_nad_ipam_leaked_addresses{network="ippool:telco/v4"} 1',
    'ferry_nad_ipam_leaked_addresses{network="v4"} 0',
  ]);
  assertEquals(lines(metrics.text(false)), [
    "ferry_ipam_conflicts 0",
    "ferry_ipam_leaked_addresses 0",
    "ferry_nad_ipam_conflicts 3",
    "ferry_nad_ipam_leaked_addresses 1",
  ]);
});
