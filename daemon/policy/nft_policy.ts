/**
 * The verdicts of this node's pods as one nftables table (family inet), pure. The base chains
 * accept established and related traffic first, then look up the sender's and the receiver's
 * address in a verdict map per direction and family, which jumps to the allowing rules of that
 * pod: one rule per allowing (rule, peers, ports) combination, ending in `return` (allowed so
 * far: the other direction is looked at next), shared by every pod the same rules isolate (the
 * chain is named for its content). A packet that no rule allowed goes on, by a second map keyed
 * by the pod's address, to the pod's own chain: logged (with `policy.logDenied`), counted as the
 * pod's and dropped. A pod that nothing is allowed for goes there at once. `forward` carries
 * everything between pods, to and from other nodes and the outside (kube-proxy has already
 * translated a Service address to the backend's); `input` a pod's traffic to its own node.
 * Traffic from the node to its pods (the kubelet's probes) leaves through `output`, which the
 * table does not hook: always allowed, as the API documents.
 *
 * A peer's pod addresses are a named set, declared once and shared by every rule with that peer
 * (the selectors of many policies are the same), so the table grows with the distinct peers and
 * rule combinations, not with pods × rules. After its first write the table is changed in place
 * (`policyUpdateScript`, `nft_scripts.ts`): a pod joining or leaving a selector changes set
 * elements; a new pod that the same rules isolate adds its own chain and map entries
 * (`podAddition`, `nft_pod_addition.ts`: what its ADD writes). Nothing else of the node's rules
 * is touched.
 *
 * What goes into the table is made by the modules beside this one: the script's safe text
 * (`nft_text.ts`), the named sets (`nft_sets.ts`) and the chains' rules (`nft_rules.ts`); a pod's
 * own network namespace gets a table of its own (`nft_interface_table.ts`).
 *
 * @module
 */
import type { PodVerdict } from "./compile.ts";
import { denyPrefix } from "./nflog.ts";
import { isV6, nftAddress } from "./nft_text.ts";
import { declaration, fnv1a, type NamedCollection, NamedSets } from "./nft_sets.ts";
import { allowLines, type DenyLog, type PodRule, podRuleText } from "./nft_rules.ts";

/**
 * One entry of a verdict map: a pod's address jumps to a chain. The maps `in4`, `in6`, `eg4`,
 * `eg6` (by direction and family) lead from the base chains to the pod's allowing chain; `ind4`,
 * `ind6`, `egd4`, `egd6` lead from the end of an allowing chain to the pod's own chain, where what
 * none of its rules allowed is dropped.
 */
export interface MapEntry {
  /** The map. */
  map: string;
  /** The pod's address. */
  ip: string;
  /** The chain. */
  chain: string;
}

/** The verdict maps, by direction and family; `d`: the maps to the pods' own chains. */
export const VERDICT_MAPS = ["in4", "in6", "eg4", "eg6", "ind4", "ind6", "egd4", "egd6"];

/** What one isolated pod adds to the table. */
export interface PodParts {
  /** Its allowing chains, named for their content (equal rules, one chain). */
  allow: Map<string, string[]>;
  /** Its own chains. */
  chains: Map<string, PodRule[]>;
  /** Its addresses' entries in the verdict maps. */
  entries: MapEntry[];
}

/**
 * The parts of one isolated pod. Names already in `taken` (chain name → lines) are not reused for
 * other content: an allowing chain of the same content is shared, a pod chain is the pod's alone.
 */
