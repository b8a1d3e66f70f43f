// Port security's table: its script is one nft transaction nft accepts; a pod's elements name its
// port, MAC and addresses (link-local and `::` for IPv6, `0.0.0.0` for ARP probes); written
// in-process they are what nft itself lists, and a release takes them all away, absent or not.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { IS_ROOT, run, uniqueToken } from "../../../daemon/dev/netns.ts";
import { Libc } from "../../../daemon/net/netlink/libc.ts";
import { NftNetlink } from "../../../daemon/policy/nft_netlink.ts";
import {
  entryOfResult,
  guardElements,
  guardTableScript,
  linkLocalOf,
  type PortEntry,
} from "../../../daemon/portsec/guard_table.ts";
import { dropIncreases, dropsOf, PortGuard } from "../../../daemon/portsec/port_guard.ts";
import { NftRunner } from "../../../daemon/cluster/masquerade.ts";
import { spoofingReporter } from "../../../daemon/portsec/spoofing.ts";
import { podGuardScript } from "../../../daemon/portsec/pod_guard.ts";
import { assertNftAccepts, HAS_NFT } from "../policy/_nft.ts";

const entry: PortEntry = {
  port: "fy0123456789ab",
  mac: "02:42:0a:f4:00:05",
  ips: ["10.244.0.5", "fd00:10:244::5"],
};

Deno.test("a pod's IPv6 link-local address is the EUI-64 of its MAC", () => {
  assertEquals(linkLocalOf("02:42:0a:f4:00:05"), "fe80::42:aff:fef4:5");
  assertEquals(linkLocalOf("0e:00:00:00:00:01"), "fe80::c00:ff:fe00:1");
});

Deno.test("a pod may send from its port with its MAC, its addresses, its link-local address, :: and ARP probes, and name its MAC in neighbour discovery", () => {
  assertEquals(guardElements(entry).map((e) => `${e.set} ${e.text}`), [
    `ports "fy0123456789ab"`,
    `mac "fy0123456789ab" . 02:42:0a:f4:00:05`,
    `sarp "fy0123456789ab" . 02:42:0a:f4:00:05 . 10.244.0.5`,
    `sarp "fy0123456789ab" . 02:42:0a:f4:00:05 . 0.0.0.0`,
    `src4 "fy0123456789ab" . 10.244.0.5`,
    `src6 "fy0123456789ab" . fd00:10:244::5`,
    `src6 "fy0123456789ab" . fe80::42:aff:fef4:5`,
    `src6 "fy0123456789ab" . ::`,
    `tgt6 "fy0123456789ab" . 0xfd000010024400000000000000000005`,
    `tgt6 "fy0123456789ab" . 0xfe8000000000000000420afffef40005`,
    `lla "fy0123456789ab" . 0x02420af40005`,
  ]);
  // Keys as the kernel stores them: the name in 16 bytes, the MAC padded to 8, then the address.
  const arp = guardElements(entry)[2].key;
  assertEquals(arp.length, 16 + 8 + 4);
  assertEquals([...arp.subarray(16, 24)], [2, 0x42, 0x0a, 0xf4, 0, 5, 0, 0]);
});

Deno.test("a port whose index is known puts each IPv4 address of its pod on the fast path (index, MAC, address, TCP, unicast to another station); one without an index does not", () => {
  assertEquals(guardElements(entry).filter((e) => e.set === "fast4"), []);
  const fast = guardElements({ ...entry, ips: [...entry.ips, "10.244.1.7"], index: 0x01020304 })
    .filter((e) => e.set === "fast4");
  assertEquals(fast.map((e) => e.text), [
    "16909060 . 02:42:0a:f4:00:05 . 10.244.0.5 . tcp . host",
    "16909060 . 02:42:0a:f4:00:05 . 10.244.0.5 . tcp . other",
    "16909060 . 02:42:0a:f4:00:05 . 10.244.1.7 . tcp . host",
    "16909060 . 02:42:0a:f4:00:05 . 10.244.1.7 . tcp . other",
  ]);
  // The index in the host's byte order (as `meta iif` loads it), then the MAC padded to 8, the
  // address, the protocol and the packet type (PACKET_HOST, PACKET_OTHERHOST), each padded to 4.
  const host = new Uint8Array(Uint32Array.of(0x01020304).buffer);
  assertEquals([...fast[0].key].slice(-4), [0, 0, 0, 0]);
  assertEquals([...fast[1].key], [
    ...host,
    ...[2, 0x42, 0x0a, 0xf4, 0, 5, 0, 0],
    ...[10, 244, 0, 5],
    ...[6, 0, 0, 0],
    ...[3, 0, 0, 0],
  ]);
});

