/**
 * Port security's nftables table, as data: one `bridge` family table whose `prerouting` chain sees
 * every frame a pod sends into a Ferry bridge (to another pod or to the node) and drops what the
 * pod may not send: a source MAC, IPv4 or IPv6 source, ARP sender, neighbour advertisement target
 * or neighbour discovery link-layer address option that is not its own, router advertisements, redirects, DHCP server messages, datagrams to the
 * VXLAN port, and broadcast, multicast and link-local data (pods share no link-local scope). A
 * pod port of the daemon's (its interface group, {@link portGroup}) sends nothing until its pod is
 * listed (its ADD under way, or its record unreadable: closed): no port is open before its pod is
 * admitted. What a pod may
 * send is per-pod elements of a few sets keyed by the host-side port ({@link guardElements}), not
 * rules per pod, so an ADD adds elements (in-process, `nft_netlink.ts`: one transaction) and the
 * rules never change.
 * Every drop goes through the chain of its kind, which counts it per port in a dynamic set
 * (`drop_<kind>`, read for metrics, log lines and Events). Pure: text and bytes only.
 *
 * @module
 */
import { ipBytes, u32 } from "../net/netlink/messages.ts";
import { formatCidr, formatIp, lastAddress, parseCidr } from "../ipam/cidr.ts";
import { concatBytes } from "../../lib/bytes.ts";

/** What one pod interface may send, keyed by its host-side port. */
export interface PortEntry {
  /** The host-side link (a port of a Ferry bridge). */
  port: string;
  /** The MAC Ferry gave the pod's interface. */
  mac: string;
  /** The pod's addresses on that interface (no prefix length). */
  ips: string[];
  /** Extra source prefixes it may send from (CIDRs; its allowed annotation). */
  allowed?: string[];
  /**
   * The port's interface index in the node's namespace, when known: its TCP takes the guard's
   * fast path (the `fast4` and `fast6` sets, keyed by index); without it, the same checks the long
   * way.
   */
  index?: number;
}

/** What the table guards beyond the per-port elements. */
export interface GuardOptions {
  /**
   * The node's VXLAN port (`routing.vxlan.port`, with `routing.mode` vxlan): no pod sends a UDP
   * datagram to it, whatever the destination (a VTEP would decapsulate what it carries).
   */
  tunnelPort?: number;
  /**
   * Ports that send nothing, counted: Ferry's pod interfaces whose attachment record cannot be
   * read (what the pod may send is not known).
   */
  closed?: string[];
}

/** The kinds of forgery a drop is counted as, in the order the chain checks them. */
export const GUARD_KINDS = [
  "mac",
  "ethertype",
  "arp",
  "ipv4",
  "ipv6",
  "nd",
  "ra",
  "redirect",
  "dhcp",
  "tunnel",
  "linklocal",
  "unlisted",
] as const;

/** A kind of forgery. */
export type GuardKind = typeof GUARD_KINDS[number];

/** One set element: the set and its key, as the kernel stores it (concatenated, padded). */
export interface GuardElement {
  /** The set. */
  set:
    | "fast4"
    | "fast6"
    | "closed"
    | "ports"
    | "mac"
    | "sarp"
    | "src4"
    | "src6"
    | "tgt6"
    | "lla"
    | "allow4"
    | "allow6";
  /** The key's bytes. */
  key: Uint8Array;
  /** The end of a range (interval sets: the last key in it). */
  keyEnd?: Uint8Array;
  /** The key as nft writes it in a ruleset. */
  text: string;
}

const IFNAMSIZ = 16;

/** TCP's protocol number (`ip protocol`), as a register. */
const TCP = Uint8Array.of(6, 0, 0, 0);

/**
 * The `meta pkttype`s of a unicast frame, as registers, with their names in nft: to this host
 * (`PACKET_HOST`) and to another station (`PACKET_OTHERHOST`).
 */
const UNICAST: [Uint8Array, string][] = [
  [Uint8Array.of(0, 0, 0, 0), "host"],
  [Uint8Array.of(3, 0, 0, 0), "other"],
];

/** A component padded to the kernel's 4-byte register boundary. */
function pad(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(Math.ceil(bytes.length / 4) * 4);
  out.set(bytes);
  return out;
}

const UTF8 = new TextEncoder();

/** Port `name` as the kernel keys it in a set (16 bytes, zero-padded). */
export function portKey(name: string): Uint8Array {
  const out = new Uint8Array(IFNAMSIZ);
  const { read, written } = UTF8.encodeInto(name, out);
  if (read !== name.length || written >= IFNAMSIZ) {
    throw new Error(`not an interface name: ${name}`);
  }
  return out;
}

