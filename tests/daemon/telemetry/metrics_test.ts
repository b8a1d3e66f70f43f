// The daemon's metrics (daemon/telemetry/metrics.ts): NetworkPolicy counters summed per policy
// rule and per pod, since one policy rule is several nft rules (families, peers, pods).
import { assertEquals } from "deno-std/assert/mod.js";
import { FerryMetrics } from "../../../daemon/telemetry/metrics.ts";
import { spoofedByPod } from "../../../daemon/portsec/portsec_side.ts";

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
