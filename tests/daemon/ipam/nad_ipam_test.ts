import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import { CNI_ERROR, CniError } from "../../../lib/cni/errors.ts";
import { formatCidr, formatIp, parseIp } from "../../../daemon/ipam/cidr.ts";
import {
  MAX_RANGES,
  type NadRange,
  parseWhereabouts,
  rangeHolds,
  rangeSize,
  spaceKey,
} from "../../../daemon/ipam/nad_ipam.ts";

const W = "pod ns/p: NetworkAttachmentDefinition ns/n";
const parse = (ipam: Record<string, unknown>) =>
  parseWhereabouts({ type: "whereabouts", ...ipam }, W);

/** A range as plain text: `cidr start-end` and its exclusions. */
function show(r: NadRange) {
  const fam = r.cidr.network.family;
  const t = (v: bigint) => formatIp({ family: fam, value: v });
  return {
    cidr: formatCidr(r.cidr),
    span: `${formatIp(r.start)}-${formatIp(r.end)}`,
    excluded: r.excluded.map((x) => `${t(x.start)}-${t(x.end)}`),
    gateway: r.gateway && formatIp(r.gateway),
  };
}

/** Every address the range hands out, as text (small ranges only). */
function addresses(r: NadRange): string[] {
  const out: string[] = [];
  for (let v = r.start.value; v <= r.end.value; v++) {
    const a = { family: r.cidr.network.family, value: v };
    if (rangeHolds(r, a)) out.push(formatIp(a));
  }
  return out;
}

Deno.test("a CIDR range hands out its second address to its last but one, host bits dropped", () => {
  const c = parse({ range: "192.168.2.225/28" });
  assertEquals(c.ranges.map(show), [{
    cidr: "192.168.2.224/28",
    span: "192.168.2.225-192.168.2.238",
    excluded: [],
    gateway: undefined,
  }]);
  assertEquals(rangeSize(c.ranges[0]), 14n);
  assertEquals(c.networkName, "");
  assertEquals(c.overlapping, true);
});

Deno.test("an IPv6 range leaves out the network and the all-ones address as whereabouts does", () => {
  // whereabouts' README example: its gateway lies outside the /116, and whereabouts takes it.
  const [r] = parse({ range: "2001::0/116", gateway: "2001::f:1" }).ranges;
  assertEquals(show(r), {
    cidr: "2001::/116",
    span: "2001::1-2001::ffe",
    excluded: [],
    gateway: "2001::f:1",
  });
  const [inside] = parse({ range: "2001::0/116", gateway: "2001::1" }).ranges;
  assertEquals(show(inside).excluded, ["2001::1-2001::1"]);
  assertEquals(rangeHolds(inside, parseIp("2001::1")), false, "the gateway is never handed out");
});

Deno.test("the start-end form sets both ends and wins over range_start and range_end", () => {
  const [r] = parse({
    range: "192.168.2.225-192.168.2.230/28",
    range_start: "192.168.2.226",
    range_end: "192.168.2.237",
  }).ranges;
  assertEquals(show(r).span, "192.168.2.225-192.168.2.230");
  assertEquals(show(r).cidr, "192.168.2.224/28");
});

Deno.test("the start-end form from the network to the all-ones address serves the usable addresses, as whereabouts does", () => {
  // whereabouts v0.9.0 ignores a bound its range cannot hand out (seen with the real plugin in
  // whereabouts_compat_test.ts): these NADs work there, so they work here.
  const [whole] = parse({ range: "10.0.0.0-10.0.0.7/29" }).ranges;
  assertEquals(addresses(whole), [
    "10.0.0.1",
    "10.0.0.2",
    "10.0.0.3",
    "10.0.0.4",
    "10.0.0.5",
    "10.0.0.6",
  ]);
  const [tail] = parse({ range: "10.0.0.4-10.0.0.7/29" }).ranges;
  assertEquals(addresses(tail), ["10.0.0.4", "10.0.0.5", "10.0.0.6"]);
  const [head] = parse({ range: "fd00::-fd00::3/125" }).ranges;
  assertEquals(show(head).span, "fd00::1-fd00::3");
});

Deno.test("range_start and range_end narrow the range", () => {
  const [r] = parse({ range: "10.10.0.0/24", range_start: "10.10.0.100", range_end: "10.10.0.102" })
    .ranges;
  assertEquals(addresses(r), ["10.10.0.100", "10.10.0.101", "10.10.0.102"]);
});

