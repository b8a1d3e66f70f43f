import { assert, assertEquals, assertThrows } from "deno-std/assert/mod.js";
import { CNI_ERROR, CniError } from "../../../lib/cni/errors.ts";
import { formatCidr, formatIp } from "../../../daemon/ipam/cidr.ts";
import type { IpPoolObject } from "../../../daemon/ipam/ip_pools.ts";
import {
  type FerryIpamRequest,
  parseFerryIpam,
  type PoolLookup,
  refuseNetworkPoolOverlap,
  servedFerryIpam,
  staticConfigIndex,
} from "../../../daemon/ipam/nad_ferry_ipam.ts";
import { parseWhereabouts, rangeHolds, spaceKey } from "../../../daemon/ipam/nad_ipam.ts";

const W = "pod ns/p: network ns/n";
const parse = (ipam: Record<string, unknown>) => parseFerryIpam({ type: "ferry", ...ipam }, W);

const POOLS: IpPoolObject[] = [
  {
    metadata: { name: "telco" },
    spec: {
      use: "networks",
      cidrs: ["192.168.50.0/28", "fd00:50::/120"],
      excluded: ["192.168.50.5"],
    },
  },
  { metadata: { name: "default" }, spec: { cidrs: ["10.244.0.0/16"] } },
  {
    metadata: { name: "off" },
    spec: { use: "networks", cidrs: ["192.168.60.0/24"], disabled: true },
  },
  { metadata: { name: "clash" }, spec: { use: "networks", cidrs: ["10.245.0.0/16"] } },
  { metadata: { name: "vlan20" }, spec: { use: "networks", cidrs: ["192.168.20.0/24"] } },
];
const lookup: PoolLookup = {
  pool: (name) => POOLS.find((p) => p.metadata?.name === name),
  podRanges: () => ["10.244.0.0/16", "10.245.3.0/24"],
  all: () => POOLS,
};
const serve = (req: FerryIpamRequest) => servedFerryIpam(req, lookup, W);

/** The refusal's code and message. */
function refusal(fn: () => unknown): { code: number; message: string } {
  const e = assertThrows(fn, CniError);
  return { code: e.code, message: e.message };
}

Deno.test("a NAD naming a dual-stack pool gets one range per family of the pool, in the pool's own space", () => {
  const [config] = serve(parse({ pool: "telco", gateway: "192.168.50.1" }));
  assertEquals(config.ranges.map((r) => formatCidr(r.cidr)), ["192.168.50.0/28", "fd00:50::/120"]);
  const [v4, v6] = config.ranges;
  assertEquals([formatIp(v4.start), formatIp(v4.end)], ["192.168.50.1", "192.168.50.14"]);
  assertEquals(formatIp(v4.gateway!), "192.168.50.1");
  assertEquals(v6.gateway, undefined, "the gateway is of IPv4 only");
  // The pool's excluded address and the gateway are never handed out; the rest is.
  const holds = (a: string) =>
    rangeHolds(v4, { family: 4, value: BigInt(a.split(".")[3]) + 0xc0a83200n });
  assertEquals(
    ["192.168.50.1", "192.168.50.2", "192.168.50.5", "192.168.50.14"].map(holds),
    [false, true, false, true],
  );
  assertEquals(spaceKey(config, v4), "ippool:telco/v4");
  assertEquals(spaceKey(config, v6), "ippool:telco/v6");
});

Deno.test("two pools are two address spaces, one config each, routes and dns kept", () => {
  const configs = serve(
    parse({ pools: ["telco", "vlan20"], routes: [{ dst: "172.16.0.0/16", gw: "192.168.20.1" }] }),
  );
  assertEquals(configs.map((c) => spaceKey(c, c.ranges[0])), [
    "ippool:telco/v4",
    "ippool:vlan20/v4",
  ]);
  assertEquals(configs[1].routes, [{ dst: "172.16.0.0/16", gw: "192.168.20.1" }]);
});

