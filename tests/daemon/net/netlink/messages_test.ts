import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import {
  delLink,
  dumpLinksOf,
  encodeAttrs,
  frame,
  ipBytes,
  newAddr,
  newDefaultRoute,
  newSublink,
  newVeth,
  NL,
  parseReplies,
  routeRequest,
  str,
  u32,
} from "../../../../daemon/net/netlink/messages.ts";

const view = (b: Uint8Array) => new DataView(b.buffer, b.byteOffset, b.byteLength);

Deno.test("attributes are length-prefixed, padded to 4 bytes, and nested ones are flagged", () => {
  assertEquals([...encodeAttrs([[3, str("ab")]])], [7, 0, 3, 0, 97, 98, 0, 0]);
  const nested = encodeAttrs([[18, [[1, str("veth")]]]]);
  assertEquals(nested.length, 16);
  assertEquals([view(nested).getUint16(0, true), view(nested).getUint16(2, true)], [
    16,
    18 | 0x8000,
  ]);
  assertEquals([view(nested).getUint16(4, true), view(nested).getUint16(6, true)], [9, 1]);
});

Deno.test("a frame carries its total length, type, request flag and sequence number", () => {
  const msg = frame(NL.RTM_GETLINK, 0, 42, new Uint8Array(16));
  const v = view(msg);
  assertEquals([v.getUint32(0, true), v.getUint16(4, true), v.getUint16(6, true)], [32, 18, 1]);
  assertEquals(v.getUint32(8, true), 42);
  const del = view(delLink(7, "fy0"));
  assertEquals(del.getUint16(6, true), NL.F_REQUEST | NL.F_ACK);
});

Deno.test("addresses are network-order bytes of their family", () => {
  assertEquals(ipBytes("10.244.0.5"), { family: 2, bytes: Uint8Array.of(10, 244, 0, 5) });
  const v6 = ipBytes("fd00::5");
  assertEquals([v6.family, v6.bytes.length, v6.bytes[0], v6.bytes[1], v6.bytes[15]], [
    10,
    16,
    0xfd,
    0,
    5,
  ]);
});

Deno.test("an IPv4 address sets local and address; an IPv6 one skips duplicate address detection", () => {
  const v4 = newAddr(1, 7, "10.244.0.5/24");
  const h = view(v4);
  assertEquals([h.getUint8(16), h.getUint8(17), h.getUint8(18), h.getUint32(20, true)], [
    2,
    24,
    0,
    7,
  ]);
  // IFA_LOCAL (2) then IFA_ADDRESS (1), 8 bytes each.
  assertEquals([h.getUint16(26, true), h.getUint16(34, true)], [2, 1]);
  assertEquals([...v4.subarray(28, 32)], [10, 244, 0, 5]);
  assertEquals(h.getUint16(6, true), NL.F_REQUEST | NL.F_ACK | NL.F_CREATE | NL.F_EXCL);
  const v6 = view(newAddr(1, 7, "fd00::5/64"));
  assertEquals([v6.getUint8(16), v6.getUint8(17), v6.getUint8(18)], [10, 64, 0x02]);
});

Deno.test("a default route goes into the main table as a unicast boot route via the gateway", () => {
  const r = newDefaultRoute(3, 9, "10.244.0.1");
  assertEquals([...r.subarray(16, 28)], [2, 0, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0]);
  assertEquals([view(r).getUint16(30, true), ...r.subarray(32, 36)], [5, 10, 244, 0, 1]);
  assertEquals(view(r).getUint32(40, true), 9);
});

Deno.test("a veth request puts the peer's name, MAC, MTU and namespace inside the link info", () => {
  const msg = newVeth(
    1,
    { name: "fyhost", mac: "02:00:00:00:00:01", mtu: 1450 },
    { name: "eth0", mac: "02:00:00:00:00:02", mtu: 1450 },
    12,
    33,
  );
  const text = new TextDecoder().decode(msg);
  for (const part of ["fyhost\0", "eth0\0", "veth\0"]) {
    assertEquals(text.includes(part), true, part);
  }
  assertEquals(view(msg).getUint32(0, true), msg.length);
  // ifinfomsg of the host end: up, with the change mask.
  assertEquals([view(msg).getUint32(24, true), view(msg).getUint32(28, true)], [1, 1]);
});

Deno.test("a veth request puts the host end in its interface group when it has one, and names none otherwise", () => {
  const ends = (group?: number) =>
    newVeth(
      1,
      { name: "fyhost", mac: "02:00:00:00:00:01", mtu: 1450, group },
      { name: "eth0", mac: "02:00:00:00:00:02", mtu: 1450 },
      12,
      33,
    );
  // IFLA_GROUP (27): 8 bytes, a native-endian u32, among the host end's attributes.
  const attr = new Uint8Array(8);
  view(attr).setUint16(0, 8, true);
  view(attr).setUint16(2, 27, true);
  view(attr).setUint32(4, 0x46000001, true);
  const has = (msg: Uint8Array) => msg.some((_, i) => attr.every((b, j) => msg[i + j] === b));
  assertEquals(has(ends(0x46000001)), true, "no IFLA_GROUP attribute with the group");
  assertEquals(ends().length, ends(0x46000001).length - 8, "a group without one");
});

Deno.test("answers parse into acks, errors with their errno, and link indexes", () => {
  const ack = frame(NL.ERROR, 0, 5, new Uint8Array(20));
  const err = frame(NL.ERROR, 0, 6, new Uint8Array(20));
  view(err).setInt32(16, -17, true);
  const link = frame(NL.RTM_NEWLINK, 0, 7, new Uint8Array(16));
  view(link).setInt32(20, 4242, true);
  const buf = new Uint8Array(ack.length + err.length + link.length);
  buf.set(ack);
  buf.set(err, ack.length);
  buf.set(link, ack.length + err.length);
  assertEquals(parseReplies(buf), [
    { type: NL.ERROR, seq: 5, error: 0 },
    { type: NL.ERROR, seq: 6, error: -17 },
    { type: NL.RTM_NEWLINK, seq: 7, index: 4242 },
  ]);
  assertEquals(parseReplies(buf.subarray(0, 10)), []);
});

