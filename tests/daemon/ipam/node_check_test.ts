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

/** A record of a macvlan NAD attachment whose IPAM is `ipam`, carrying `ips`. */
const nadRecord = (id: string, ips: string[], ipam: Record<string, unknown>): Attachment => {
  const conf = { cniVersion: "1.0.0", name: "ns/blue", type: "macvlan", ipam };
  return {
    containerId: id,
    ifname: "net1",
    netns: `/var/run/netns/${id}`,
    network: "ns/blue",
    driver: "macvlan",
    conf,
    chain: [conf],
    parent: "eth0",
    result: { cniVersion: "1.1.0", ips: ips.map((address) => ({ address: `${address}/24` })) },
    createdAt: new Date().toISOString(),
    pod: { namespace: "ns", name: `pod-${id}`, uid: `uid-${id}` },
  } as Attachment;
};
const nadOwner = (id: string) => ({ containerId: id, ifname: "net1" });
const FERRY = { type: "ferry", pool: "blue" };
const SPACE = "ippool:blue/v4";

Deno.test("NAD networks served natively: a leaked address, an address on two attachments and one outside its block are counted per network, the default network's counts untouched", () => {
  const held = (ip: string, id: string, cidr = "192.168.5.0/28", network = SPACE) => ({
    network,
    cidr,
    ip,
    owner: nadOwner(id),
    adopted: false,
  });
  const records = [
    record("a", "10.1.0.2"),
    nadRecord("a", ["192.168.5.2"], FERRY),
    nadRecord("b", ["192.168.5.3"], FERRY),
    // Recorded with b's address (the allocator gave c another one): one address, two pods.
    nadRecord("c", ["192.168.5.3"], FERRY),
    // host-local is not Ferry's to check: its addresses are no allocation here.
    nadRecord("d", ["172.30.0.9"], { type: "host-local", subnet: "172.30.0.0/24" }),
  ];
  let allocations = [
    held("192.168.5.2", "a"),
    held("192.168.5.3", "b"),
    held("192.168.5.4", "c"),
    held("192.168.5.9", "gone"), // no record: leaked
    held("192.168.5.40", "b", "192.168.5.0/28", "v4"), // outside its block
    held("192.168.9.2", "a", "192.168.9.0/28", "ippool:green/v4"), // a clean space
  ];
  const events: string[] = [];
  const check = new NodeCheck({
    records: () => records,
    allocations: () => [{ ip: "10.1.0.2", owner: owner("a"), adopted: false }],
    ranges: () => ["10.1.0.0/24"],
    networks: () => allocations,
    servedNatively: (conf) => conf.ipam?.type === "ferry",
    event: (pod, reason) => events.push(`${pod.name} ${reason}`),
    logger: getLogger(["ferry", "test"]),
  });
  assertEquals(check.run(), [], "nothing counted at the first sight");
  const counted = check.run().map((f) => f.kind).sort();
  assertEquals(counted, ["duplicate", "leak", "misplaced"]);
  const stats = check.stats();
  assertEquals([stats.conflicts, stats.leaked], [0, 0], "the default network is clean");
  assertEquals(stats.networks, [
    { network: SPACE, conflicts: 1, leaked: 1 },
    { network: "ippool:green/v4", conflicts: 0, leaked: 0 },
    { network: "v4", conflicts: 1, leaked: 0 },
  ]);
  assertEquals(events.sort(), ["pod-b IPAddressConflict", "pod-c IPAddressConflict"]);
  // Mended: the counts go back to 0, the spaces held stay listed.
  records.splice(3, 1, nadRecord("c", ["192.168.5.4"], FERRY));
  allocations = allocations.filter((a) => a.owner.containerId !== "gone" && a.network !== "v4");
  check.run();
  assertEquals(check.stats().networks, [
    { network: SPACE, conflicts: 0, leaked: 0 },
    { network: "ippool:green/v4", conflicts: 0, leaked: 0 },
  ]);
});

Deno.test("NAD networks: a record whose address is not allocated is a conflict; an adopted owner and a whereabouts static address are not findings", () => {
  const WA = {
    type: "whereabouts",
    range: "192.168.6.0/24",
    addresses: [{ address: "10.9.9.9/24" }],
  };
  const check = new NodeCheck({
    records:
      () => [nadRecord("a", ["192.168.6.2", "10.9.9.9"], WA), nadRecord("b", ["192.168.6.7"], WA)],
    allocations: () => [],
    ranges: () => [],
    networks: () => [
      {
        network: "v4",
        cidr: "192.168.6.0/29",
        ip: "192.168.6.2",
        owner: nadOwner("a"),
        adopted: false,
      },
      {
        network: "v4",
        cidr: "192.168.6.0/29",
        ip: "192.168.6.5",
        owner: nadOwner("x"),
        adopted: true,
      },
    ],
    servedNatively: (conf) => conf.ipam?.type === "whereabouts",
    logger: getLogger(["ferry", "test"]),
  });
  check.run();
  assertEquals(check.run().map((f) => `${f.kind} ${f.ip}`), ["mismatch 192.168.6.7"]);
  assertEquals(check.stats().networks, [
    { network: "ns/blue", conflicts: 1, leaked: 0 },
    { network: "v4", conflicts: 0, leaked: 0 },
  ]);
});
