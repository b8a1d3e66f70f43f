/**
 * rtnetlink messages as bytes: building the requests Ferry sends (links, addresses, routes) and
 * reading the kernel's answers. Pure: no sockets, tested byte for byte. Layouts follow
 * `linux/netlink.h`, `linux/rtnetlink.h`, `linux/if_link.h`, `linux/veth.h`, `linux/if_addr.h`
 * and `linux/neighbour.h`.
 *
 * @module
 */
import { concatBytes } from "../../../lib/bytes.ts";
import { GUARDED_GROUP_FWD_MASK } from "../plumber.ts";
import { formatIp, parseIp } from "../../ipam/cidr.ts";

/** Message types and flags Ferry uses. */
export const NL = {
  F_REQUEST: 0x1,
  F_ACK: 0x4,
  F_REPLACE: 0x100,
  F_EXCL: 0x200,
  F_CREATE: 0x400,
  ERROR: 2,
  DONE: 3,
  RTM_NEWLINK: 16,
  RTM_DELLINK: 17,
  RTM_GETLINK: 18,
  RTM_NEWADDR: 20,
  RTM_GETADDR: 22,
  RTM_NEWROUTE: 24,
  RTM_DELROUTE: 25,
  RTM_GETROUTE: 26,
  RTM_NEWNEIGH: 28,
  RTM_DELNEIGH: 29,
  RTM_GETNEIGH: 30,
  F_DUMP: 0x300,
} as const;

const IFLA_ADDRESS = 1;
const IFLA_IFNAME = 3;
const IFLA_MTU = 4;
const IFLA_MASTER = 10;
const IFLA_LINKINFO = 18;
const IFLA_GROUP = 27;
const IFLA_NET_NS_FD = 28;
const IFLA_INFO_KIND = 1;
const IFLA_INFO_DATA = 2;
const VETH_INFO_PEER = 1;
const IFA_ADDRESS = 1;
const IFA_LOCAL = 2;
const IFA_F_NODAD = 0x02;
const RTA_OIF = 4;
const RTA_GATEWAY = 5;
const NLA_F_NESTED = 0x8000;
const IFF_UP = 0x1;
const AF_INET = 2;
const AF_INET6 = 10;

/** A netlink attribute: a type and either raw bytes or nested attributes. */
export type Attr = [type: number, value: Uint8Array | Attr[]];

const align4 = (n: number) => (n + 3) & ~3;

/** Encodes attributes, padding each to 4 bytes; nested lists get NLA_F_NESTED. */
export function encodeAttrs(attrs: Attr[]): Uint8Array {
  const parts = attrs.map(([type, value]) => {
    const nested = !(value instanceof Uint8Array);
    const body = nested ? encodeAttrs(value) : value;
    const out = new Uint8Array(align4(4 + body.length));
    const view = new DataView(out.buffer);
    view.setUint16(0, 4 + body.length, true);
    view.setUint16(2, type | (nested ? NLA_F_NESTED : 0), true);
    out.set(body, 4);
    return out;
  });
  return concatBytes(parts);
}

/** A NUL-terminated string attribute value. */
export function str(text: string): Uint8Array {
  return new TextEncoder().encode(text + "\0");
}

/** A native-endian u32 attribute value. */
export function u32(n: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, n, true);
  return out;
}

/** The 6 bytes of a MAC written `aa:bb:cc:dd:ee:ff`. */
export function mac(text: string): Uint8Array {
  return Uint8Array.from(text.split(":").map((h) => parseInt(h, 16)));
}

/** The bytes of an IPv4 or IPv6 address (network order) and its family. */
export function ipBytes(text: string): { family: number; bytes: Uint8Array } {
  const ip = parseIp(text);
  const len = ip.family === 4 ? 4 : 16;
  const bytes = new Uint8Array(len);
  for (let i = 0; i < len; i++) {
    bytes[i] = Number((ip.value >> BigInt(8 * (len - 1 - i))) & 0xffn);
  }
  return { family: ip.family === 4 ? AF_INET : AF_INET6, bytes };
}

/** Frames a message: the 16-byte header, then `body`. */
export function frame(type: number, flags: number, seq: number, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(16 + body.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, out.length, true);
  view.setUint16(4, type, true);
  view.setUint16(6, flags | NL.F_REQUEST, true);
  view.setUint32(8, seq, true);
  view.setUint32(12, 0, true);
  out.set(body, 16);
  return out;
}

