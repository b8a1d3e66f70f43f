// Address integrity from the records alone: each kind of problem `ipam check` and the node's own
// check report, and none on a healthy state.
import { assertEquals } from "deno-std/assert/mod.js";
import {
  type CheckedPod,
  clusterFindings,
  type ClusterState,
  nodeFindings,
} from "../../../daemon/ipam/integrity.ts";
import type { IpBlockObject } from "../../../daemon/ipam/ip_pools.ts";

const pod = (name: string, node: string, ips: string[], extra: Partial<CheckedPod> = {}) => ({
  namespace: "default",
  name,
  uid: `uid-${name}`,
  node,
  ips,
  ...extra,
});
const block = (cidr: string, node: string, allocations: [string, string][]): IpBlockObject => ({
  metadata: { name: cidr.replace(/[./]/g, "-") },
  spec: {
    pool: "default",
    cidr,
    node,
    allocations: allocations.map(([ip, name]) => ({
      ip,
      podUID: `uid-${name}`,
      containerID: `c-${name}`,
      ifname: "eth0",
      namespace: "default",
      name,
    })),
  },
});
const healthy = (): ClusterState => ({
  pools: [{
    metadata: { name: "default" },
    spec: { cidrs: ["10.97.0.0/16"], blockSize: { ipv4: 26 } },
  }],
  blocks: [
    block("10.97.0.0/26", "n1", [["10.97.0.2", "a"]]),
    block("10.97.0.64/26", "n2", [["10.97.0.66", "b"]]),
  ],
  nodes: [{ name: "n1", podCIDRs: [] }, { name: "n2", podCIDRs: [] }],
  pods: [
    pod("a", "n1", ["10.97.0.2"]),
    pod("b", "n2", ["10.97.0.66"]),
    pod("host", "n1", ["192.168.1.10"], { hostNetwork: true }),
    pod("twin-host", "n2", ["192.168.1.10"], { hostNetwork: true }),
  ],
});
const kinds = (s: ClusterState) => clusterFindings(s).map((f) => f.kind).sort();

Deno.test("a healthy cluster has no finding (host-network pods may share the node's address)", () => {
  assertEquals(clusterFindings(healthy()), []);
});

Deno.test("an address on two pods is a duplicate naming both pods and nodes", () => {
  const s = healthy();
  s.pods.push(pod("c", "n2", ["10.97.0.2"]));
  const [f] = clusterFindings(s).filter((x) => x.kind === "duplicate");
  assertEquals(f.ip, "10.97.0.2");
  assertEquals(f.message, "10.97.0.2 is held by 2 pods: default/a on n1, default/c on n2");
});

Deno.test("an allocation of a gone or finished pod is a leak; of a pod carrying another address a mismatch", () => {
  const s = healthy();
  s.blocks[0].spec!.allocations!.push(
    ...block("10.97.0.0/26", "n1", [["10.97.0.3", "gone"]]).spec!.allocations!,
  );
  s.pods.push(pod("done", "n1", []), pod("moved", "n2", ["10.97.0.67"]));
  s.pods.find((p) => p.name === "done")!.terminated = true;
  s.blocks[0].spec!.allocations!.push(
    ...block("x", "n1", [["10.97.0.4", "done"]]).spec!.allocations!,
  );
  s.blocks[1].spec!.allocations!.push(
    ...block("x", "n2", [["10.97.0.68", "moved"]]).spec!.allocations!,
  );
  assertEquals(kinds(s), ["leak", "leak", "mismatch"]);
});

Deno.test("blocks of deleted nodes, overlapping blocks and blocks outside every pool are reported", () => {
  const s = healthy();
  s.blocks.push(block("10.97.0.48/28", "n2", []), block("10.98.0.0/26", "gone", []));
  assertEquals(kinds(s), ["orphan-block", "outside-pools", "overlap"]);
});

Deno.test("an address allocated twice is a duplicate; a pod outside its node's ranges is misplaced", () => {
  const s = healthy();
  s.blocks[1].spec!.allocations!.push(...block("x", "n2", [["10.97.0.2", "a"]]).spec!.allocations!);
  s.pods.push(pod("far", "n2", ["10.97.0.10"]));
  s.blocks[0].spec!.allocations!.push(
    ...block("x", "n1", [["10.97.0.10", "far"]]).spec!.allocations!,
  );
  assertEquals(kinds(s), ["duplicate", "misplaced"]);
});

Deno.test("the node's own check: a recorded address twice, an allocation without record or outside its ranges, a record without allocation", () => {
  const owner = (c: string) => ({ containerId: c, ifname: "eth0" });
  assertEquals(
    nodeFindings({
      records: [{ containerId: "a", ifname: "eth0", ips: ["10.97.0.2"] }],
      allocations: [{ ip: "10.97.0.2", owner: owner("a") }],
      ranges: ["10.97.0.0/26"],
    }),
    [],
  );
  const found = nodeFindings({
    records: [
      { containerId: "a", ifname: "eth0", ips: ["10.97.0.2"] },
      { containerId: "b", ifname: "eth0", ips: ["10.97.0.2"] },
      { containerId: "c", ifname: "eth0", ips: ["10.97.0.9"] },
    ],
    allocations: [
      { ip: "10.97.0.2", owner: owner("a") },
      { ip: "10.97.0.5", owner: owner("orphan") },
      { ip: "10.97.0.6", owner: owner("adopted") },
      { ip: "10.99.0.1", owner: owner("c") },
    ],
    ranges: ["10.97.0.0/26"],
    adopted: (o) => o.containerId === "adopted",
  });
  assertEquals(found.map((f) => `${f.kind} ${f.ip}`).sort(), [
    "duplicate 10.97.0.2",
    "leak 10.97.0.5",
    "mismatch 10.97.0.9",
    "overlap 10.99.0.1",
  ]);
});
