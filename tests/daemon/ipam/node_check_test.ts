// The node's own ipam check after each sweep: findings counted once seen twice in a row, logged
// once, a conflict said on each pod concerned.
import { assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { NodeCheck } from "../../../daemon/ipam/node_check.ts";
import type { Attachment } from "../../../daemon/records/attachment_store.ts";

const record = (id: string, ip: string, extra: Partial<Attachment> = {}): Attachment => ({
  containerId: id,
  ifname: "eth0",
  netns: `/var/run/netns/${id}`,
  network: "ferry",
  result: { cniVersion: "1.1.0", ips: [{ address: `${ip}/24` }] },
  createdAt: new Date().toISOString(),
  pod: { namespace: "default", name: `pod-${id}`, uid: `uid-${id}` },
  ...extra,
} as Attachment);
const owner = (id: string) => ({ containerId: id, ifname: "eth0" });

Deno.test("a finding counts from the second check in a row; a conflict is an Event on each pod, once", () => {
  let records = [record("a", "10.1.0.2"), record("b", "10.1.0.2")];
  let allocations = [
    { ip: "10.1.0.2", owner: owner("a"), adopted: false },
    { ip: "10.1.0.7", owner: owner("inflight"), adopted: false },
  ];
  const events: string[] = [];
  const check = new NodeCheck({
    records: () => records,
    allocations: () => allocations,
    ranges: () => ["10.1.0.0/24"],
    event: (pod, reason) => events.push(`${pod.name} ${reason}`),
    logger: getLogger(["ferry", "test"]),
  });
  assertEquals(check.run(), [], "nothing counted at the first sight");
  // The in-flight ADD got its record meanwhile; the duplicate stays.
  records = [...records, record("inflight", "10.1.0.7")];
  const counted = check.run();
  assertEquals(counted.map((f) => f.kind), ["duplicate"]);
  assertEquals(check.stats().conflicts, 1);
  assertEquals(check.stats().leaked, 0);
  assertEquals(events.sort(), ["pod-a IPAddressConflict", "pod-b IPAddressConflict"]);
  check.run();
  assertEquals(events.length, 2, "said once");
  // Fixed: counted no more.
  records = [record("a", "10.1.0.2"), record("inflight", "10.1.0.7")];
  allocations = [
    { ip: "10.1.0.2", owner: owner("a"), adopted: false },
    { ip: "10.1.0.7", owner: owner("inflight"), adopted: false },
    { ip: "10.1.0.9", owner: owner("adopted"), adopted: true },
  ];
  check.run();
  assertEquals(check.stats(), { checks: 4, conflicts: 0, leaked: 0, findings: [] });
});

Deno.test("an allocation without record, seen twice, is a leaked address", () => {
  const check = new NodeCheck({
    records: () => [],
    allocations: () => [{ ip: "10.1.0.5", owner: owner("gone"), adopted: false }],
    ranges: () => ["10.1.0.0/24"],
    logger: getLogger(["ferry", "test"]),
  });
  check.run();
  check.run();
  assertEquals(check.stats().leaked, 1);
  assertEquals(check.stats().findings, [
    "leak: 10.1.0.5 is allocated to gone/eth0, which has no record here",
  ]);
});