function podParts(
  v: PodVerdict,
  sets: NamedSets,
  taken: Map<string, string[]>,
  log?: DenyLog,
): PodParts {
  const who = `${v.pod.namespace}/${v.pod.name}`;
  const out: PodParts = { allow: new Map(), chains: new Map(), entries: [] };
  for (
    const [direction, rules, key] of [
      ["ingress", v.ingress, "in"],
      ["egress", v.egress, "eg"],
    ] as const
  ) {
    if (!rules) continue;
    const pod: PodRule[] = [];
    if (log) pod.push({ log: { prefix: denyPrefix(direction, who), ...log } });
    pod.push({ drop: `${who}: no ${direction} rule allows it` });
    let chain = `${key}-${fnv1a(who)}`;
    while (taken.has(chain)) chain += "x";
    out.chains.set(chain, pod);
    const lines = allowLines(rules, direction, sets);
    let allow: string | undefined;
    if (lines.length) {
      // What no rule allowed goes on to the pod's own chain, by the pod's address: the packet's
      // destination for ingress, its source for egress.
      const field = direction === "ingress" ? "daddr" : "saddr";
      lines.push(`ip ${field} vmap @${key}d4`, `ip6 ${field} vmap @${key}d6`, "drop");
      allow = `a${fnv1a(`${direction}\n${lines.join("\n")}`)}`;
      while (taken.has(allow) && taken.get(allow)!.join("\n") !== lines.join("\n")) allow += "x";
      out.allow.set(allow, lines);
    }
    for (const ip of v.pod.ips.map(nftAddress)) {
      const family = isV6(ip) ? 6 : 4;
      // Nothing allowed at all: straight to the pod's own chain.
      out.entries.push({ map: `${key}${family}`, ip, chain: allow ?? chain });
      if (allow) out.entries.push({ map: `${key}d${family}`, ip, chain });
    }
  }
  return out;
}

/**
 * The parts one pod adds to the table, alone: what an ADD writes before it answers when its
 * allowing chains are in the table already (the full table holds the same, named the same, unless
 * a hash collision renamed one: then the names differ and the ADD takes the slow way).
 */
export function renderPodParts(v: PodVerdict, log?: DenyLog): PodParts {
  return podParts(v, new NamedSets(), new Map(), log);
}

/** The policy table, apart from its fixed base chains. */
export interface RenderedTable {
  /** The named sets (peers) and the four verdict maps, by name. */
  sets: Map<string, NamedCollection>;
  /** The regular chains (allowing chains, pod chains) and their rules, by name. */
  chains: Map<string, string[]>;
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
  const parts = renderPolicyParts(verdicts, log);
  return parts && tableDefinition(table, parts);
}

/**
 * The table of {@link renderPolicyTable} as its parts; with `log`, each drop is logged to an
 * NFLOG group first (rate limited).
 */
export function renderPolicyParts(
  verdicts: PodVerdict[],
  log?: DenyLog,
): RenderedTable | undefined {
  if (!verdicts.length) return undefined;
  const named = new NamedSets();
  const chains = new Map<string, string[]>();
  const maps: Record<string, string[]> = Object.fromEntries(VERDICT_MAPS.map((m) => [m, []]));
  const mapped = new Set<string>();
  for (const v of verdicts) {
    const parts = podParts(v, named, chains, log);
    for (const [name, lines] of parts.allow) chains.set(name, lines);
    for (const [name, rules] of parts.chains) chains.set(name, rules.map(podRuleText));
    for (const e of parts.entries) {
      // One chain per address (a map key twice would fail the whole transaction).
      if (mapped.has(`${e.map} ${e.ip}`)) continue;
      mapped.add(`${e.map} ${e.ip}`);
      maps[e.map].push(mapElement(e));
    }
  }
  const sets = named.collections();
  for (const [name, elements] of Object.entries(maps)) {
    sets.set(name, {
      type: `${name.endsWith("6") ? "ipv6_addr" : "ipv4_addr"} : verdict`,
      elements,
    });
  }
  return { sets, chains };
}

/** A verdict map's element as nft writes it. */
export function mapElement(e: MapEntry): string {
  return `${e.ip} : jump ${e.chain}`;
}

/**
 * The base chains: established and related traffic first, then the sender's verdict and the
 * receiver's; a pod's traffic to its own node, the sender's. One base chain per hook: each is
 * walked by every packet.
 */
const BASE_CHAINS = [
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
];

/** The whole definition of a rendered table. */
export function tableDefinition(table: string, parts: RenderedTable): string {
  return [
    `table inet ${table} {`,
    ...[...parts.sets].map(([name, c]) => declaration(name, c)),
    ...[...parts.chains].map(([name, lines]) =>
      `  chain ${name} {\n${lines.map((l) => `    ${l}\n`).join("")}  }`
    ),
    ...BASE_CHAINS,
    "}",
  ].join("\n") + "\n";
}