Deno.test("exclude takes out CIDRs and single addresses, the gateway too", () => {
  const [r] = parse({
    range: "192.168.2.225/28",
    exclude: ["192.168.2.229/30", "192.168.2.236", "192.168.2.230/32"],
    gateway: "192.168.2.225",
  }).ranges;
  assertEquals(addresses(r), [
    "192.168.2.226",
    "192.168.2.227",
    "192.168.2.232",
    "192.168.2.233",
    "192.168.2.234",
    "192.168.2.235",
    "192.168.2.237",
    "192.168.2.238",
  ]);
  assertEquals(show(r).excluded, [
    "192.168.2.225-192.168.2.225",
    "192.168.2.228-192.168.2.231",
    "192.168.2.236-192.168.2.236",
  ]);
});

Deno.test("ipRanges add ranges after the top-level one, each with its own keys (dual stack)", () => {
  const c = parse({
    range: "abcd::1/64",
    ipRanges: [
      { range: "192.168.10.1/24", exclude: ["192.168.10.0/30"] },
      { range: "176.168.10.1/16", range_start: "176.168.0.9" },
    ],
  });
  assertEquals(c.ranges.map((r) => show(r).cidr), [
    "abcd::/64",
    "192.168.10.0/24",
    "176.168.0.0/16",
  ]);
  assertEquals(formatIp(c.ranges[1].start), "192.168.10.1");
  assertEquals(rangeHolds(c.ranges[1], parseIp("192.168.10.3")), false);
  assertEquals(rangeHolds(c.ranges[1], parseIp("192.168.10.4")), true);
  assertEquals(formatIp(c.ranges[2].start), "176.168.0.9");
});

Deno.test("IPv4-mapped IPv6 addresses are read as IPv4", () => {
  const [r] = parse({
    range: "::ffff:10.0.0.0/120",
    range_start: "::ffff:10.0.0.10",
    exclude: ["::ffff:10.0.0.12/127"],
  }).ranges;
  assertEquals(show(r), {
    cidr: "10.0.0.0/24",
    span: "10.0.0.10-10.0.0.254",
    excluded: ["10.0.0.12-10.0.0.13"],
    gateway: undefined,
  });
});

Deno.test("routes, dns and static addresses are kept, normalised", () => {
  const c = parse({
    range: "10.1.0.0/24",
    routes: [{ dst: "0.0.0.0/0" }, { dst: "10.9.0.1/16", gw: "10.1.0.1" }],
    dns: { nameservers: ["10.1.0.53"] },
    addresses: [{ address: "10.2.0.7/24", gateway: "10.2.0.1" }],
  });
  assertEquals(c.routes, [{ dst: "0.0.0.0/0" }, { dst: "10.9.0.0/16", gw: "10.1.0.1" }]);
  assertEquals(c.dns, { nameservers: ["10.1.0.53"] });
  assertEquals(c.addresses, [{ address: "10.2.0.7/24", gateway: "10.2.0.1" }]);
});

Deno.test("whereabouts' own storage and logging keys are accepted without effect", () => {
  const c = parse({
    range: "10.1.0.0/24",
    kubernetes: { kubeconfig: "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig" },
    log_file: "/tmp/whereabouts.log",
    log_level: "debug",
    leader_lease_duration: 1500,
    node_slice_size: "/26",
  });
  assertEquals(c.ranges.length, 1);
});

Deno.test("network_name and enable_overlapping_ranges decide the address space", () => {
  const a = parse({ range: "10.1.0.0/24" });
  const b = parse({ range: "10.1.0.0/25" });
  assertEquals(spaceKey(a, a.ranges[0]), spaceKey(b, b.ranges[0]), "overlapping ranges share");
  const named = parse({ range: "10.1.0.0/24", network_name: "blue" });
  assertEquals(spaceKey(named, named.ranges[0]), "blue/v4");
  const v6 = parse({ range: "fd00::/120", network_name: "blue" });
  assertEquals(spaceKey(v6, v6.ranges[0]), "blue/v6");
  const apart = parse({ range: "10.1.0.0/24", enable_overlapping_ranges: false });
  const apart2 = parse({ range: "10.1.0.0/25", enable_overlapping_ranges: false });
  assertEquals(spaceKey(apart, apart.ranges[0]), "range-10.1.0.0/24");
  assertEquals(
    spaceKey(apart, apart.ranges[0]) === spaceKey(apart2, apart2.ranges[0]),
    false,
    "without overlapping ranges only the same range shares",
  );
});