Deno.test("the entry of a recorded result is its last sandboxed interface and that interface's addresses", () => {
  const result = {
    interfaces: [
      { name: "other", mac: "02:00:00:00:00:09", sandbox: "/x" },
      { name: "fyhost", mac: "02:00:00:00:00:01" },
      { name: "eth0", mac: "02:00:00:00:00:02", sandbox: "/x" },
    ],
    ips: [{ address: "10.1.0.9/24", interface: 0 }, { address: "10.244.0.5/24", interface: 2 }],
  };
  assertEquals(entryOfResult(result, "fyhost"), {
    port: "fyhost",
    mac: "02:00:00:00:00:02",
    ips: ["10.244.0.5"],
  });
  assertEquals(entryOfResult({ interfaces: [{ mac: "02:00:00:00:00:01" }] }, "fyhost"), undefined);
});

Deno.test({
  name: "the guard table is one transaction nft accepts, with every pod's elements",
  ignore: !HAS_NFT,
  fn: () => assertNftAccepts(guardTableScript("ferry-portsec", [entry])),
});

Deno.test("the drop counters are read per port and kind from the table's listing", () => {
  const json = JSON.stringify({
    nftables: [
      { set: { name: "ports", elem: ["fy1"] } },
      { set: { name: "drop_ipv4", elem: [{ elem: { val: "fy1", counter: { packets: 3 } } }] } },
      { set: { name: "drop_ra", elem: [{ elem: { val: "fy2", counter: { packets: 1 } } }] } },
    ],
  });
  assertEquals(dropsOf(json), [
    { port: "fy1", kind: "ipv4", packets: 3 },
    { port: "fy2", kind: "ra", packets: 1 },
  ]);
});

Deno.test({
  name:
    "elements written in-process are those nft lists, an admission is one transaction, and a release removes them all, twice without failing",
  ignore: !IS_ROOT || !HAS_NFT,
  fn: async () => {
    // A table of its own, naming a port that does not exist: it guards nothing on this machine.
    const t = uniqueToken().slice(0, 8);
    const table = `fpt${t}`;
    const writer = new NftNetlink(Libc.open());
    const nft = new NftRunner({ family: "bridge" });
    // The port's index while its link is there; gone before the release.
    let link: number | undefined = 4242;
    const guard = new PortGuard({
      table,
      apply: (script) => nft.apply(script),
      listJson: (name) => nft.listJson(name),
      writer,
      indexOf: (port) => port === entry.port ? link : undefined,
      logger: getLogger(["ferry", "test"]),
    });
    const set = async (name: string) =>
      (await run("nft", "list", "set", "bridge", table, name)).replace(/\s+/g, " ");
    try {
      await guard.rebuild([]);
      // The writer's one transaction per call: the admission is one.
      let transactions = 0;
      const write = writer.writeElements.bind(writer);
      writer.writeElements = (...args) => (transactions++, write(...args));
      await guard.admit({ ...entry, allowed: ["198.51.100.0/24", "fd00:abcd::/64"] });
      assertEquals(transactions, 1, "an ADD's admission is one transaction");
      assert(
        (await set("allow4")).includes(`"fy0123456789ab" . 198.51.100.0/24`),
        await set("allow4"),
      );
      assert(
        (await set("allow6")).includes(`"fy0123456789ab" . fd00:abcd::/64`),
        await set("allow6"),
      );
      assert((await set("ports")).includes(`elements = { "fy0123456789ab" }`), await set("ports"));
      assert(
        (await set("sarp")).includes(`"fy0123456789ab" . 02:42:0a:f4:00:05 . 10.244.0.5`),
        await set("sarp"),
      );
      assert((await set("src6")).includes(`"fy0123456789ab" . fe80::42:aff:fef4:5`));
      assert((await set("tgt6")).includes(`0xfd000010024400000000000000000005`), await set("tgt6"));
      assert((await set("tgt6")).includes(`0xfe8000000000000000420afffef40005`), await set("tgt6"));
      assert((await set("lla")).includes(`"fy0123456789ab" . 0x2420af40005`), await set("lla"));
      assert(
        (await set("fast4")).includes(`4242 . 02:42:0a:f4:00:05 . 10.244.0.5 . tcp . host`) &&
          (await set("fast4")).includes(`4242 . 02:42:0a:f4:00:05 . 10.244.0.5 . tcp . other`),
        await set("fast4"),
      );
      await guard.admit(entry); // again: no error
      // The link goes first (its pod's sandbox torn down): the release still knows its index.
      link = undefined;
      await guard.release({ ...entry, allowed: ["198.51.100.0/24", "fd00:abcd::/64"] });
      assert(!(await set("fast4")).includes("4242"), `fast4 still names the port's index`);
      for (
        const s of [
          "closed",
          "ports",
          "mac",
          "sarp",
          "src4",
          "src6",
          "tgt6",
          "lla",
          "allow4",
          "allow6",
        ]
      ) {
        assert(!(await set(s)).includes("fy0123456789ab"), `${s} still names the port`);
      }
      await guard.release(entry); // absent: no error
      assertEquals(await guard.drops(), []);
    } finally {
      writer.close();
      await guard.remove().catch(() => {});
    }
  },
});

