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

/** The hash as `BigInt` arithmetic computes it: what every earlier version named links with. */
function referenceFnv1a64(text: string): bigint {
  let h = 0xcbf29ce484222325n;
  for (const byte of new TextEncoder().encode(text)) {
    h ^= BigInt(byte);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return h;
}

Deno.test("names and MACs are the ones earlier versions gave, so a DEL after an upgrade finds its links", () => {
  // Computed by the BigInt implementation Ferry shipped until 2026-11-25.
  const known = [
    ["abcdef0123", "eth0", "fydfdfcd068b65", "86:25:7e:c2:63:68", "ee:53:33:24:ea:58"],
    [
      "4f2a9c0d1e2b3a4f5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b",
      "net1",
      "fyd4a165a54afd",
      "02:ad:7d:20:c9:dd",
      "6e:eb:9f:a5:79:6c",
    ],
    ["ünï", "eth0", "fycd121e824608", "72:20:a2:e8:99:b1", "d6:5c:3d:65:68:c4"],
  ];
  for (const [id, ifname, name, container, host] of known) {
    assertEquals(
      [hostLinkName(id, ifname), stableMac(id, ifname, "container"), stableMac(id, ifname, "host")],
      [name, container, host],
    );
  }
  // And for many random IDs, against the reference hash.
  for (let i = 0; i < 2000; i++) {
    const id = crypto.randomUUID().replaceAll("-", "").repeat(1 + (i % 3)).slice(0, 1 + (i % 64));
    const ifname = `net${i % 7}`;
    const h = referenceFnv1a64(`${id}/${ifname}`);
    assertEquals(hostLinkName(id, ifname), `fy${h.toString(16).padStart(16, "0").slice(0, 12)}`);
    const m = referenceFnv1a64(`container/${id}/${ifname}`);
    const bytes = Array.from({ length: 6 }, (_, k) => Number((m >> BigInt(8 * k)) & 0xffn));
    bytes[0] = (bytes[0] & 0xfe) | 0x02;
    assertEquals(
      stableMac(id, ifname, "container"),
      bytes.map((b) => b.toString(16).padStart(2, "0")).join(":"),
    );
  }
});