Deno.test("a NAD giving a range is served as whereabouts' range keys, in the space of whereabouts NADs without network_name", () => {
  const [config] = serve(
    parse({ range: "192.168.70.8-192.168.70.12/24", exclude: ["192.168.70.10"] }),
  );
  const [r] = config.ranges;
  assertEquals(formatCidr(r.cidr), "192.168.70.0/24");
  assertEquals([formatIp(r.start), formatIp(r.end)], ["192.168.70.8", "192.168.70.12"]);
  assertEquals(spaceKey(config, r), "v4");
});

Deno.test("a pool that does not exist, is the default network's, is disabled or overlaps Ferry's pod ranges is refused with code 7 naming the key", () => {
  const cases: [Record<string, unknown>, string, string][] = [
    [{ pool: "nope" }, "ipam.pool:", "IPPool nope does not exist"],
    [{ pool: "default" }, "ipam.pool:", "pool of the default network's pods"],
    [{ pool: "off" }, "ipam.pool:", "is disabled"],
    [{ pool: "clash" }, "ipam.pool:", "overlaps Ferry's pod range 10.245.3.0/24"],
    [{ pools: ["telco", "default"] }, "ipam.pools[1]:", "default network"],
    [{ range: "10.244.7.0/24" }, "ipam.range:", "overlaps Ferry's pod range 10.244.0.0/16"],
    [
      { range: "192.168.70.0/24", ipRanges: [{ range: "10.245.3.0/28" }] },
      "ipam.ipRanges[0].range:",
      "overlaps",
    ],
    [{ pool: "vlan20", gateway: "fd00::1" }, "ipam.gateway:", "no pool's family"],
  ];
  for (const [ipam, key, why] of cases) {
    const r = refusal(() => serve(parse(ipam)));
    assertEquals(r.code, CNI_ERROR.INVALID_CONFIG, JSON.stringify(ipam));
    assert(r.message.startsWith(`${W}: ${key}`), `${JSON.stringify(ipam)}: ${r.message}`);
    assert(r.message.includes(why), `${JSON.stringify(ipam)}: ${r.message}`);
  }
});

Deno.test("a bad ferry config is refused with code 7 naming the key", () => {
  const cases: [Record<string, unknown>, string][] = [
    [{}, "ipam.pool:"],
    [{ pool: "telco", range: "192.168.1.0/24" }, "ipam.range:"],
    [{ pool: "telco", pools: ["vlan20"] }, "ipam.pools:"],
    [{ pool: "Not_A_Pool" }, "ipam.pool:"],
    [{ pools: [] }, "ipam.pools:"],
    [{ pools: ["telco", 7] }, "ipam.pools[1]:"],
    [{ pools: ["telco", "telco"] }, "ipam.pools:"],
    [{ pool: "telco", network_name: "x" }, "ipam.network_name:"],
    [{ pool: "telco", gateway: "not-an-ip" }, "ipam.gateway:"],
    [{ pool: "telco", routes: [{ dst: "nope" }] }, "ipam.routes[0].dst:"],
    [{ range: "192.168.1.0/33" }, "ipam.range:"],
  ];
  for (const [ipam, key] of cases) {
    const r = refusal(() => parse(ipam));
    assertEquals(r.code, CNI_ERROR.INVALID_CONFIG, JSON.stringify(ipam));
    assert(r.message.startsWith(`${W}: ${key}`), `${JSON.stringify(ipam)}: ${r.message}`);
  }
  const r = refusal(() => parseFerryIpam({ type: "whereabouts", pool: "telco" }, W));
  assert(r.message.startsWith(`${W}: ipam.type:`), r.message);
});

