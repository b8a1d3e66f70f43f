/**
 * The rules of a policy table's chains, pure: the allowing rules of a direction (peers by their
 * named sets, ports grouped by protocol, each ending in `return`), and the closing rules of a
 * pod's own chain (the denied packet logged, then counted and dropped).
 *
 * @module
 */
import type { AllowRule, PortMatch } from "./compile.ts";
import { denyPrefix } from "./nflog.ts";
import { blockRanges } from "./address_ranges.ts";
import { anonymousSet, isV6, nftAddress, nftPort, nftProto, nftText } from "./nft_text.ts";
import type { NamedSets } from "./nft_sets.ts";

/** Logging of denied packets: the NFLOG group, and packets logged per second at most. */
export interface DenyLog {
  /** The NFLOG group. */
  group: number;
  /** Packets logged per second at most (the kernel's limit, per pod and direction). */
  perSecond: number;
}

/** Port matches grouped by protocol: `meta l4proto tcp th dport { 80, 90-99 }`. */
function portExprs(ports: "any" | PortMatch[]): string[] {
  if (ports === "any") return [""];
  const byProto = new Map<string, string[] | "all">();
  for (const p of ports) {
    const proto = nftProto(p.protocol);
    const known = byProto.get(proto);
    if (known === "all") continue;
    if (p.port === undefined) {
      byProto.set(proto, "all");
      continue;
    }
    const text = p.endPort !== undefined && p.endPort > p.port
      ? `${nftPort(p.port)}-${nftPort(p.endPort)}`
      : nftPort(p.port);
    byProto.set(proto, [...(known ?? []), text]);
  }
  return [...byProto].map(([proto, list]) =>
    list === "all"
      ? `meta l4proto ${proto}`
      : `meta l4proto ${proto} th dport ${anonymousSet([...new Set(list)])}`
  );
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
  const mine = (ip: string) => isV6(ip) === (family === 6);
  const out: string[] = [];
  if (rule.peerSets) {
    for (const peer of rule.peerSets) out.push(`${ipKw} ${field} @${sets.ref(peer, family)}`);
  } else {
    const ips = anonymousSet(peers.ips.filter(mine).map(nftAddress));
    if (ips) out.push(`${ipKw} ${field} ${ips}`);
  }
  // The blocks less their excepts, added up: one interval set, one match, however many.
  const ranges = blockRanges(peers.blocks, family);
  if (ranges.length) out.push(`${ipKw} ${field} @${sets.ranges(ranges, family)}`);
  return out;
}

/**
 * The allowing rules of one direction, each ending in `return`: allowed so far, the base chain
 * looks at the other direction next. A pod's traffic to itself through a Service (hairpinned back
 * over the bridge) is judged like any other, as the upstream e2e specs expect; only its loopback
 * never reaches these hooks.
 */
export function allowLines(
  rules: AllowRule[],
  direction: "ingress" | "egress",
  sets: NamedSets,
): string[] {
  const field = direction === "ingress" ? "saddr" : "daddr";
  const lines: string[] = [];
  for (const r of rules) {
    const note = `comment "${nftText(`${r.policy} ${direction}[${r.rule}]`)}"`;
    if (r.triples) {
      for (const family of [4, 6] as const) {
        const ipKw = family === 6 ? "ip6" : "ip";
        const elems = anonymousSet(
          r.triples.filter((t) => isV6(t.ip) === (family === 6)).map((t) =>
            `${nftAddress(t.ip)} . ${nftProto(t.protocol)} . ${nftPort(t.port)}`
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
  return lines;
}

/** The closing rules of a chain: the denied packet logged (rate limited), then counted and dropped. */
export function denyLines(direction: "ingress" | "egress", who: string, log?: DenyLog): string[] {
  return [
    ...(log ? [podRuleText({ log: { prefix: denyPrefix(direction, who), ...log } })] : []),
    podRuleText({ drop: `${who}: no ${direction} rule allows it` }),
  ];
}

/**
 * A rule of a pod's own chain, where what no rule allowed ends: the denied packet logged, or the
 * counted drop (named for the pod: its drops are counted and logged as its own). These two kinds
 * are all the rules a new pod's ADD writes, so they are also written in-process
 * (`nft_netlink.ts`).
 */
export type PodRule =
  | { log: { prefix: string; group: number; perSecond: number } }
  | { drop: string };

/** A pod rule as nft writes it. */
export function podRuleText(r: PodRule): string {
  if ("log" in r) {
    return `limit rate ${r.log.perSecond}/second log prefix "${
      nftText(r.log.prefix)
    }" group ${r.log.group}`;
  }
  return `counter drop comment "${nftText(r.drop)}"`;
}
