// The daemon's metrics (daemon/telemetry/metrics.ts): NetworkPolicy counters summed per policy
// rule and per pod, since one policy rule is several nft rules (families, peers, pods).
import { assertEquals } from "deno-std/assert/mod.js";
import { FerryMetrics } from "../../../daemon/telemetry/metrics.ts";

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