/** `struct ifinfomsg` (16 bytes). */
function ifinfomsg(index: number, flags: number, change: number, family = 0): Uint8Array {
  const out = new Uint8Array(16);
  const view = new DataView(out.buffer);
  view.setUint8(0, family);
  view.setInt32(4, index, true);
  view.setUint32(8, flags, true);
  view.setUint32(12, change, true);
  return out;
}

/** One end of a veth pair to create. */
export interface VethEnd {
  /** Its name. */
  name: string;
  /** Its MAC. */
  mac: string;
  /** Its MTU. */
  mtu: number;
  /** Its interface group (`IFLA_GROUP`), when not the default. */
  group?: number;
}

/**
 * RTM_NEWLINK creating a veth pair in one message: the host end up and enslaved to `masterIndex`
 * (in its interface group, when it has one), the peer created directly in the namespace
 * `peerNetnsFd` refers to.
 */
export function newVeth(
  seq: number,
  host: VethEnd,
  peer: VethEnd,
  masterIndex: number,
  peerNetnsFd: number,
): Uint8Array {
  const peerInfo = concatBytes([
    ifinfomsg(0, 0, 0),
    encodeAttrs([
      [IFLA_IFNAME, str(peer.name)],
      [IFLA_MTU, u32(peer.mtu)],
      [IFLA_ADDRESS, mac(peer.mac)],
      [IFLA_NET_NS_FD, u32(peerNetnsFd)],
    ]),
  ]);
  const body = concatBytes([
    ifinfomsg(0, IFF_UP, IFF_UP),
    encodeAttrs([
      [IFLA_IFNAME, str(host.name)],
      [IFLA_MTU, u32(host.mtu)],
      [IFLA_ADDRESS, mac(host.mac)],
      [IFLA_MASTER, u32(masterIndex)],
      ...(host.group ? [[IFLA_GROUP, u32(host.group)] as Attr] : []),
      [IFLA_LINKINFO, [[IFLA_INFO_KIND, str("veth")], [IFLA_INFO_DATA, [[
        VETH_INFO_PEER,
        peerInfo,
      ]]]]],
    ]),
  ]);
  return frame(NL.RTM_NEWLINK, NL.F_ACK | NL.F_CREATE | NL.F_EXCL, seq, body);
}

const AF_BRIDGE = 7;
const RTM_SETLINK = 19;
const IFLA_PROTINFO = 12;
const IFLA_BRPORT_MODE = 4;
const IFLA_BRPORT_LEARNING = 8;
const IFLA_BRPORT_UNICAST_FLOOD = 9;
const IFLA_BRPORT_GROUP_FWD_MASK = 31;

/**
 * RTM_SETLINK (family AF_BRIDGE) setting a pod's bridge port as Ferry keeps it: in hairpin mode, so
 * that a frame may leave by the port it came in (a pod reaching itself through a Service
 * address), and with learning off, so that no frame the pod sends teaches the bridge a MAC (the
 * bridge learns from link-local group frames before any netfilter hook sees them); its own MAC is
 * a static entry ({@link podPortEntry}); and with unicast flooding off, so that a frame to a MAC
 * the bridge does not know (someone else's, not the pod's) never reaches it. A `guarded` port
 * (port security's) also sends its frames to the link-local groups through the guard
 * (`GUARDED_GROUP_FWD_MASK`). As `bridge link set dev X hairpin on learning off flood off
 * [group_fwd_mask 0xfffd]`.
 */
export function podPortFlags(seq: number, index: number, guarded = false): Uint8Array {
  return frame(
    RTM_SETLINK,
    NL.F_ACK,
    seq,
    concatBytes([
      ifinfomsg(index, 0, 0, AF_BRIDGE),
      encodeAttrs([[IFLA_PROTINFO, [
        [IFLA_BRPORT_MODE, new Uint8Array([1])],
        [IFLA_BRPORT_LEARNING, new Uint8Array([0])],
        [IFLA_BRPORT_UNICAST_FLOOD, new Uint8Array([0])],
        ...(guarded ? [[IFLA_BRPORT_GROUP_FWD_MASK, u16(GUARDED_GROUP_FWD_MASK)] as Attr] : []),
      ]]]),
    ]),
  );
}

/** RTM_NEWLINK bringing the link with `index` up. */
export function linkUp(seq: number, index: number): Uint8Array {
  return frame(NL.RTM_NEWLINK, NL.F_ACK, seq, ifinfomsg(index, IFF_UP, IFF_UP));
}

