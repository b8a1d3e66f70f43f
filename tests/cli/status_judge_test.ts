import { assert, assertEquals } from "deno-std/assert/mod.js";
import type { Node, Pod } from "kubernetes-types/core/v1.d.ts";
import { type NodeFacts, nodeStatus } from "../../cli/status.ts";
import { portSecurityText, rangeLine, statusText, summaryLine } from "../../cli/status_render.ts";

const node: Node = { metadata: { name: "n1" }, spec: { podCIDRs: ["10.244.0.0/24"] } };
const readyPod: Pod = {
  metadata: { name: "ferry-abc", namespace: "kube-system" },
  spec: { nodeName: "n1", containers: [{ name: "ferry", image: "ferry:1" }] },
  status: { phase: "Running", conditions: [{ type: "Ready", status: "True" }] },
};
const stats = (over: Record<string, unknown> = {}) => ({
  network: { ranges: ["10.244.0.0/24"] },
  cluster: { routes: 2, unroutable: [], ipamMode: "kubernetes" },
  policy: { policies: 1, isolatedPods: 1, writes: 3, failures: 0 },
  ...over,
});
const facts = (over: Partial<NodeFacts> = {}): NodeFacts => ({
  node,
  pod: readyPod,
  report: { stats: stats(), attachments: 3 },
  routing: "host-gw",
  otherRanges: 2,
  podAddresses: ["10.244.0.5", "10.244.0.6", "10.245.0.9"],
  warnings: [],
  now: 0,
  ...over,
});

Deno.test("a node with its routes, table and pod in order is healthy, its range's use counted", () => {
  const s = nodeStatus(facts());
  assertEquals(s.problems, []);
  assertEquals(s.healthy, true);
  assertEquals(s.ranges, [{ cidr: "10.244.0.0/24", used: 2, size: 256 }]);
  assertEquals(s.routes, { inPlace: 2, expected: 2, unroutable: [] });
  assertEquals(s.podsPlugged, 3);
});

Deno.test("a node missing a route to another node's pods is unhealthy, saying how many are in place", () => {
  const s = nodeStatus(
    facts({ report: { stats: stats({ cluster: { routes: 1, unroutable: [] } }), attachments: 0 } }),
  );
  assertEquals(s.problems, ["1 of 2 routes to other nodes' pods in place"]);
});

Deno.test("routing none expects no routes to other nodes", () => {
  const s = nodeStatus(
    facts({
      routing: "none",
      report: { stats: stats({ cluster: { routes: 0, unroutable: [] } }), attachments: 0 },
    }),
  );
  assertEquals(s.problems, []);
});

Deno.test("failed policy table writes, a failed route sync and an unopened network are each named", () => {
  const s = nodeStatus(facts({
    report: {
      stats: stats({
        network: { waitingFor: "the node's podCIDRs", ranges: [] },
        cluster: { routes: 2, unroutable: [], lastError: "nft: table busy" },
        policy: { policies: 1, isolatedPods: 1, writes: 3, failures: 2 },
      }),
      attachments: 0,
    },
  }));
  assertEquals(s.problems, [
    "the default network is not open: the node's podCIDRs",
    "routes and masquerade: nft: table busy",
    "2 NetworkPolicy table writes failed",
  ]);
  assertEquals(s.lastError, "nft: table busy");
});

Deno.test("a node without a Ferry pod, or with one not ready, is unhealthy", () => {
  assertEquals(nodeStatus(facts({ pod: undefined, report: undefined })).problems, [
    "no Ferry pod on this node",
  ]);
  const notReady = { ...readyPod, status: { phase: "Running", conditions: [] } };
  assertEquals(nodeStatus(facts({ pod: notReady })).problems, ["Ferry pod ferry-abc is not ready"]);
});

Deno.test("the summary line names each unhealthy node with its first problem", () => {
  const ok = nodeStatus(facts());
  const bad = nodeStatus(facts({ node: { metadata: { name: "n2" } }, report: { error: "boom" } }));
  assertEquals(
    summaryLine({ nodes: [ok, bad], unhealthy: ["n2"] }),
    "2 nodes, 1 healthy, 1 unhealthy: n2 (cannot read the daemon's /v1/stats: boom)",
  );
});