Deno.test("a range overlapping a pool for networks it does not name is refused with code 7 naming the key and the pool: two spaces would share its addresses", () => {
  const ferryRange = refusal(() => serve(parse({ range: "192.168.50.0/24" })));
  assertEquals(ferryRange.code, CNI_ERROR.INVALID_CONFIG);
  assert(
    ferryRange.message.startsWith(`${W}: ipam.range: 192.168.50.0/24 overlaps IPPool telco`),
    ferryRange.message,
  );
  // A whereabouts config served natively, the overlap in its second range.
  const wa = parseWhereabouts(
    { type: "whereabouts", range: "192.168.70.0/24", ipRanges: [{ range: "192.168.20.128/25" }] },
    W,
  );
  const e = refusal(() => refuseNetworkPoolOverlap(wa.ranges, true, POOLS, W));
  assert(e.message.startsWith(`${W}: ipam.ipRanges[0].range:`), e.message);
  assert(e.message.includes("IPPool vlan20 (192.168.20.0/24)"), e.message);
  // A pool of the default network, or the pool a config names, is no such overlap.
  refuseNetworkPoolOverlap(wa.ranges.slice(0, 1), true, POOLS, W);
  const [ok] = serve(parse({ pool: "vlan20" }));
  assertEquals(formatCidr(ok.ranges[0].cidr), "192.168.20.0/24");
  // Two pools for networks that overlap: a NAD naming either is refused.
  const both = [...POOLS, {
    metadata: { name: "vlan20-half" },
    spec: { use: "networks" as const, cidrs: ["192.168.20.0/25"] },
  }];
  const twice = refusal(() =>
    servedFerryIpam(parse({ pool: "vlan20" }), { ...lookup, all: () => both }, W)
  );
  assert(twice.message.startsWith(`${W}: ipam.pool:`), twice.message);
  assert(twice.message.includes("IPPool vlan20-half"), twice.message);
});

Deno.test("a static address is reserved in the pool whose CIDR holds it, and refused with code 7 when it is a gateway, outside the pools a NAD names, or in a pool for networks a range NAD does not name", () => {
  const two = serve(parse({ pools: ["telco", "vlan20"], gateway: "192.168.20.1" }));
  assertEquals(staticConfigIndex("192.168.50.7/28", two, POOLS, ["telco", "vlan20"], W), 0);
  assertEquals(staticConfigIndex("192.168.20.7/24", two, POOLS, ["telco", "vlan20"], W), 1);
  for (
    const [text, named, why] of [
      ["192.168.20.1/24", ["telco", "vlan20"], "is the network's gateway"],
      ["192.168.70.7/24", ["telco", "vlan20"], "is outside the IPPool the NAD names"],
      ["::ffff:192.168.70.7", ["telco", "vlan20"], "192.168.70.7 is outside"],
      ["192.168.50.5/28", ["telco", "vlan20"], "is not an address IPPool telco hands out"],
      ["192.168.50.15/28", ["telco", "vlan20"], "is not an address IPPool telco hands out"],
    ] as const
  ) {
    const r = refusal(() => staticConfigIndex(text, two, POOLS, [...named], W));
    assertEquals(r.code, CNI_ERROR.INVALID_CONFIG, text);
    assert(r.message.includes(`${W}: ips: static address`) && r.message.includes(why), r.message);
  }
  // A range NAD (ferry or whereabouts): its statics stay out of every pool for networks.
  const ranged = [parseWhereabouts({ type: "whereabouts", range: "192.168.90.0/24" }, W)];
  assertEquals(staticConfigIndex("192.168.91.3/24", ranged, POOLS, undefined, W), 0);
  const r = refusal(() => staticConfigIndex("192.168.20.9/24", ranged, POOLS, undefined, W));
  assertEquals(r.code, CNI_ERROR.INVALID_CONFIG);
  assert(r.message.includes("lies in IPPool vlan20"), r.message);
  // A disabled pool for networks still holds its pods' addresses.
  assert(
    refusal(() => staticConfigIndex("192.168.60.9", ranged, POOLS, undefined, W)).message
      .includes("IPPool off"),
  );
});
