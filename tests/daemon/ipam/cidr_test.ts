import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import {
  addToIp,
  canonicalIp,
  cidrContains,
  formatCidr,
  formatIp,
  lastAddress,
  parseCidr,
  parseIp,
} from "../../../daemon/ipam/cidr.ts";

Deno.test("IPv4 and IPv6 addresses round-trip to canonical text", () => {
  for (
    const [input, canonical] of [
      ["10.244.0.5", "10.244.0.5"],
      ["fd00:0:0:0:0:0:0:1", "fd00::1"],
      ["::", "::"],
      ["2001:db8::ff00:42:8329", "2001:db8::ff00:42:8329"],
      ["1:0:0:1:0:0:0:1", "1:0:0:1::1"],
    ]
  ) assertEquals(formatIp(parseIp(input)), canonical);
});

Deno.test("malformed addresses and prefixes are rejected", () => {
  for (const bad of ["10.0.0", "10.0.0.256", "1:::2", "1:2:3:4:5:6:7:8:9", "x"]) {
    assertThrows(() => parseIp(bad));
  }
  for (const bad of ["10.0.0.0", "10.0.0.0/33", "fd00::/129", "10.0.0.0/x"]) {
    assertThrows(() => parseCidr(bad));
  }
});

Deno.test("a prefix is normalised to its network and knows its members", () => {
  const c = parseCidr("10.244.1.77/24");
  assertEquals(formatCidr(c), "10.244.1.0/24");
  assertEquals(formatIp(lastAddress(c)), "10.244.1.255");
  assertEquals(cidrContains(c, parseIp("10.244.1.200")), true);
  assertEquals(cidrContains(c, parseIp("10.244.2.1")), false);
  assertEquals(cidrContains(c, parseIp("fd00::1")), false);
  assertEquals(formatIp(addToIp(parseIp("fd00::ffff"), 1n)), "fd00::1:0");
});

Deno.test("an IPv6 address may end in dotted IPv4 (::ffff:10.0.0.1), as RFC 4291 writes mapped addresses", () => {
  assertEquals(formatIp(parseIp("::ffff:10.77.1.2")), "::ffff:a4d:102");
  assertEquals(parseIp("::ffff:10.77.1.2"), parseIp("::ffff:a4d:102"));
  assertEquals(formatCidr(parseCidr("::ffff:10.77.1.2/120")), "::ffff:a4d:100/120");
  for (
    const bad of [
      "::ffff:10.77.1",
      "::ffff:10.77.1.2.3",
      "::ffff:300.0.0.1",
      "1:2:3:4:5:6:7:1.2.3.4",
    ]
  ) {
    assertThrows(() => parseIp(bad), Error, undefined, bad);
  }
});

Deno.test("canonicalIp writes every address as formatIp does and refuses what parseIp refuses", () => {
  const inputs = [
    "10.0.0.1",
    "010.0.0.1",
    "255.255.255.255",
    "256.0.0.1",
    "10.0.0",
    "10.0.0.1 }",
    "2001:DB8:0:0::7",
    "::",
    "::1",
    "1::",
    "fe80::1:0:0:1",
    "0:0:0:0:0:0:0:0",
    "1:2:3:4:5:6:7:8",
    "1:2:3:4:5:6:7:8:9",
    "1::2::3",
    "::ffff:1.2.3.4",
    "12345::",
    "g::1",
    "",
    "192.168.77.99 }; }\n  chain in-0 { accept; }",
  ];
  for (const text of inputs) {
    let expected: string | undefined;
    try {
      expected = formatIp(parseIp(text));
    } catch {
      expected = undefined;
    }
    assertEquals(canonicalIp(text), expected, JSON.stringify(text));
  }
});
