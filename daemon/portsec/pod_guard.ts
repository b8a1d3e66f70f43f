/**
 * Port security for macvlan and ipvlan interfaces, whose frames leave through the host's master
 * link and never meet the bridge table's hook: a `netdev` table in the pod's own namespace, one per
 * interface, whose chain on the interface's `egress` hook drops what the pod may not send (the
 * kinds of {@link GUARD_KINDS}, each rule counted and named for its kind). It holds against a pod
 * without `NET_ADMIN` (which no runtime grants by default): such a pod can neither change the
 * table nor its interface's MAC and addresses. Pure: the script only.
 *
 * @module
 */
import { ipBytes } from "../net/netlink/messages.ts";
import { linkLocalOf, ndOptionRules } from "./guard_table.ts";

/** What one macvlan or ipvlan interface may send. */
export interface PodLinkGuard {
  /** The interface in the pod. */
  ifname: string;
  /** Its MAC, when it has one of its own (macvlan; an ipvlan shares its master's). */
  mac?: string;
  /** Its addresses (no prefix length). */
  ips: string[];
  /** Its IPAM is DHCP: discovers and requests from 0.0.0.0 go out. */
  dhcp?: boolean;
}

/**
 * Whether interface `ifname` can be guarded: its name goes into the script as part of the table's
 * name, which nft reads only unquoted (letters, digits, `.`, `-`, `_`). A pod may ask for any
 * name Linux takes (`net#1`, `a;b`, `x{}`); such a name would end the table's name early (a
 * comment, a second command) and nft would refuse the whole script.
 *
 * @example
 * ```ts
 * guardableIfname("net1"); // true
 * guardableIfname("net#1"); // false
 * ```
 */
export function guardableIfname(ifname: string): boolean {
  return /^[A-Za-z0-9._-]{1,15}$/.test(ifname);
}

/** The table's name for interface `ifname` (one table per interface, replaced whole). */
export function podGuardTable(table: string, ifname: string): string {
  return `${table}-${ifname}`;
}

const set = (items: string[]) => `{ ${items.join(", ")} }`;
const hex = (ip: string) =>
  "0x" + [...ipBytes(ip).bytes].map((b) => b.toString(16).padStart(2, "0")).join("");

/**
 * One `nft -f` transaction (run inside the pod's namespace) that replaces the interface's guard
 * table whole.
 *
 * @example
 * ```ts
 * podGuardScript("ferry-portsec", { ifname: "net1", mac: "02:00:00:00:00:01", ips: ["192.168.1.5"] });
 * ```
 */
export function podGuardScript(table: string, g: PodLinkGuard): string {
  const name = podGuardTable(table, g.ifname);
  const v4 = g.ips.filter((ip) => !ip.includes(":"));
  const v6 = g.ips.filter((ip) => ip.includes(":"));
  // An ipvlan's link-local address is not its own MAC's: any link-local address then.
  const linkLocal = g.mac ? linkLocalOf(g.mac) : "fe80::/64";
  const drop = (kind: string) => `counter drop comment "${kind}"`;
  const rules = [
    ...(g.mac ? [`ether saddr != ${g.mac} ${drop("mac")}`] : []),
    `ether type != { ip, ip6, arp } ${drop("ethertype")}`,
    ...(g.mac ? [`arp saddr ether != ${g.mac} ${drop("arp")}`] : []),
    `arp saddr ip != ${set([...v4, "0.0.0.0"])} ${drop("arp")}`,
    ...(g.dhcp ? ["ip saddr 0.0.0.0 udp sport 68 udp dport 67 accept"] : []),
    v4.length ? `ip saddr != ${set(v4)} ${drop("ipv4")}` : `ether type ip ${drop("ipv4")}`,
    `ip6 saddr != ${set([...v6, linkLocal, "::"])} ${drop("ipv6")}`,
    // `::` only for duplicate address detection (a solicitation) and MLD reports.
    `ip6 saddr :: meta l4proto != ipv6-icmp ${drop("ipv6")}`,
    `ip6 saddr :: icmpv6 type != { nd-neighbor-solicit, mld-listener-report, mld2-listener-report } ${
      drop("ipv6")
    }`,
    ...(g.mac
      ? [
        `icmpv6 type nd-neighbor-advert @th,64,128 != ${set([...v6, linkLocal].map(hex))} ${
          drop("nd")
        }`,
      ]
      : []),
    ...ndOptionRules(
      drop("nd"),
      g.mac ? (bit) => `@th,${bit},48 != 0x${g.mac!.replaceAll(":", "")}` : undefined,
    ),
    `icmpv6 type nd-router-advert ${drop("ra")}`,
    `icmpv6 type nd-redirect ${drop("redirect")}`,
    `icmp type redirect ${drop("redirect")}`,
    `udp sport { 67, 547 } ${drop("dhcp")}`,
    `udp dport { 68, 546 } ${drop("dhcp")}`,
  ];
  return [
    `table netdev ${name}`,
    `delete table netdev ${name}`,
    `table netdev ${name} {`,
    "  chain guard {",
    `    type filter hook egress device ${JSON.stringify(g.ifname)} priority -300; policy accept;`,
    ...rules.map((r) => `    ${r}`),
    "  }",
    "}",
  ].join("\n") + "\n";
}
