import { assertEquals, assertMatch, assertNotEquals } from "deno-std/assert/mod.js";
import { hostLinkName, stableMac } from "../../../daemon/net/naming.ts";

Deno.test("host link names are stable, distinct per interface, and fit the kernel limit", () => {
  const a = hostLinkName("abcdef0123", "eth0");
  assertEquals(a, hostLinkName("abcdef0123", "eth0"));
  assertNotEquals(a, hostLinkName("abcdef0123", "net1"));
  assertMatch(a, /^fy[0-9a-f]{12}$/);
});

Deno.test("MACs are stable, locally administered unicast, and differ per end", () => {
  const c = stableMac("abc", "eth0", "container");
  assertEquals(c, stableMac("abc", "eth0", "container"));
  assertNotEquals(c, stableMac("abc", "eth0", "host"));
  const first = parseInt(c.slice(0, 2), 16);
  assertEquals([first & 1, first & 2], [0, 2]);
});