Deno.test("a dump of a bridge's ports asks for every link with that master, and answers name theirs", () => {
  const msg = dumpLinksOf(9, 77);
  assertEquals(view(msg).getUint16(4, true), NL.RTM_GETLINK);
  assertEquals(view(msg).getUint16(6, true), NL.F_DUMP | NL.F_REQUEST);
  assertEquals(view(msg).getUint32(8, true), 9);
  // After the 16-byte ifinfomsg (any link, any family): IFLA_MASTER (10) with the index.
  assertEquals([...msg.subarray(16, 32)], new Array(16).fill(0));
  assertEquals([...msg.subarray(32)], [...encodeAttrs([[10, u32(77)]])]);
  assertEquals(view(msg).getUint32(0, true), msg.length);

  const answer = (index: number, attrs: Uint8Array) => {
    const body = new Uint8Array(16 + attrs.length);
    view(body).setInt32(4, index, true);
    body.set(attrs, 16);
    return frame(NL.RTM_NEWLINK, NL.F_DUMP, 9, body);
  };
  const port = answer(31, encodeAttrs([[3, str("fyport")], [10, u32(77)]]));
  const loose = answer(32, encodeAttrs([[3, str("eth9")]]));
  const buf = new Uint8Array(port.length + loose.length);
  buf.set(port);
  buf.set(loose, port.length);
  assertEquals(parseReplies(buf), [
    { type: NL.RTM_NEWLINK, seq: 9, index: 31, name: "fyport", master: 77 },
    { type: NL.RTM_NEWLINK, seq: 9, index: 32, name: "eth9" },
  ]);
});

Deno.test("a route request reads back as the route it sets (IPv4 via a gateway, IPv6 onlink on a device)", () => {
  const v4 = parseReplies(
    routeRequest(NL.RTM_NEWROUTE, 7, { dst: "10.244.2.0/24", via: "192.0.2.12", protocol: 199 }),
  )[0];
  assertEquals(v4.route, {
    dst: "10.244.2.0/24",
    via: "192.0.2.12",
    protocol: 199,
    table: 254,
  });
  const v6 = parseReplies(
    routeRequest(NL.RTM_NEWROUTE, 8, {
      dst: "fd00:a:2::/64",
      via: "fd00:64::12",
      oif: 5,
      onlink: true,
      protocol: 199,
    }),
  )[0];
  assertEquals(v6.route, {
    dst: "fd00:a:2::/64",
    via: "fd00:64::12",
    oif: 5,
    onlink: true,
    protocol: 199,
    table: 254,
  });
});

/** The attributes of `buf` as type → value (nested flag cleared). */
function attrsOf(buf: Uint8Array): Map<number, Uint8Array> {
  const out = new Map<number, Uint8Array>();
  for (let at = 0; at + 4 <= buf.length;) {
    const len = view(buf).getUint16(at, true);
    out.set(view(buf).getUint16(at + 2, true) & 0x3fff, buf.subarray(at + 4, at + len));
    at += (len + 3) & ~3;
  }
  return out;
}

Deno.test("a sublink request names the master, the namespace and the kind's mode inside the link info", () => {
  const macvlan = newSublink(9, {
    kind: "macvlan",
    name: "net1",
    masterIndex: 4,
    mode: "private",
    mtu: 1400,
    mac: "02:00:00:00:00:05",
    netnsFd: 11,
  });
  assertEquals(view(macvlan).getUint16(6, true), NL.F_REQUEST | NL.F_ACK | NL.F_CREATE | NL.F_EXCL);
  const attrs = attrsOf(macvlan.subarray(32));
  assertEquals([view(attrs.get(5)!).getUint32(0, true), view(attrs.get(28)!).getUint32(0, true)], [
    4,
    11,
  ]);
  assertEquals(view(attrs.get(4)!).getUint32(0, true), 1400);
  assertEquals([...attrs.get(1)!], [2, 0, 0, 0, 0, 5]);
  const info = attrsOf(attrs.get(18)!);
  assertEquals(new TextDecoder().decode(info.get(1)!), "macvlan\0");
  assertEquals(view(attrsOf(info.get(2)!).get(1)!).getUint32(0, true), 1); // MACVLAN_MODE_PRIVATE

  const ipvlan = newSublink(9, {
    kind: "ipvlan",
    name: "net1",
    masterIndex: 4,
    mode: "l3s",
    flag: "vepa",
    mac: "02:00:00:00:00:05",
    netnsFd: 11,
  });
  const ipAttrs = attrsOf(ipvlan.subarray(32));
  assertEquals(ipAttrs.has(1), false, "an ipvlan link takes its master's MAC");
  assertEquals(ipAttrs.has(4), false, "no MTU asked: the master's");
  const data = attrsOf(attrsOf(ipAttrs.get(18)!).get(2)!);
  assertEquals([data.get(1)!.length, view(data.get(1)!).getUint16(0, true)], [2, 2]); // L3S
  assertEquals(view(data.get(2)!).getUint16(0, true), 2); // IPVLAN_F_VEPA

  assertThrows(
    () => newSublink(1, { kind: "macvlan", name: "n", masterIndex: 1, mode: "l2", netnsFd: 3 }),
    RangeError,
    'unknown macvlan mode "l2"',
  );
});
