/**
 * The verdicts of this node's pods as one nftables table (family inet), pure: a verdict map per
 * direction and family keyed by pod address jumps to the pod's chain; a chain holds one rule per
 * allowing (rule, peers, ports) combination ending in `return` (allowed so far: the other
 * direction is looked at next), then a counted `drop`. The base chains accept established and
 * related traffic first, then look at the sender's egress chain and the receiver's ingress chain:
 * `forward` for everything between pods, to and from other nodes and the outside (kube-proxy has
 * already translated a Service address to the backend's), `input` for a pod's traffic to its own
 * node. Traffic from the node to its pods (the kubelet's probes) leaves through `output`, which
 * the table does not hook: always allowed, as the API documents.
 *
 * A peer's pod addresses are a named set, declared once and shared by every rule with that peer
 * (the selectors of many policies are the same), so the table grows with the distinct peers, not
 * with pods × rules; and when only the members of sets change (a pod joins or leaves a selector,
 * gets or loses an address) the table is not replaced but its sets' elements are added and
 * deleted ({@link policyUpdateScript}). Otherwise the whole table is replaced in one `nft -f`
 * transaction ({@link policyScript}); nothing else of the node's rules is touched.
 *
 * @module
 */
import { formatCidr, parseCidr } from "../ipam/cidr.ts";
import type { AllowRule, PeerSet, PodVerdict, PortMatch } from "./compile.ts";
import type { InterfaceVerdict } from "./multi_policy.ts";
import { denyPrefix } from "./nflog.ts";

/** Logging of denied packets: the NFLOG group, and packets logged per second at most. */
export interface DenyLog {
  /** The NFLOG group. */
  group: number;
  /** Packets logged per second at most (the kernel's limit, per pod and direction). */
  perSecond: number;
}

const V6 = (ip: string) => ip.includes(":");

/** `{ a, b }` or undefined when empty (nft has no empty anonymous set). */
function set(items: string[]): string | undefined {
  return items.length ? `{ ${items.join(", ")} }` : undefined;
}

function cidr(text: string): string {
  return formatCidr(parseCidr(text.includes("/") ? text : `${text}/${V6(text) ? 128 : 32}`));
}

/** Port matches grouped by protocol: `meta l4proto tcp th dport { 80, 90-99 }`. */
function portExprs(ports: "any" | PortMatch[]): string[] {
  if (ports === "any") return [""];
  const byProto = new Map<string, string[] | "all">();
  for (const p of ports) {
    const proto = p.protocol.toLowerCase();
    const known = byProto.get(proto);
    if (known === "all") continue;
    if (p.port === undefined) {
      byProto.set(proto, "all");
      continue;
    }
    const text = p.endPort !== undefined && p.endPort > p.port
      ? `${p.port}-${p.endPort}`
      : `${p.port}`;
    byProto.set(proto, [...(known ?? []), text]);
  }
  return [...byProto].map(([proto, list]) =>
    list === "all"
      ? `meta l4proto ${proto}`
      : `meta l4proto ${proto} th dport ${set([...new Set(list)])}`
  );
}

/** The named sets of one table: a set per (peer, family), declared once, shared by its rules. */
class NamedSets {
  /** Name → its elements, in the order first declared. */
  readonly elements = new Map<string, string[]>();
  readonly #names = new Map<string, string>();
  readonly #types = new Map<string, string>();

  /** The name of `peer`'s set of `family` addresses, declared with them on first use. */
  ref(peer: PeerSet, family: 4 | 6): string {
    const id = `${family} ${peer.key}`;
    let name = this.#names.get(id);
    if (!name) {
      name = `p${fnv1a(id)}`;
      while (this.elements.has(name)) name += "x";
      this.#names.set(id, name);
      this.#types.set(name, family === 6 ? "ipv6_addr" : "ipv4_addr");
      this.elements.set(name, peer.ips.filter((ip) => V6(ip) === (family === 6)));
    }
    return name;
  }

  /** The declarations, with their elements or without (the table's skeleton). */
  declarations(withElements: boolean): string[] {
    return [...this.elements].map(([name, elems]) => {
      const members = withElements && elems.length ? ` elements = { ${elems.join(", ")} };` : "";
      return `  set ${name} { type ${this.#types.get(name)};${members} }`;
    });
  }
}

/** FNV-1a of `text`, 8 hex digits. */
function fnv1a(text: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, "0");
}