const IFLA_LINK = 5;
const IFLA_MACVLAN_MODE = 1;
const IFLA_IPVLAN_MODE = 1;
const IFLA_IPVLAN_FLAGS = 2;

/** `MACVLAN_MODE_*` of `linux/if_link.h`, by the names iproute2 and the CNI plugin use. */
export const MACVLAN_MODES: Record<string, number> = {
  private: 1,
  vepa: 2,
  bridge: 4,
  passthru: 8,
};

/** `IPVLAN_MODE_*` of `linux/if_link.h`. */
export const IPVLAN_MODES: Record<string, number> = { l2: 0, l3: 1, l3s: 2 };

/** `IPVLAN_F_*` of `linux/if_link.h` (`bridge` is none). */
export const IPVLAN_FLAGS: Record<string, number> = { bridge: 0, private: 1, vepa: 2 };

/** A macvlan or ipvlan link to create. */
export interface SublinkLink {
  /** `macvlan` or `ipvlan`. */
  kind: "macvlan" | "ipvlan";
  /** Its name. */
  name: string;
  /** The index of the master link (in the namespace of the socket the request goes on). */
  masterIndex: number;
  /** A key of {@link MACVLAN_MODES} or {@link IPVLAN_MODES}. */
  mode: string;
  /** ipvlan only: a key of {@link IPVLAN_FLAGS}. */
  flag?: string;
  /** Its MTU; the master's when absent. */
  mtu?: number;
  /** macvlan only: its MAC; the kernel picks one when absent. */
  mac?: string;
  /** A descriptor of the namespace to create it in. */
  netnsFd: number;
}

function u16(n: number): Uint8Array {
  const out = new Uint8Array(2);
  new DataView(out.buffer).setUint16(0, n, true);
  return out;
}

function lookUp(table: Record<string, number>, key: string, what: string): number {
  const value = Object.hasOwn(table, key) ? table[key] : undefined;
  if (value === undefined) throw new RangeError(`unknown ${what} "${key}"`);
  return value;
}

/**
 * RTM_NEWLINK creating a macvlan or ipvlan link on `masterIndex` directly in the namespace
 * `netnsFd` refers to (down; configured there), as `ip link add link M name N [mtu] [address]
 * netns NS type macvlan mode X` does; refused (EEXIST) when the name is taken there.
 *
 * @example
 * ```ts
 * newSublink(seq, { kind: "macvlan", name: "net1", masterIndex: 2, mode: "bridge", netnsFd: 9 });
 * ```
 */
export function newSublink(seq: number, link: SublinkLink): Uint8Array {
  const data: Attr[] = link.kind === "macvlan"
    ? [[IFLA_MACVLAN_MODE, u32(lookUp(MACVLAN_MODES, link.mode, "macvlan mode"))]]
    : [
      [IFLA_IPVLAN_MODE, u16(lookUp(IPVLAN_MODES, link.mode, "ipvlan mode"))],
      ...(link.flag
        ? [[IFLA_IPVLAN_FLAGS, u16(lookUp(IPVLAN_FLAGS, link.flag, "ipvlan flag"))] as Attr]
        : []),
    ];
  const attrs: Attr[] = [
    [IFLA_IFNAME, str(link.name)],
    [IFLA_LINK, u32(link.masterIndex)],
    [IFLA_NET_NS_FD, u32(link.netnsFd)],
  ];
  if (link.mtu) attrs.push([IFLA_MTU, u32(link.mtu)]);
  if (link.kind === "macvlan" && link.mac) attrs.push([IFLA_ADDRESS, mac(link.mac)]);
  attrs.push([IFLA_LINKINFO, [[IFLA_INFO_KIND, str(link.kind)], [IFLA_INFO_DATA, data]]]);
  return byAttrs(NL.RTM_NEWLINK, NL.F_ACK | NL.F_CREATE | NL.F_EXCL, seq, attrs);
}

/** `RT_SCOPE_LINK`: the scope of on-link routes and of link-local addresses. */
export const RT_SCOPE_LINK = 253;
const RTPROT_BOOT = 3;

/**
 * RTM_NEWROUTE of `dst` out of link `index` in the main table, via `gw` or on-link (IPv4 on-link
 * routes with link scope), as `ip route add DST [via GW] dev DEV` does: refused (EEXIST) when
 * the route is there.
 */