Deno.test("a bad whereabouts config is code 7 naming the pod, the NAD and the key", () => {
  const cases: [Record<string, unknown>, string][] = [
    [{}, "ipam.range: is missing"],
    [{ range: "10.0.0.0" }, "ipam.range:"],
    [{ range: "10.0.0.0/33" }, "ipam.range:"],
    [{ range: "10.0.0.0/31" }, "ipam.range: 10.0.0.0/31 has no usable address"],
    [{ range: "10.0.0.9-10.0.1.5/24" }, "ipam.range:"],
    [{ range: "10.0.0.9-10.0.0.5/24" }, "ipam.range: the range ends"],
    [{ range: 17 }, "ipam.range:"],
    [{ range: "10.0.0.0/24", range_start: "10.0.1.1" }, "ipam.range_start: 10.0.1.1 is outside"],
    [{ range: "10.0.0.0/24", range_start: "10.0.0.0" }, "ipam.range_start:"],
    [
      { range: "10.0.0.0/24", range_end: "fd00::1" },
      "ipam.range_end: fd00::1 is not of the family",
    ],
    [{ range: "10.0.0.0/24", range_start: "bogus" }, "ipam.range_start:"],
    [{ range_start: "10.0.0.1" }, "ipam.range_start: is given without range"],
    [{ range: "10.0.0.0/24", exclude: "10.0.0.0/28" }, "ipam.exclude: must be a list"],
    [{ range: "10.0.0.0/24", exclude: ["10.0.0.0/28", "nope"] }, "ipam.exclude[1]:"],
    [{ range: "10.0.0.0/24", exclude: ["fd00::/64"] }, "ipam.exclude[0]:"],
    [{ range: "10.0.0.0/30", exclude: ["10.0.0.0/30"] }, "hands out no address"],
    [{ range: "10.0.0.0/24", gateway: "fd00::1" }, "ipam.gateway: fd00::1 is of no range's"],
    [{ range: "10.0.0.0/24", gateway: "x" }, "ipam.gateway:"],
    [{ ipRanges: [{ range: "10.0.0.0/24" }, { range: "bad" }] }, "ipam.ipRanges[1].range:"],
    [{ ipRanges: [{ range: "10.0.0.0/24", range_end: "10.0.0.300" }] }, "ipRanges[0].range_end"],
    [{ ipRanges: "10.0.0.0/24" }, "ipam.ipRanges: must be a list"],
    [{ ipRanges: ["10.0.0.0/24"] }, "ipam.ipRanges[0]: must be an object"],
    [{ range: "10.0.0.0/24", network_name: "a b" }, "ipam.network_name:"],
    [{ range: "10.0.0.0/24", enable_overlapping_ranges: "yes" }, "ipam.enable_overlapping_ranges"],
    [{ range: "10.0.0.0/24", routes: [{ gw: "10.0.0.1" }] }, "ipam.routes[0]:"],
    [{ range: "10.0.0.0/24", routes: [{ dst: "0.0.0.0/0", gw: "g" }] }, "ipam.routes[0].gw:"],
    [{ range: "10.0.0.0/24", addresses: [{ address: "10.0.0.5" }] }, "ipam.addresses[0].address"],
    [{ range: "10.0.0.0/24", configuration_path: "/etc/x.conf" }, "ipam.configuration_path"],
  ];
  for (const [ipam, want] of cases) {
    const e = assertThrows(() => parse(ipam), CniError, undefined, JSON.stringify(ipam));
    assertEquals(e.code, CNI_ERROR.INVALID_CONFIG, JSON.stringify(ipam));
    assertEquals(e.message.startsWith(`${W}: `), true, e.message);
    assertEquals(
      e.message.includes(want),
      true,
      `${JSON.stringify(ipam)}: "${e.message}" should say "${want}"`,
    );
  }
  const e = assertThrows(() => parseWhereabouts({ type: "host-local" }, W), CniError);
  assertEquals(e.message.includes("ipam.type"), true, e.message);
});

Deno.test("a config of more than MAX_RANGES ranges or static addresses is refused with code 7 naming the key: each pod would take an address, and a NetworkBlock, of every one", () => {
  const ranges = (n: number) =>
    Array.from({ length: n }, (_, i) => ({ range: `172.16.${i >> 6}.${(i & 63) * 4}/30` }));
  assertEquals(parse({ ipRanges: ranges(MAX_RANGES) }).ranges.length, MAX_RANGES);
  assertEquals(
    parse({ range: "10.9.0.0/30", ipRanges: ranges(MAX_RANGES - 1) }).ranges.length,
    MAX_RANGES,
  );
  for (
    const [ipam, key] of [
      [{ ipRanges: ranges(2000) }, "ipam.ipRanges:"],
      [{ range: "10.9.0.0/30", ipRanges: ranges(MAX_RANGES) }, "ipam.ipRanges:"],
      [{
        addresses: Array.from(
          { length: 500 },
          (_, i) => ({ address: `10.8.${i >> 8}.${i & 255}/16` }),
        ),
      }, "ipam.addresses:"],
    ] as const
  ) {
    const e = assertThrows(() => parse(ipam), CniError);
    assertEquals(e.code, CNI_ERROR.INVALID_CONFIG, e.message);
    assertEquals(
      e.message.includes(key) && e.message.includes(`at most ${MAX_RANGES}`),
      true,
      e.message,
    );
  }
});