Deno.test({
  name:
    "a macvlan's guard (its MAC, addresses, DHCP) and an ipvlan's (no MAC of its own, no address) are scripts nft accepts",
  ignore: !HAS_NFT,
  fn: async () => {
    const macvlan = podGuardScript("ferry-portsec", {
      ifname: "net1",
      mac: "02:00:00:00:00:01",
      ips: ["192.168.1.5", "fd00::5"],
      dhcp: true,
    });
    assert(macvlan.includes("ip saddr 0.0.0.0 udp sport 68 udp dport 67 accept"), macvlan);
    assert(macvlan.includes(`hook egress device "net1"`), macvlan);
    assert(
      macvlan.includes(
        `@th,192,16 { 0x0101, 0x0201 } @th,208,48 != 0x020000000001 counter drop comment "nd"`,
      ),
      macvlan,
    );
    // A router solicitation's Source Link-Layer Address option (at bit 80) names its own MAC.
    assert(
      macvlan.includes(
        `icmpv6 type nd-router-solicit @th,80,48 != 0x020000000001 counter drop comment "nd"`,
      ),
      macvlan,
    );
    await assertNftAccepts(macvlan);
    const ipvlan = podGuardScript("ferry-portsec", { ifname: "net2", ips: [] });
    assert(!ipvlan.includes("ether saddr"), ipvlan);
    assert(!ipvlan.includes("@th,208,48"), ipvlan);
    assert(ipvlan.includes(`ip6 length != { 24, 32 } counter drop comment "nd"`), ipvlan);
    await assertNftAccepts(ipvlan);
  },
});