export function newPodRoute(seq: number, index: number, dst: string, gw?: string): Uint8Array {
  const [addr, len] = dst.split("/");
  const to = ipBytes(addr);
  const head = rtmsg(to.family, Number(len), RTPROT_BOOT, 0);
  if (!gw && to.family === AF_INET) head[6] = RT_SCOPE_LINK;
  const attrs: Attr[] = [];
  if (Number(len) > 0) attrs.push([RTA_DST, to.bytes]);
  if (gw) attrs.push([RTA_GATEWAY, ipBytes(gw).bytes]);
  attrs.push([RTA_OIF, u32(index)]);
  return frame(
    NL.RTM_NEWROUTE,
    NL.F_ACK | NL.F_CREATE | NL.F_EXCL,
    seq,
    concatBytes([head, encodeAttrs(attrs)]),
  );
}

/** RTM_GETADDR dumping every address of the namespace (each answer names its link). */
export function dumpAddrs(seq: number): Uint8Array {
  return frame(NL.RTM_GETADDR, NL.F_DUMP, seq, new Uint8Array(8));
}

/** A link message whose link (or dump filter) is given by attributes only: no index, no flags. */
function byAttrs(type: number, flags: number, seq: number, attrs: Attr[]): Uint8Array {
  return frame(type, flags, seq, concatBytes([ifinfomsg(0, 0, 0), encodeAttrs(attrs)]));
}

/** RTM_GETLINK asking for the link called `name`. */
export function getLink(seq: number, name: string): Uint8Array {
  return byAttrs(NL.RTM_GETLINK, 0, seq, [[IFLA_IFNAME, str(name)]]);
}

/**
 * RTM_GETLINK dumping the links enslaved to the link with index `master` (a bridge's ports). The
 * kernel filters the dump on `IFLA_MASTER`; each answer also carries its master
 * ({@link Reply.master}), so a reader can check it where a kernel would not filter.
 */
export function dumpLinksOf(seq: number, master: number): Uint8Array {
  return byAttrs(NL.RTM_GETLINK, NL.F_DUMP, seq, [[IFLA_MASTER, u32(master)]]);
}

/** RTM_DELLINK of the link called `name`. */
export function delLink(seq: number, name: string): Uint8Array {
  return byAttrs(NL.RTM_DELLINK, NL.F_ACK, seq, [[IFLA_IFNAME, str(name)]]);
}

/** RTM_NEWADDR of `cidr` on link `index` (IPv6 without duplicate address detection). */
export function newAddr(seq: number, index: number, cidr: string): Uint8Array {
  const [address, prefix] = cidr.split("/");
  const { family, bytes } = ipBytes(address);
  const head = new Uint8Array(8);
  const view = new DataView(head.buffer);
  view.setUint8(0, family);
  view.setUint8(1, Number(prefix));
  view.setUint8(2, family === AF_INET6 ? IFA_F_NODAD : 0);
  view.setUint32(4, index, true);
  const attrs: Attr[] = family === AF_INET
    ? [[IFA_LOCAL, bytes], [IFA_ADDRESS, bytes]]
    : [[IFA_ADDRESS, bytes]];
  return frame(
    NL.RTM_NEWADDR,
    NL.F_ACK | NL.F_CREATE | NL.F_EXCL,
    seq,
    concatBytes([head, encodeAttrs(attrs)]),
  );
}

/** RTM_NEWROUTE of a default route via `gateway` out of link `index` (main table). */
export function newDefaultRoute(seq: number, index: number, gateway: string): Uint8Array {
  const { family, bytes } = ipBytes(gateway);
  const head = Uint8Array.of(family, 0, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0);
  return frame(
    NL.RTM_NEWROUTE,
    NL.F_ACK | NL.F_CREATE | NL.F_EXCL,
    seq,
    concatBytes([head, encodeAttrs([[RTA_GATEWAY, bytes], [RTA_OIF, u32(index)]])]),
  );
}

const RT_TABLE_MAIN = 254;
const RTN_UNICAST = 1;
const RTNH_F_ONLINK = 4;
const RTA_DST = 1;
const RTA_TABLE = 15;

/** A route as Ferry programs and reads it: destination, next hop, device, protocol. */
export interface RouteSpec {
  /** Destination prefix, e.g. `10.244.2.0/24`. */
  dst: string;
  /** Next hop. */
  via?: string;
  /** Output link index (onlink routes through an overlay device). */
  oif?: number;
  /** Whether the next hop is on the link without a covering prefix. */
  onlink?: boolean;
  /** `rtm_protocol`. */
  protocol: number;
  /** The routing table (main when absent). */
  table?: number;
}