function macBytes(mac: string): Uint8Array {
  const parts = mac.split(":");
  if (parts.length !== 6 || parts.some((p) => !/^[0-9a-fA-F]{2}$/.test(p))) {
    throw new Error(`not a MAC address: ${mac}`);
  }
  return new Uint8Array(parts.map((p) => parseInt(p, 16)));
}

/**
 * The IPv6 link-local address the kernel derives from `mac` (EUI-64, the default address
 * generation mode of a pod's namespace).
 *
 * @example
 * ```ts
 * linkLocalOf("02:42:0a:f4:00:05"); // "fe80::42:aff:fef4:5"
 * ```
 */
export function linkLocalOf(mac: string): string {
  const b = macBytes(mac);
  const eui = [b[0] ^ 0x02, b[1], b[2], 0xff, 0xfe, b[3], b[4], b[5]];
  const groups: string[] = [];
  for (let i = 0; i < 8; i += 2) groups.push(((eui[i] << 8) | eui[i + 1]).toString(16));
  return `fe80::${groups.join(":")}`;
}

/** The bytes of {@link linkLocalOf} the MAC `b`. */
function linkLocalBytes(b: Uint8Array): Uint8Array {
  return new Uint8Array([
    0xfe,
    0x80,
    0,
    0,
    0,
    0,
    0,
    0,
    b[0] ^ 0x02,
    b[1],
    b[2],
    0xff,
    0xfe,
    b[3],
    b[4],
    b[5],
  ]);
}

/** `0.0.0.0` and `::`. */
const ANY4 = new Uint8Array(4);
const ANY6 = new Uint8Array(16);