Deno.test("the guard's stats count the ports under guard (rebuilt, admitted, released) and the frames dropped by kind", async () => {
  let listing = JSON.stringify({ nftables: [] });
  const guard = new PortGuard({
    table: "fps",
    apply: () => Promise.resolve(),
    listJson: () => Promise.resolve(listing),
    logger: getLogger(["ferry", "test"]),
  });
  const other = { port: "fy1", mac: "02:00:00:00:00:01", ips: ["10.244.0.6"] };
  await guard.rebuild([entry, other]);
  assertEquals(guard.stats(), { guardedPorts: 2, dropped: {} });
  await guard.admit({ port: "fy2", mac: "02:00:00:00:00:02", ips: ["10.244.0.7"] });
  await guard.release(other);
  assertEquals(guard.stats().guardedPorts, 2, "fy0123456789ab and fy2");
  listing = JSON.stringify({
    nftables: [
      { set: { name: "drop_ipv4", elem: [{ elem: { val: "fy2", counter: { packets: 3 } } }] } },
      {
        set: {
          name: "drop_arp",
          elem: [
            { elem: { val: "fy2", counter: { packets: 2 } } },
            { elem: { val: "fy0123456789ab", counter: { packets: 1 } } },
          ],
        },
      },
    ],
  });
  guard.startCounting(60_000);
  for (let i = 0; i < 100 && !guard.counts().length; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  guard.stopCounting();
  assertEquals(guard.stats(), { guardedPorts: 2, dropped: { ipv4: 3, arp: 3 } });
});

Deno.test("a guard table deleted behind the daemon's back is written again at the next read of the counters: every admitted port, the ports under ADD closed again by its rules; a listing that fails is not read as absent", async () => {
  const scripts: string[] = [];
  let gone = false, failing = false, failed = 0;
  const guard = new PortGuard({
    table: "fps",
    apply: (script) => {
      scripts.push(script);
      if (script.includes("table bridge fps {")) gone = false;
      return Promise.resolve();
    },
    listJson: () =>
      failing
        ? (failed++, Promise.reject(new Error("nft -j list table bridge fps failed: killed")))
        : Promise.resolve(gone ? undefined : JSON.stringify({ nftables: [] })),
    logger: getLogger(["ferry", "test"]),
  });
  await guard.rebuild([entry]);
  await guard.admit({ port: "fy2", mac: "02:00:00:00:00:02", ips: ["10.244.0.7"] });
  guard.startCounting(10);
  try {
    await new Promise((r) => setTimeout(r, 50));
    const before = scripts.length;
    assertEquals(
      scripts.filter((s) => s.includes("table bridge fps {")).length,
      1,
      "an intact table is not written again",
    );
    failing = true;
    while (failed < 3) await new Promise((r) => setTimeout(r, 10));
    failing = false;
    assertEquals(scripts.length, before, "failed listings wrote nothing");
    gone = true;
    const deadline = Date.now() + 5000;
    while (scripts.slice(before).every((s) => !s.includes("table bridge fps {"))) {
      assert(Date.now() < deadline, "the deleted table was not written again");
      await new Promise((r) => setTimeout(r, 10));
    }
    const again = scripts.slice(before).find((s) => s.includes("table bridge fps {"))!;
    assert(again.includes('"fy0123456789ab" . 10.244.0.5'), again);
    assert(again.includes('"fy2" . 10.244.0.7'), again);
    // A port under ADD (made in the guard's group, not yet admitted) is closed by the rules.
    assert(again.includes(`meta iifgroup ${guard.group} drop`), again);
  } finally {
    guard.stopCounting();
  }
});

Deno.test("a port's fast elements go with the index they were written with: a release that fails keeps it for the DEL again, an ADD again on a new link takes the old index's away, and a table written again looks each index up anew", async () => {
  // What the writer holds: `set key` of every element added and not destroyed.
  const held = new Set<string>();
  const k = (e: { set: string; key: Uint8Array }) => `${e.set} ${e.key.join(",")}`;
  let failNext = false;
  const links = new Map([[entry.port, 7]]);
  const scripts: string[] = [];
  let gone = false;
  const guard = new PortGuard({
    table: "fps",
    apply: (script) => (scripts.push(script), gone = false, Promise.resolve()),
    listJson: () => Promise.resolve(gone ? undefined : JSON.stringify({ nftables: [] })),
    writer: {
      writeElements(_family, _table, ops, remove) {
        if (failNext) return (failNext = false, Promise.reject(new Error("EINVAL")));
        for (const op of ops) remove ? held.delete(k(op)) : held.add(k(op));
        return Promise.resolve();
      },
    },
    indexOf: (port) => links.get(port),
    logger: getLogger(["ferry", "test"]),
  });
  const fastOf = (index: number) =>
    guardElements({ ...entry, index }).filter((e) => e.set.startsWith("fast")).map(k);
  const holds = (index: number) => fastOf(index).filter((x) => held.has(x)).length;

  await guard.rebuild([]);
  await guard.admit(entry);
  assertEquals(holds(7), 6, "admitted on index 7: IPv4, IPv6 and link-local, to the node and not");
  // Its link goes, its release fails: the DEL again still knows index 7.
  links.delete(entry.port);
  failNext = true;
  await guard.release(entry);
  assertEquals(holds(7), 6, "a failed release removed nothing");
  assertEquals(guard.stats().guardedPorts, 1, "its elements are still in the table");
  await guard.release(entry);
  assertEquals(holds(7), 0, "the DEL again removed the fast elements of index 7");
  assertEquals(guard.stats().guardedPorts, 0);

  // An ADD again of one port on a new link (index 8 for 7): index 7's elements go.
  links.set(entry.port, 7);
  await guard.admit(entry);
  links.set(entry.port, 8);
  await guard.admit(entry);
  assertEquals([holds(7), holds(8)], [0, 6], "only the new link's index is held");

  // The table deleted and written again while the link is gone: no fast elements for it.
  guard.startCounting(10);
  try {
    links.delete(entry.port);
    const before = scripts.length;
    gone = true;
    const deadline = Date.now() + 5000;
    while (scripts.length === before) {
      assert(Date.now() < deadline, "the deleted table was not written again");
      await new Promise((r) => setTimeout(r, 10));
    }
    const again = scripts[before];
    assert(again.includes('"fy0123456789ab" . 10.244.0.5'), again);
    assert(!again.includes("fast4 { 8 ."), `a gone link's index written again:\n${again}`);
  } finally {
    guard.stopCounting();
  }
});

Deno.test("what was dropped between two reads is the difference per port and kind; a reset counter counts whole", () => {
  assertEquals(
    dropIncreases(
      [{ port: "fy1", kind: "arp", packets: 2 }, { port: "fy2", kind: "ra", packets: 9 }],
      [
        { port: "fy1", kind: "arp", packets: 5 },
        { port: "fy1", kind: "ipv4", packets: 1 },
        { port: "fy2", kind: "ra", packets: 4 },
        { port: "fy3", kind: "mac", packets: 0 },
      ],
    ),
    [
      { port: "fy1", kind: "arp", packets: 3 },
      { port: "fy1", kind: "ipv4", packets: 1 },
      { port: "fy2", kind: "ra", packets: 4 },
    ],
  );
  assertEquals(
    dropIncreases([{ port: "fy1", kind: "arp", packets: 2 }], [
      { port: "fy1", kind: "arp", packets: 2 },
    ]),
    [],
  );
});

Deno.test("new drops are said once per pod and kind: a log line naming pod and forgery, a Warning Event on the pod", () => {
  const lines: Record<string, unknown>[] = [];
  const events: string[] = [];
  const report = spoofingReporter({
    records: () => [{ hostIfname: "fy1", pod: { namespace: "team", name: "evil" } }],
    logger: { warn: (_m: string, p: Record<string, unknown>) => lines.push(p) } as never,
    event: (ns, name, reason, message) => events.push(`${ns}/${name} ${reason}: ${message}`),
  });
  report([{ port: "fy1", kind: "arp", packets: 3 }, { port: "fy9", kind: "ra", packets: 1 }]);
  assertEquals(lines.map((l) => `${l.namespace}/${l.pod} ${l.what}`), [
    "team/evil 3 frame(s) forging another ARP sender",
    "/fy9 1 frame(s) forging a router advertisement",
  ]);
  assertEquals(events, [
    "team/evil SpoofedFramesDropped: port security dropped 3 frame(s) forging another ARP sender sent by this pod",
  ]);
});

Deno.test({
  name:
    "the guard table with a VXLAN port and closed ports is one transaction nft accepts, and drops datagrams to that port and everything from closed ports",
  ignore: !HAS_NFT,
  fn: async () => {
    const script = guardTableScript("ferry-portsec", [entry], {
      tunnelPort: 8472,
      closed: ["fydamaged00000"],
    });
    assert(script.includes("udp dport 8472 jump forged_tunnel"), script);
    assert(script.includes("iifname @closed jump forged_unlisted"), script);
    assert(script.includes(`add element bridge ferry-portsec closed { "fydamaged00000" }`), script);
    assert(!guardTableScript("t", []).includes("forged_tunnel\n"), "no tunnel rule without a port");
    await assertNftAccepts(script);
  },
});

Deno.test("a macvlan's guard drops messages to DHCP client ports and sends from :: only for DAD and MLD", () => {
  const script = podGuardScript("ferry-portsec", {
    ifname: "net1",
    mac: "02:00:00:00:00:01",
    ips: ["192.168.1.5"],
  });
  assert(script.includes(`udp dport { 68, 546 } counter drop comment "dhcp"`), script);
  assert(script.includes(`ip6 saddr :: meta l4proto != ipv6-icmp counter drop`), script);
});