function rtmsg(family: number, dstLen: number, protocol: number, flags: number): Uint8Array {
  const out = new Uint8Array(12);
  const view = new DataView(out.buffer);
  view.setUint8(0, family);
  view.setUint8(1, dstLen);
  view.setUint8(4, RT_TABLE_MAIN);
  view.setUint8(5, protocol);
  view.setUint8(6, 0); // RT_SCOPE_UNIVERSE
  view.setUint8(7, RTN_UNICAST);
  view.setUint32(8, flags, true);
  return out;
}

/**
 * RTM_NEWROUTE adding or replacing `route` in the main table, or RTM_DELROUTE removing it.
 *
 * @example
 * ```ts
 * routeRequest(NL.RTM_NEWROUTE, seq, { dst: "10.244.2.0/24", via: "192.0.2.12", protocol: 199 });
 * ```
 */
export function routeRequest(
  type: typeof NL.RTM_NEWROUTE | typeof NL.RTM_DELROUTE,
  seq: number,
  route: RouteSpec,
): Uint8Array {
  const [addr, len] = route.dst.split("/");
  const dst = ipBytes(addr);
  const attrs: Attr[] = [[RTA_DST, dst.bytes]];
  if (route.via) attrs.push([RTA_GATEWAY, ipBytes(route.via).bytes]);
  if (route.oif !== undefined) attrs.push([RTA_OIF, u32(route.oif)]);
  const flags = type === NL.RTM_NEWROUTE ? NL.F_ACK | NL.F_CREATE | NL.F_REPLACE : NL.F_ACK;
  return frame(
    type,
    flags,
    seq,
    concatBytes([
      rtmsg(dst.family, Number(len), route.protocol, route.onlink ? RTNH_F_ONLINK : 0),
      encodeAttrs(attrs),
    ]),
  );
}

/** RTM_GETROUTE dumping every route of `family` (4 or 6). */
export function dumpRoutes(seq: number, family: 4 | 6): Uint8Array {
  return frame(
    NL.RTM_GETROUTE,
    NL.F_DUMP,
    seq,
    rtmsg(family === 4 ? AF_INET : AF_INET6, 0, 0, 0),
  );
}

/** RTM_GETLINK asking for the link with `index` (its answer carries the name). */
export function getLinkByIndex(seq: number, index: number): Uint8Array {
  return frame(NL.RTM_GETLINK, 0, seq, ifinfomsg(index, 0, 0));
}

function formatAddr(bytes: Uint8Array): string {
  let value = 0n;
  for (const b of bytes) value = (value << 8n) | BigInt(b);
  return formatIp({ family: bytes.length === 4 ? 4 : 6, value });
}

function parseAttrs(buf: Uint8Array): Map<number, Uint8Array> {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const attrs = new Map<number, Uint8Array>();
  let at = 0;
  while (at + 4 <= buf.length) {
    const len = view.getUint16(at, true);
    if (len < 4 || at + len > buf.length) break;
    attrs.set(view.getUint16(at + 2, true) & 0x3fff, buf.subarray(at + 4, at + len));
    at += align4(len);
  }
  return attrs;
}

function parseRoute(body: Uint8Array): RouteSpec {
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  const family = view.getUint8(0);
  const attrs = parseAttrs(body.subarray(12));
  const dst = attrs.get(RTA_DST);
  const gw = attrs.get(RTA_GATEWAY);
  const oif = attrs.get(RTA_OIF);
  const table = attrs.get(RTA_TABLE);
  const route: RouteSpec = {
    dst: `${dst ? formatAddr(dst) : family === AF_INET ? "0.0.0.0" : "::"}/${view.getUint8(1)}`,
    protocol: view.getUint8(5),
    table: table
      ? new DataView(table.buffer, table.byteOffset).getUint32(0, true)
      : view.getUint8(4),
  };
  if (gw) route.via = formatAddr(gw);
  if (oif) route.oif = new DataView(oif.buffer, oif.byteOffset).getUint32(0, true);
  if (view.getUint32(8, true) & RTNH_F_ONLINK) route.onlink = true;
  return route;
}