/** Address matches of one family, for `saddr` (ingress) or `daddr` (egress). */
function peerExprs(
  rule: AllowRule,
  family: 4 | 6,
  field: "saddr" | "daddr",
  sets: NamedSets,
): string[] {
  const { peers } = rule;
  const ipKw = family === 6 ? "ip6" : "ip";
  if (peers === "any") return [family === 6 ? "meta nfproto ipv6" : "meta nfproto ipv4"];
  const mine = (ip: string) => V6(ip) === (family === 6);
  const out: string[] = [];
  if (rule.peerSets) {
    for (const peer of rule.peerSets) out.push(`${ipKw} ${field} @${sets.ref(peer, family)}`);
  } else {
    const ips = set(peers.ips.filter(mine));
    if (ips) out.push(`${ipKw} ${field} ${ips}`);
  }
  for (const b of peers.blocks) {
    if (!mine(b.cidr.split("/")[0])) continue;
    const except = set(b.except.filter((e) => mine(e.split("/")[0])).map(cidr));
    out.push(`${ipKw} ${field} ${cidr(b.cidr)}${except ? ` ${ipKw} ${field} != ${except}` : ""}`);
  }
  return out;
}

/**
 * The lines of one pod's chain for one direction. A pod's traffic to itself through a Service
 * (hairpinned back over the bridge) is judged like any other, as the upstream e2e specs expect;
 * only its loopback never reaches these hooks.
 */
function chainLines(
  rules: AllowRule[],
  direction: "ingress" | "egress",
  pod: string,
  sets: NamedSets,
  log?: DenyLog,
): string[] {
  const field = direction === "ingress" ? "saddr" : "daddr";
  const lines: string[] = [];
  for (const r of rules) {
    const note = `comment "${r.policy} ${direction}[${r.rule}]"`;
    if (r.triples) {
      for (const family of [4, 6] as const) {
        const ipKw = family === 6 ? "ip6" : "ip";
        const elems = set(
          r.triples.filter((t) => V6(t.ip) === (family === 6)).map((t) =>
            `${t.ip} . ${t.protocol.toLowerCase()} . ${t.port}`
          ),
        );
        if (elems) {
          lines.push(`${ipKw} daddr . meta l4proto . th dport ${elems} counter return ${note}`);
        }
      }
      continue;
    }
    for (const family of [4, 6] as const) {
      for (const peer of peerExprs(r, family, field, sets)) {
        for (const port of portExprs(r.ports)) {
          lines.push(`${[peer, port].filter(Boolean).join(" ")} counter return ${note}`);
        }
      }
    }
  }
  if (log) {
    lines.push(
      `limit rate ${log.perSecond}/second log prefix "${
        denyPrefix(direction, pod)
      }" group ${log.group}`,
    );
  }
  lines.push(`counter drop comment "${pod}: no ${direction} rule allows it"`);
  return lines;
}

/** A rendered table: its definition, and the same without its sets' elements, and those. */
export interface RenderedTable {
  /** The whole definition, the sets' elements included. */
  definition: string;
  /** The definition without the sets' elements: equal skeletons differ only in set members. */
  skeleton: string;
  /** Each named set's elements. */
  sets: Map<string, string[]>;
}

/**
 * The table's definition, or undefined when no pod of the node is isolated (then there is no
 * table at all: no rule for any packet to pass).
 */
export function renderPolicyTable(
  table: string,
  verdicts: PodVerdict[],
  log?: DenyLog,
): string | undefined {
  return renderPolicyParts(table, verdicts, log)?.definition;
}

/**
 * The table of {@link renderPolicyTable}, with its skeleton and sets apart; with `log`, each
 * drop is logged to an NFLOG group first (rate limited).
 */
export function renderPolicyParts(
  table: string,
  verdicts: PodVerdict[],
  log?: DenyLog,
): RenderedTable | undefined {
  if (!verdicts.length) return undefined;
  const sets = new NamedSets();
  const maps = {
    in4: [] as string[],
    in6: [] as string[],
    eg4: [] as string[],
    eg6: [] as string[],
  };
  const chains: string[] = [];
  const mapped = new Set<string>();
  verdicts.forEach((v, i) => {
    const pod = `${v.pod.namespace}/${v.pod.name}`;
    for (
      const [direction, rules, key] of [
        ["ingress", v.ingress, "in"],
        ["egress", v.egress, "eg"],
      ] as const
    ) {
      if (!rules) continue;
      const chain = `${key}-${i}`;
      chains.push(
        `  chain ${chain} {\n${
          chainLines(rules, direction, pod, sets, log).map((l) => `    ${l}\n`).join("")
        }  }`,
      );
      for (const ip of v.pod.ips) {
        // One chain per address (a map key twice would fail the whole transaction).
        if (mapped.has(`${key} ${ip}`)) continue;
        mapped.add(`${key} ${ip}`);
        maps[`${key}${V6(ip) ? 6 : 4}`].push(`${ip} : jump ${chain}`);
      }
    }
  });
  const map = (name: keyof typeof maps, type: string) => {
    const elems = set(maps[name]);
    return `  map ${name} {\n    type ${type} : verdict\n${
      elems ? `    elements = ${elems}\n` : ""
    }  }`;
  };
  const text = (withElements: boolean) =>
    [
      `table inet ${table} {`,
      ...sets.declarations(withElements),
      map("in4", "ipv4_addr"),
      map("in6", "ipv6_addr"),
      map("eg4", "ipv4_addr"),
      map("eg6", "ipv6_addr"),
      ...chains,
      "  chain forward {",
      "    type filter hook forward priority filter; policy accept;",
      "    ct state established,related accept",
      "    ip saddr vmap @eg4",
      "    ip6 saddr vmap @eg6",
      "    ip daddr vmap @in4",
      "    ip6 daddr vmap @in6",
      "  }",
      "  chain input {",
      "    type filter hook input priority filter; policy accept;",
      "    ct state established,related accept",
      "    ip saddr vmap @eg4",
      "    ip6 saddr vmap @eg6",
      "  }",
      "}",
    ].join("\n") + "\n";
  return { definition: text(true), skeleton: text(false), sets: sets.elements };
}