const hex = (bytes: Uint8Array) => [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");

/**
 * The elements that let `entry`'s pod send as itself: its port, its MAC, its ARP senders (each
 * IPv4 address, and `0.0.0.0` for probes), its IPv4 sources, its IPv6 sources (each address, its
 * link-local address, `::` for duplicate address detection; the last two also for an IPv4-only
 * pod), the targets its neighbour advertisements may name (its IPv6 addresses and link-local
 * address) and the link-layer address its neighbour discovery options may name (its MAC).
 *
 * @example
 * ```ts
 * guardElements({ port: "fy0123456789ab", mac: "02:00:00:00:00:01", ips: ["10.244.0.5"] })
 *   .map((e) => e.set); // ["ports", "mac", "sarp", "sarp", "src4", "src6", "src6", "tgt6", "lla"]
 * ```
 */
export function guardElements(entry: PortEntry): GuardElement[] {
  // Each address's bytes once (an ADD waits for these: no parse twice, no text read back).
  const port = portKey(entry.port);
  const raw = macBytes(entry.mac);
  const mac = pad(raw);
  const p = JSON.stringify(entry.port);
  const m = entry.mac.toLowerCase();
  const v4: [string, Uint8Array][] = [];
  const v6: [string, Uint8Array][] = [];
  for (const ip of entry.ips) (ip.includes(":") ? v6 : v4).push([ip, ipBytes(ip).bytes]);
  const out: GuardElement[] = [
    { set: "ports", key: port, text: p },
    { set: "mac", key: concatBytes([port, mac]), text: `${p} . ${m}` },
  ];

  for (const [ip, bytes] of [...v4, ["0.0.0.0", ANY4] as const]) {
    out.push({ set: "sarp", key: concatBytes([port, mac, bytes]), text: `${p} . ${m} . ${ip}` });
  }
  for (const [ip, bytes] of v4) {
    out.push({ set: "src4", key: concatBytes([port, bytes]), text: `${p} . ${ip}` });
  }
  // The link-local address and :: whatever the pod's families: its kernel solicits routers and
  // joins multicast groups from them as soon as the link is up.
  const own = [...v6, [linkLocalOf(entry.mac), linkLocalBytes(raw)] as const];
  if (entry.index !== undefined) {
    // Its TCP in a unicast frame from each of its addresses (IPv6: and its link-local one, not
    // ::), to the node (`host`: the bridge's MAC, which the bridge marks so before its hook) or
    // to another station (`other`): see the guard chain's first rules.
    // As the kernel stores a `meta iif`: a 32-bit number in the host's byte order.
    const index = u32(entry.index);
    for (const [set, sources] of [["fast4", v4], ["fast6", own]] as const) {
      for (const [ip, bytes] of sources) {
        for (const [type, name] of UNICAST) {
          out.push({
            set,
            key: concatBytes([index, mac, bytes, TCP, type]),
            text: `${entry.index} . ${m} . ${ip} . tcp . ${name}`,
          });
        }
      }
    }
  }
  for (const [ip, bytes] of [...own, ["::", ANY6] as const]) {
    out.push({ set: "src6", key: concatBytes([port, bytes]), text: `${p} . ${ip}` });
  }
  for (const [, bytes] of own) {
    out.push({ set: "tgt6", key: concatBytes([port, bytes]), text: `${p} . 0x${hex(bytes)}` });
  }
  out.push({ set: "lla", key: concatBytes([port, mac]), text: `${p} . 0x${hex(raw)}` });
  for (const prefix of entry.allowed ?? []) {
    const cidr = parseCidr(prefix);
    out.push({
      set: cidr.network.family === 4 ? "allow4" : "allow6",
      key: concatBytes([port, ipBytes(formatIp(cidr.network)).bytes]),
      keyEnd: concatBytes([port, ipBytes(formatIp(lastAddress(cidr))).bytes]),
      text: `${p} . ${formatCidr(cidr)}`,
    });
  }
  return out;
}

/**
 * The interface group (`IFLA_GROUP`) the daemon gives the host end of every pod port it plugs on a
 * bridge when its guard table is `table`: a port of that group sends nothing until its pod is
 * listed, from the moment the link exists (set in the message that creates it), without a write
 * per ADD. Derived from the table's name: another daemon's ports (in a test, several daemons share
 * a namespace, each with a table of its own) are not this table's to drop. `0x46` ("F") and 24
 * bits of the name's FNV-1a hash: far from the small groups operators name, and a positive `int`
 * as `ip link` takes it.
 *
 * @example
 * ```ts
 * portGroup("ferry-portsec"); // 0x46…
 * ```
 */
export function portGroup(table: string): number {
  let h = 0x811c9dc5;
  for (const b of new TextEncoder().encode(table)) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return 0x46000000 | (h & 0xffffff);
}

/** ICMPv6 neighbour discovery and multicast listener messages (types 130-143). */
const ND_MLD = "130-143";

/** Neighbour solicitations and advertisements: the messages that fill neighbours' caches. */
const NS_NA = "{ nd-neighbor-solicit, nd-neighbor-advert }";

/**
 * The rules (each ending in `verdict`) that keep a pod's neighbour solicitations,
 * advertisements and router solicitations from naming another link-layer address. A
 * solicitation's or advertisement's options follow the 16-byte target (bit 192 of the ICMPv6
 * header); the IPv6 payload (the message and any extension header) may hold no option, or
 * exactly one of 8 bytes: a nonce (duplicate address detection) or a Source or Target Link-Layer
 * Address that `notOwn(208)` (a match on the MAC at that bit) does not refuse. A router
 * solicitation's option follows its 8-byte header (bit 64): none, or one Source Link-Layer
 * Address that `notOwn(80)` does not refuse (a router, the node, fills its cache from it as
 * from a solicitation). Several options are refused: they could hide a link-layer address behind
 * another (the kernel takes the first of each type, wherever it is), and a pod's kernel sends one
 * at most. None of them may carry an extension header (a pod's kernel adds none): in fragments, a
 * later one's option would pass unread. Without `notOwn` (an ipvlan: no MAC of its own) the
 * address itself is not checked.
 *
 * @example
 * ```ts
 * ndOptionRules("drop", (bit) => `@th,${bit},48 != 0x020000000001`).length; // 7
 * ```
 */
export function ndOptionRules(verdict: string, notOwn?: (bit: number) => string): string[] {
  const rs = "icmpv6 type nd-router-solicit";
  return [
    // No extension header, so no fragment: an option in a later fragment is read by no rule
    // here, yet the receiver reassembles it into the message.
    `icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } ip6 nexthdr != ipv6-icmp ${verdict}`,
    `icmpv6 type ${NS_NA} ip6 length != { 24, 32 } ${verdict}`,
    `icmpv6 type ${NS_NA} @th,192,16 != { 0x0101, 0x0201, 0x0e01 } ${verdict}`,
    ...(notOwn
      ? [`icmpv6 type ${NS_NA} @th,192,16 { 0x0101, 0x0201 } ${notOwn(208)} ${verdict}`]
      : []),
    `${rs} ip6 length != { 8, 16 } ${verdict}`,
    `${rs} @th,64,16 != 0x0101 ${verdict}`,
    ...(notOwn ? [`${rs} ${notOwn(80)} ${verdict}`] : []),
  ];
}

/** The sets and the chains of table `table`: everything but the elements. */
function body(table: string, opts: GuardOptions): string[] {
  const lines = [
    "  set closed { type ifname; }",
    "  set ports { type ifname; }",
    "  set mac { type ifname . ether_addr; }",
    "  set sarp { type ifname . ether_addr . ipv4_addr; }",
    "  set src4 { type ifname . ipv4_addr; }",
    "  set src6 { type ifname . ipv6_addr; }",
    // The target of a neighbour advertisement, read raw (this nft has no `icmpv6 taddr`).
    "  set tgt6 { typeof iifname . @th,64,128; }",
    // The MAC a neighbour solicitation's or advertisement's link-layer address option names.
    "  set lla { typeof iifname . @th,208,48; }",
    "  set allow4 { type ifname . ipv4_addr; flags interval; }",
    // The fast paths': a port's index, its MAC, its address, TCP and a unicast frame (to the
    // node, or to another station).
    "  set fast4 { type iface_index . ether_addr . ipv4_addr . inet_proto . pkt_type; }",
    "  set fast6 { type iface_index . ether_addr . ipv6_addr . inet_proto . pkt_type; }",
    "  set allow6 { type ifname . ipv6_addr; flags interval; }",
  ];
  for (const kind of GUARD_KINDS) {
    lines.push(
      `  set drop_${kind} { type ifname; flags dynamic; counter; size 65536; }`,
      `  chain forged_${kind} {`,
      // Counting may fail (a full set); the drop below it does not depend on it.
      `    update @drop_${kind} { iifname }`,
      "    drop",
      "  }",
    );
  }
  lines.push(
    // A port the guard does not list (a listed one pays the single lookup that sends it here).
    "  chain unlisted {",
    // Its record cannot be read: the guard fails closed for it, and counts.
    "    iifname @closed jump forged_unlisted",
    // A pod port of this daemon whose pod is not admitted (its ADD under way, or none): nothing,
    // not counted (the pod's own kernel speaks as its link comes up).
    `    meta iifgroup ${portGroup(table)} drop`,
    // Not this guard's (another daemon's, in a test, has its own table; an uplink).
    "    accept",
    "  }",
    "  chain guard {",
    "    type filter hook prerouting priority -300; policy accept;",
    // The common case first, before anything else is looked up: TCP from the port's own MAC and
    // address in a unicast frame to a unicast destination that is not link-local, which no rule
    // below drops. One lookup per family, keyed by what the kernel has at hand: the port's index
    // rather than its name, the source MAC and address, the protocol from the header (IPv6: no
    // extension header) and the packet type (unicast: to the node or to another station); the ethertype read
    // from the frame (a VLAN tag is neither). Then the destination: IPv4 below 224.0.0.0
    // (neither multicast nor broadcast), IPv6 neither multicast (ff00::/8) nor link-local
    // (fe80::/10), compared on its first 32 bits. Masked compares of up to 4 bytes run inline in
    // the kernel; every other expression is a function call per packet, and calls are what the
    // guard costs a CPU-bound path (bench:guard-floor). A port whose index is not in the sets
    // takes the long way. Only admitted ports have elements, so a port under ADD, closed or
    // another's never matches.
    "    ether type ip meta iif . ether saddr . ip saddr . ip protocol . meta pkttype @fast4 ip daddr & 224.0.0.0 != 224.0.0.0 accept",
    "    ether type ip6 meta iif . ether saddr . ip6 saddr . ip6 nexthdr . meta pkttype @fast6 @nh,192,32 & 0xff000000 != 0xff000000 @nh,192,32 & 0xffc00000 != 0xfe800000 accept",
    "    iifname != @ports jump unlisted",
    "    iifname . ether saddr != @mac jump forged_mac",
    // Only IPv4, IPv6 and ARP (a VLAN tag would hide the rest from the checks below).
    "    ether type != { ip, ip6, arp } jump forged_ethertype",
    "    iifname . arp saddr ether . arp saddr ip != @sarp jump forged_arp",
    "    iifname . ip saddr != @src4 iifname . ip saddr != @allow4 jump forged_ipv4",
    "    iifname . ip6 saddr != @src6 iifname . ip6 saddr != @allow6 jump forged_ipv6",
    // `::` only for duplicate address detection (a solicitation) and MLD reports.
    "    ip6 saddr :: meta l4proto != ipv6-icmp jump forged_ipv6",
    "    ip6 saddr :: icmpv6 type != { nd-neighbor-solicit, mld-listener-report, mld2-listener-report } jump forged_ipv6",
    "    icmpv6 type nd-neighbor-advert iifname . @th,64,128 != @tgt6 jump forged_nd",
    ...ndOptionRules("jump forged_nd", (bit) => `iifname . @th,${bit},48 != @lla`).map((r) =>
      `    ${r}`
    ),
    "    icmpv6 type nd-router-advert jump forged_ra",
    "    icmpv6 type nd-redirect jump forged_redirect",
    "    icmp type redirect jump forged_redirect",
    // A server's messages: from a server port, or to a client port.
    "    udp sport { 67, 547 } jump forged_dhcp",
    "    udp dport { 68, 546 } jump forged_dhcp",
    ...(opts.tunnelPort ? [`    udp dport ${opts.tunnelPort} jump forged_tunnel`] : []),
    // Pods share no link-local scope: no broadcast, multicast or link-local data between them
    // (policy knows pods by their pod addresses). What stays: ARP, ND and MLD, and DHCP clients.
    "    udp dport { 67, 547 } accept",
    `    icmpv6 type ${ND_MLD} accept`,
    "    ether type ip meta pkttype { broadcast, multicast } jump forged_linklocal",
    "    ip daddr { 255.255.255.255, 224.0.0.0/4 } jump forged_linklocal",
    "    ether type ip6 meta pkttype { broadcast, multicast } jump forged_linklocal",
    "    ip6 daddr { fe80::/10, ff00::/8 } jump forged_linklocal",
    "  }",
  );
  return lines;
}

/**
 * The base chain `guard` of table `table` alone, exactly as {@link guardTableScript} writes it with
 * `opts`, as a script that adds it to the table (its sets and other chains already there): what
 * `nft list chain` prints cannot stand in for it, as nft leaves out the ethertype compares the
 * rules' address loads depend on and adds its own (`meta protocol`) when the listing is read
 * back (the bench that switches the guard in place puts it back with this).
 *
 * @example
 * ```ts
 * guardChainScript("ferry-portsec"); // "table bridge ferry-portsec {\n  chain guard {\n…"
 * ```
 */
export function guardChainScript(table: string, opts: GuardOptions = {}): string {
  const lines = body(table, opts);
  const start = lines.indexOf("  chain guard {");
  const end = lines.indexOf("  }", start);
  return [`table bridge ${table} {`, ...lines.slice(start, end + 1), "}", ""].join("\n");
}

/**
 * One `nft -f` transaction that replaces bridge table `table` whole with the guard of `entries`:
 * the frames of a pod under guard are never let through unchecked, not even while it is rebuilt.
 * `opts` names the VXLAN port pods may not send to and the ports that send nothing (counted; the
 * unlisted ports of the table's {@link portGroup} send nothing either).
 *
 * @example
 * ```ts
 * guardTableScript("ferry-portsec", [{ port: "fy0123456789ab", mac: "02:00:00:00:00:01", ips: ["10.244.0.5"] }]);
 * ```
 */
export function guardTableScript(
  table: string,
  entries: PortEntry[],
  opts: GuardOptions = {},
): string {
  const lines = [
    `table bridge ${table}`,
    `delete table bridge ${table}`,
    `table bridge ${table} {`,
    ...body(table, opts),
    "}",
  ];
  for (const port of opts.closed ?? []) {
    lines.push(`add element bridge ${table} closed { ${JSON.stringify(port)} }`);
  }
  for (const e of entries) {
    for (const el of guardElements(e)) {
      lines.push(`add element bridge ${table} ${el.set} { ${el.text} }`);
    }
  }
  return lines.join("\n") + "\n";
}

/** The script that removes bridge table `table`, present or not. */
export function guardRemovalScript(table: string): string {
  return `table bridge ${table}\ndelete table bridge ${table}\n`;
}

/**
 * A pod interface's entry from the result of its ADD: the interface in the sandbox, its MAC and
 * the addresses on it; undefined when the result has no such interface or no MAC.
 *
 * @example
 * ```ts
 * entryOfResult(result, "fy0123456789ab")?.ips; // ["10.244.0.5"]
 * ```
 */
export function entryOfResult(
  result: {
    interfaces?: { mac?: string; sandbox?: string }[];
    ips?: { address: string; interface?: number }[];
  },
  port: string,
): PortEntry | undefined {
  // The last interface in a sandbox: the one this ADD made (a chained result lists earlier ones).
  const index = (result.interfaces ?? []).findLastIndex((i) => i.sandbox);
  const mac = result.interfaces?.[index]?.mac;
  if (index < 0 || !mac) return undefined;
  const ips = (result.ips ?? []).filter((ip) => ip.interface === index).map((ip) =>
    ip.address.split("/")[0]
  );
  return { port, mac, ips };
}