Deno.test("a range's bar fills with its use", () => {
  assertEquals(
    rangeLine({ cidr: "10.244.0.0/24", used: 64, size: 256 }, 8),
    "10.244.0.0/24      [##......] 64 used, 192 free",
  );
});

Deno.test("a range the kernel refused is a problem named with node, range, next hop and reason; one unroutable by design is shown, not a problem", () => {
  const s = nodeStatus(facts({
    otherRanges: 3,
    report: {
      stats: stats({
        cluster: {
          routes: 1,
          unroutable: [
            {
              node: "n4",
              dst: "10.244.4.0/24",
              via: "198.18.9.11",
              reason: "ENETUNREACH: network is unreachable",
              refused: true,
            },
            { node: "n5", dst: "fd00:5::/64", reason: "IPv6 is not carried by the overlay" },
          ],
          ipamMode: "kubernetes",
        },
      }),
      attachments: 3,
    },
  }));
  assertEquals(s.routes?.unroutable, [
    "n4 10.244.4.0/24 via 198.18.9.11: ENETUNREACH: network is unreachable",
    "n5 fd00:5::/64: IPv6 is not carried by the overlay",
  ]);
  assertEquals(s.problems, [
    "ranges it cannot route to: n4 10.244.4.0/24 via 198.18.9.11: ENETUNREACH: network is unreachable",
  ]);
  assertEquals(s.healthy, false);
});

Deno.test("a failed policy table write followed by a successful one is over: the node is healthy again", () => {
  const s = nodeStatus(facts({
    now: Date.parse("2026-01-01T12:00:30Z"),
    report: {
      stats: stats({
        policy: {
          policies: 1,
          isolatedPods: 1,
          writes: 4,
          failures: 1,
          lastFailureAt: "2026-01-01T12:00:00Z",
          lastWriteAt: "2026-01-01T12:00:01Z",
        },
      }),
      attachments: 0,
    },
  }));
  assertEquals(s.problems, []);
  assertEquals(s.healthy, true);
  assertEquals(s.policy?.lastWriteSecondsAgo, 29);
  assertEquals(s.policy?.lastFailureSecondsAgo, 30);
});

Deno.test("a node whose last policy table write failed is unhealthy, saying when", () => {
  const s = nodeStatus(facts({
    now: Date.parse("2026-01-01T12:00:30Z"),
    report: {
      stats: stats({
        policy: {
          policies: 1,
          isolatedPods: 1,
          writes: 4,
          failures: 2,
          lastWriteAt: "2026-01-01T12:00:00Z",
          lastFailureAt: "2026-01-01T12:00:18Z",
        },
      }),
      attachments: 0,
    },
  }));
  assertEquals(s.problems, [
    "the last NetworkPolicy table write failed (at 2026-01-01T12:00:18Z; 2 failed in all)",
  ]);
  const text = statusText({ nodes: [s], unhealthy: ["n1"] });
  assert(
    text.includes(
      "policy   1 policies, 1 isolated pods, 4 table writes, 2 failed, last write 30s ago, last failure 12s ago\n",
    ),
    text,
  );
});

Deno.test("port security's counters are shown per node: ports guarded and frames dropped by kind, or off", () => {
  const s = nodeStatus(facts({
    report: {
      stats: stats({
        portSecurity: { enabled: true, guardedPorts: 3, dropped: { ipv4: 3, arp: 2, ipv6: 0 } },
      }),
      attachments: 3,
    },
  }));
  assertEquals(s.portSecurity, {
    enabled: true,
    guardedPorts: 3,
    dropped: { ipv4: 3, arp: 2, ipv6: 0 },
  });
  assert(
    statusText({ nodes: [s], unhealthy: [] }).includes(
      "  portsec  on, 3 ports guarded, dropped arp 2, ipv4 3\n",
    ),
    statusText({ nodes: [s], unhealthy: [] }),
  );
  assertEquals(
    portSecurityText({ enabled: true, guardedPorts: 1, dropped: {} }),
    "on, 1 ports guarded, none dropped",
  );
  const off = nodeStatus(facts({
    report: { stats: stats({ portSecurity: { enabled: false } }), attachments: 0 },
  }));
  assertEquals(off.portSecurity, { enabled: false, guardedPorts: undefined, dropped: {} });
  assertEquals(portSecurityText(off.portSecurity!), "off");
});