/** One message of a kernel answer. */
export interface Reply {
  /** Its type (NL.ERROR for acks and errors). */
  type: number;
  /** Its sequence number. */
  seq: number;
  /** For NL.ERROR: 0 for an ack, else a negative errno. */
  error?: number;
  /** For RTM_NEWLINK: the link's index. */
  index?: number;
  /** For RTM_NEWLINK: the link's name. */
  name?: string;
  /** For RTM_NEWLINK: the index of the link it is enslaved to (a bridge), if any. */
  master?: number;
  /** For RTM_NEWLINK with its MTU: its MAC, its MTU and whether it is up (administratively). */
  link?: { mac?: string; mtu?: number; up: boolean };
  /** For RTM_NEWADDR (a dump's entries). */
  addr?: AddrSpec;
  /** For RTM_NEWROUTE (a dump's entries). */
  route?: RouteSpec;
  /** For RTM_NEWNEIGH (a dump's entries). */
  neigh?: NeighSpec;
}

/** Splits a buffer of answers into messages. */
export function parseReplies(buf: Uint8Array): Reply[] {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const out: Reply[] = [];
  let at = 0;
  while (at + 16 <= buf.length) {
    const len = view.getUint32(at, true);
    if (len < 16 || at + len > buf.length) break;
    const reply: Reply = { type: view.getUint16(at + 4, true), seq: view.getUint32(at + 8, true) };
    if (reply.type === NL.ERROR) reply.error = view.getInt32(at + 16, true);
    if (reply.type === NL.RTM_NEWLINK) {
      reply.index = view.getInt32(at + 20, true);
      const attrs = parseAttrs(buf.subarray(at + 32, at + len));
      const name = attrs.get(IFLA_IFNAME);
      if (name) reply.name = new TextDecoder().decode(name.subarray(0, name.indexOf(0) >>> 0));
      const master = attrs.get(IFLA_MASTER);
      if (master?.length === 4) {
        reply.master = new DataView(master.buffer, master.byteOffset).getUint32(0, true);
      }
      const ll = attrs.get(IFLA_ADDRESS);
      const mtu = attrs.get(IFLA_MTU);
      if (mtu?.length === 4) { // a link's whole description (the kernel's always has its MTU)
        reply.link = {
          up: (view.getUint32(at + 24, true) & IFF_UP) !== 0,
          mtu: new DataView(mtu.buffer, mtu.byteOffset).getUint32(0, true),
        };
        if (ll?.length === 6) reply.link.mac = macText(ll);
      }
    }
    if (reply.type === NL.RTM_NEWADDR) reply.addr = parseAddr(buf.subarray(at + 16, at + len));
    if (reply.type === NL.RTM_NEWROUTE) reply.route = parseRoute(buf.subarray(at + 16, at + len));
    if (reply.type === NL.RTM_NEWNEIGH) reply.neigh = parseNeigh(buf.subarray(at + 16, at + len));
    out.push(reply);
    at += align4(len);
  }
  return out;
}

const NDA_DST = 1;
const NDA_LLADDR = 2;
/** `NUD_PERMANENT`. */
const NUD_PERMANENT = 0x80;
/** `NTF_SELF`: an entry of the device's own table (a VXLAN device's forwarding database). */
const NTF_SELF = 0x02;

/**
 * A neighbour entry (`kind: "neigh"`, an IP's link-layer address) or a forwarding-database entry of
 * a VXLAN device (`kind: "fdb"`, which remote endpoint a MAC lives behind).
 */
export interface NeighSpec {
  /** Which table. */
  kind: "neigh" | "fdb";
  /** The device's index. */
  ifindex: number;
  /** neigh: the IP; fdb: the remote endpoint's IP. */
  dst?: string;
  /** The MAC. */
  mac?: string;
  /** Whether the entry is permanent (`NUD_PERMANENT`). */
  permanent?: boolean;
}

function ndmsg(kind: NeighSpec["kind"], ifindex: number, dst: string | undefined): Uint8Array {
  const out = new Uint8Array(12);
  const view = new DataView(out.buffer);
  view.setUint8(0, kind === "fdb" ? AF_BRIDGE : dst ? ipBytes(dst).family : AF_INET);
  view.setInt32(4, ifindex, true);
  view.setUint16(8, NUD_PERMANENT, true);
  view.setUint8(10, kind === "fdb" ? NTF_SELF : 0);
  return out;
}

