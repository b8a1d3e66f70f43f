// Netlink written in place: the same bytes as the attribute encoder's (`frame`, `encodeAttrs`),
// for messages as set element batches make them (strings, nested lists, keys of every padding),
// however large they grow.
import { assertEquals } from "deno-std/assert/mod.js";
import { type Attr, encodeAttrs, frame, NL, str } from "../../../../daemon/net/netlink/messages.ts";
import { NetlinkWriter } from "../../../../daemon/net/netlink/nl_writer.ts";
import { concatBytes } from "../../../../lib/bytes.ts";
import { setElementBatch } from "../../../../daemon/policy/nft_netlink.ts";
import { NFPROTO_BRIDGE, type SetElementOp } from "../../../../daemon/net/netlink/nft_sets.ts";

const bytes = (n: number, from = 1) => Uint8Array.from({ length: n }, (_, i) => (from + i) & 255);

Deno.test("a message written in place is the bytes frame and encodeAttrs make: strings, nested attributes, values of every padding", () => {
  const header = new Uint8Array([7, 0, 0, 0]);
  const values = [bytes(1), bytes(2), bytes(3), bytes(4), bytes(5), bytes(16), bytes(28)];
  const attrs: Attr[] = [
    [1, str("ferry-portsec")],
    [2, str("sarp")],
    [3, values.map((v): Attr => [1, [[1, [[1, v]]], [10, [[1, v]]]]])],
  ];
  const expected = frame(
    0x0a0c,
    NL.F_ACK | NL.F_CREATE,
    42,
    concatBytes([header, encodeAttrs(attrs)]),
  );
  // Room for a few bytes only: it grows as it goes.
  const w = new NetlinkWriter(8);
  const m = w.begin(0x0a0c, NL.F_ACK | NL.F_CREATE, 42);
  w.raw(header);
  w.str(1, "ferry-portsec");
  w.str(2, "sarp");
  const list = w.nest(3);
  for (const v of values) {
    const elem = w.nest(1);
    for (const type of [1, 10]) {
      const key = w.nest(type);
      w.attr(1, v);
      w.close(key);
    }
    w.close(elem);
  }
  w.close(list);
  w.end(m);
  assertEquals(w.bytes(), expected);
});

Deno.test("a set element batch is one transaction: begin, one message per set with its keys (and range ends), end, numbered from its sequence", () => {
  const ops: SetElementOp[] = [
    { set: "ports", key: bytes(16) },
    { set: "sarp", key: bytes(28) },
    { set: "ports", key: bytes(16, 9) },
    { set: "allow4", key: bytes(20), keyEnd: bytes(20, 5) },
  ];
  const nfgen = (family: number, res = 0) => new Uint8Array([family, 0, res >> 8, res & 255]);
  const control = (type: number, seq: number) => frame(type, 0, seq, nfgen(0, 10));
  const set = (name: string, seq: number, remove: boolean) =>
    frame(
      (10 << 8) | (remove ? 30 : 12),
      NL.F_ACK | (remove ? 0 : NL.F_CREATE),
      seq,
      concatBytes([
        nfgen(NFPROTO_BRIDGE),
        encodeAttrs([
          [1, str("fps")],
          [2, str(name)],
          [
            3,
            ops.filter((o) => o.set === name).map((o): Attr => [1, [
              [1, [[1, o.key]]],
              ...(o.keyEnd ? [[10, [[1, o.keyEnd]]] as Attr] : []),
            ]]),
          ],
        ]),
      ]),
    );
  for (const remove of [false, true]) {
    const { bytes: got, seqs } = setElementBatch(NFPROTO_BRIDGE, "fps", ops, 100, remove);
    assertEquals(seqs, [101, 102, 103]);
    assertEquals(
      got,
      concatBytes([
        control(0x10, 100),
        set("ports", 101, remove),
        set("sarp", 102, remove),
        set("allow4", 103, remove),
        control(0x11, 104),
      ]),
    );
  }
});
