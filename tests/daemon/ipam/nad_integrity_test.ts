import { assertEquals } from "deno-std/assert/mod.js";
import { networkFindings } from "../../../daemon/ipam/nad_integrity.ts";
import type { NetworkBlockObject } from "../../../daemon/ipam/nad_blocks.ts";

const block = (
  name: string,
  network: string,
  cidr: string,
  node: string,
  allocations: [string, string, string?][] = [],
  range = "10.9.0.0/24 10.9.0.1-10.9.0.254",
): NetworkBlockObject => ({
  metadata: { name },
  spec: {
    network,
    range,
    cidr,
    node,
    allocations: allocations.map(([ip, pod, uid]) => ({
      ip,
      podUID: uid ?? `uid-${pod}`,
      containerID: `c-${pod}`,
      ifname: "net1",
      namespace: "default",
      name: pod,
    })),
  },
});
const pod = (name: string, uid = `uid-${name}`) => ({
  namespace: "default",
  name,
  uid,
  node: "n1",
  ips: [],
});
const nodes = [{ name: "n1", podCIDRs: [] }, { name: "n2", podCIDRs: [] }];

Deno.test("clean NAD network spaces give no finding", () => {
  const networkBlocks = [
    block("a", "blue/v4", "10.9.0.0/31", "n1", [["10.9.0.1", "p1"]]),
    block("b", "blue/v4", "10.9.0.2/31", "n2", [["10.9.0.2", "p2"]]),
    // The same addresses in another space are not a duplicate.
    block("c", "red/v4", "10.9.0.0/31", "n2", [["10.9.0.1", "p3"]]),
  ];
  assertEquals(
    networkFindings({ networkBlocks, nodes, pods: ["p1", "p2", "p3"].map((p) => pod(p)) }),
    [],
  );
});

Deno.test("overlapping blocks, an address recorded twice, leaks, dead nodes' blocks and blocks outside their range are each reported", () => {
  const networkBlocks = [
    block("a", "blue/v4", "10.9.0.0/30", "n1", [["10.9.0.1", "p1"], ["10.9.0.2", "gone"]]),
    block("b", "blue/v4", "10.9.0.2/32", "n2", [["10.9.0.2", "p2"]], "static"),
    block("c", "blue/v4", "10.9.0.8/31", "n3", [["10.9.0.8", "p3", "old-uid"]]),
    block("d", "blue/v4", "10.8.0.0/31", "n1"),
  ];
  const found = networkFindings({
    networkBlocks,
    nodes,
    pods: ["p1", "p2", "p3"].map((p) => pod(p)),
  });
  const kinds = found.map((f) => `${f.kind} ${f.ip ?? ""}`.trim()).sort();
  assertEquals(kinds, [
    "duplicate 10.9.0.2",
    "leak 10.9.0.2",
    "leak 10.9.0.8",
    "orphan-block",
    "outside-pools",
    "overlap",
  ]);
  for (const f of found) assertEquals(f.message.startsWith("network blue/v4: "), true, f.message);
});