/**
 * RTM_NEWNEIGH adding or replacing a permanent entry, or RTM_DELNEIGH removing one: like `ip neigh
 * replace <dst> lladdr <mac> dev <dev> nud permanent` and `bridge fdb replace <mac> dev <dev> dst
 * <dst> self permanent`.
 *
 * @example
 * ```ts
 * neighRequest(NL.RTM_NEWNEIGH, seq, { kind: "neigh", ifindex: 7, dst: "10.244.2.0", mac: "0e:…" });
 * ```
 */
export function neighRequest(
  type: typeof NL.RTM_NEWNEIGH | typeof NL.RTM_DELNEIGH,
  seq: number,
  entry: NeighSpec,
): Uint8Array {
  const attrs: Attr[] = [];
  if (entry.dst) attrs.push([NDA_DST, ipBytes(entry.dst).bytes]);
  if (entry.mac) attrs.push([NDA_LLADDR, mac(entry.mac)]);
  const flags = type === NL.RTM_NEWNEIGH ? NL.F_ACK | NL.F_CREATE | NL.F_REPLACE : NL.F_ACK;
  return frame(
    type,
    flags,
    seq,
    concatBytes([ndmsg(entry.kind, entry.ifindex, entry.dst), encodeAttrs(attrs)]),
  );
}

/** `NUD_NOARP`: what `bridge fdb` calls a static entry (it never ages). */
const NUD_NOARP = 0x40;
/** `NTF_MASTER`: an entry of the bridge the port belongs to. */
const NTF_MASTER = 0x04;
/** `NTF_STICKY`: the entry never moves to another port, whatever that port sends. */
const NTF_STICKY = 0x40;

/**
 * RTM_NEWNEIGH (family AF_BRIDGE) adding or replacing the static, sticky forwarding entry of a pod
 * port's MAC on its bridge: frames to `mac` leave by the port with `portIndex`, and no frame on
 * another port moves it. As `bridge fdb replace MAC dev PORT master static sticky`.
 */
export function podPortEntry(seq: number, portIndex: number, podMac: string): Uint8Array {
  const msg = new Uint8Array(12);
  const view = new DataView(msg.buffer);
  view.setUint8(0, AF_BRIDGE);
  view.setInt32(4, portIndex, true);
  view.setUint16(8, NUD_NOARP, true);
  view.setUint8(10, NTF_MASTER | NTF_STICKY);
  return frame(
    NL.RTM_NEWNEIGH,
    NL.F_ACK | NL.F_CREATE | NL.F_REPLACE,
    seq,
    concatBytes([msg, encodeAttrs([[NDA_LLADDR, mac(podMac)]])]),
  );
}

/** RTM_GETNEIGH dumping the IPv4 neighbour table (`neigh`) or the forwarding databases (`fdb`). */
export function dumpNeigh(seq: number, kind: NeighSpec["kind"]): Uint8Array {
  const body = new Uint8Array(12);
  body[0] = kind === "fdb" ? AF_BRIDGE : AF_INET;
  return frame(NL.RTM_GETNEIGH, NL.F_DUMP, seq, body);
}

function parseNeigh(body: Uint8Array): NeighSpec {
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  const attrs = parseAttrs(body.subarray(12));
  const entry: NeighSpec = {
    kind: view.getUint8(0) === AF_BRIDGE ? "fdb" : "neigh",
    ifindex: view.getInt32(4, true),
  };
  if (view.getUint16(8, true) & NUD_PERMANENT) entry.permanent = true;
  const dst = attrs.get(NDA_DST);
  const ll = attrs.get(NDA_LLADDR);
  if (dst) entry.dst = formatAddr(dst);
  if (ll?.length === 6) entry.mac = macText(ll);
  return entry;
}

function macText(bytes: Uint8Array): string {
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join(":");
}

/** An address as a dump answers it. */
export interface AddrSpec {
  /** The index of its link. */
  index: number;
  /** `address/prefix`. */
  cidr: string;
  /** Its scope (`RT_SCOPE_*`: 0 universe, 253 link, 254 host). */
  scope: number;
}

function parseAddr(body: Uint8Array): AddrSpec {
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  const attrs = parseAttrs(body.subarray(8));
  const bytes = attrs.get(IFA_LOCAL) ?? attrs.get(IFA_ADDRESS) ?? new Uint8Array(4);
  return {
    index: view.getUint32(4, true),
    cidr: `${formatAddr(bytes)}/${view.getUint8(1)}`,
    scope: view.getUint8(3),
  };
}