/**
 * The table of one pod's network namespace for its additional interfaces (MultiNetworkPolicy), or
 * undefined when none of them is isolated. Traffic to and from the pod passes its own `input` and
 * `output` hooks whatever the interface's kind (macvlan traffic never meets the node's hooks), so
 * the rules live there, matched by interface: established and related traffic first, IPv6
 * neighbour discovery (without which no IPv6 address answers at all), then the interface's
 * chain. Only the interfaces named are touched: the default interface is the node's table's.
 */
export function renderInterfaceTable(
  table: string,
  verdicts: InterfaceVerdict[],
): string | undefined {
  if (!verdicts.length) return undefined;
  const sets = new NamedSets();
  const chains: string[] = [];
  const input: string[] = [];
  const output: string[] = [];
  verdicts.forEach((v, i) => {
    const who = `${v.pod.namespace}/${v.pod.name} ${v.ifname}`;
    for (
      const [direction, rules, key, hook, match] of [
        ["ingress", v.ingress, "in", input, "iifname"],
        ["egress", v.egress, "eg", output, "oifname"],
      ] as const
    ) {
      if (!rules) continue;
      const chain = `${key}-${i}`;
      chains.push(
        `  chain ${chain} {\n${
          chainLines(rules, direction, who, sets).map((l) => `    ${l}\n`).join("")
        }  }`,
      );
      hook.push(`    ${match} "${v.ifname}" jump ${chain}`);
    }
  });
  const base = (name: string, lines: string[]) => [
    `  chain ${name} {`,
    `    type filter hook ${name} priority filter; policy accept;`,
    "    ct state established,related accept",
    "    icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit, nd-router-advert } accept",
    ...lines,
    "  }",
  ];
  return [
    `table inet ${table} {`,
    ...sets.declarations(true),
    ...chains,
    ...base("input", input),
    ...base("output", output),
    "}",
  ].join("\n") + "\n";
}

/**
 * One `nft -f` script that replaces the table whole (or removes it when `definition` is
 * undefined): declaring it first makes the delete valid whether or not it exists, and the three
 * commands are one transaction, so packets see the old rules or the new, never none.
 */
export function policyScript(table: string, definition: string | undefined): string {
  return `table inet ${table}\ndelete table inet ${table}\n${definition ?? ""}`;
}

/**
 * The `nft -f` script that brings table `table`, written as `before`, to `after` by adding and
 * deleting set elements alone, when their skeletons are the same; undefined when they are not
 * (the table must be replaced), and an empty string when nothing changed. One transaction:
 * packets see every set as it was or as it is.
 */
export function policyUpdateScript(
  table: string,
  before: RenderedTable,
  after: RenderedTable,
): string | undefined {
  if (before.skeleton !== after.skeleton) return undefined;
  const lines: string[] = [];
  for (const [name, now] of after.sets) {
    const was = new Set(before.sets.get(name) ?? []);
    const is = new Set(now);
    const added = now.filter((e) => !was.has(e));
    const removed = [...was].filter((e) => !is.has(e));
    if (removed.length) {
      lines.push(`delete element inet ${table} ${name} { ${removed.join(", ")} }`);
    }
    if (added.length) lines.push(`add element inet ${table} ${name} { ${added.join(", ")} }`);
  }
  return lines.length ? lines.join("\n") + "\n" : "";
}

/** Packets counted by one commented rule of the table. */
export interface RuleCount {
  /** What the rule is: `ns/policy ingress[i]` for an allowing rule, `ns/pod: no … rule allows it` for a drop. */
  comment: string;
  /** Packets it counted since the table was last written. */
  packets: number;
}

/** The counted rules of `nft -j list table` output (pure). */
export function ruleCounts(json: string): RuleCount[] {
  const out: RuleCount[] = [];
  const doc = JSON.parse(json) as {
    nftables?: { rule?: { comment?: string; expr?: { counter?: { packets: number } }[] } }[];
  };
  for (const item of doc.nftables ?? []) {
    const rule = item.rule;
    const counter = rule?.expr?.find((e) => e.counter)?.counter;
    if (rule?.comment && counter) out.push({ comment: rule.comment, packets: counter.packets });
  }
  return out;
}
