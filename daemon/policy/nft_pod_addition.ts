/**
 * What an ADD writes of its own pod before it answers, pure: the pod's chains and verdict map
 * entries as operations when the table as written holds the allowing chains they jump to
 * ({@link podAddition}), or the pod's whole part added to the table as written
 * ({@link withPodPart}); and those operations as a script when no in-process writer is at hand.
 *
 * @module
 */
import {
  mapElement,
  type MapEntry,
  type PodParts,
  type RenderedTable,
  VERDICT_MAPS,
} from "./nft_policy.ts";
import { type PodRule, podRuleText } from "./nft_rules.ts";
import { type NamedCollection, setSpec } from "./nft_sets.ts";

/** The operations an ADD writes for one pod: its chains, their rules, its map entries. */
export type NftOp =
  | { chain: string }
  | { chain: string; rule: PodRule }
  | { entry: MapEntry };

/** Operations as an `nft -f` script (one transaction). */
export function opsScript(table: string, ops: NftOp[]): string {
  return ops.map((op) =>
    "entry" in op
      ? `add element inet ${table} ${op.entry.map} { ${mapElement(op.entry)} }`
      : "rule" in op
      ? `add rule inet ${table} ${op.chain} ${podRuleText(op.rule)}`
      : `add chain inet ${table} ${op.chain}`
  ).join("\n") + "\n";
}

/**
 * What an ADD writes for one pod, when the table as written (`written`) holds every allowing
 * chain it jumps to and no entry of its addresses: its chains and map entries as operations, and
 * the table with them. Undefined when that does not hold (a new combination of rules, an address
 * still mapped): then the whole pass writes it.
 */
export function podAddition(
  written: RenderedTable,
  pod: PodParts,
): { ops: NftOp[]; table: RenderedTable } | undefined {
  for (const [name, lines] of pod.allow) {
    if (written.chains.get(name)?.join("\n") !== lines.join("\n")) return undefined;
  }
  const ops: NftOp[] = [];
  const chains = new Map(written.chains);
  for (const [name, rules] of pod.chains) {
    const text = rules.map(podRuleText);
    const was = written.chains.get(name);
    if (was) {
      if (was.join("\n") !== text.join("\n")) return undefined;
      continue;
    }
    ops.push({ chain: name }, ...rules.map((rule) => ({ chain: name, rule })));
    chains.set(name, text);
  }
  const sets = new Map(written.sets);
  for (const e of pod.entries) {
    const map = sets.get(e.map);
    if (!map) return undefined;
    const element = mapElement(e);
    if (map.elements.includes(element)) continue;
    if (map.elements.some((x) => x.startsWith(`${e.ip} :`))) return undefined;
    sets.set(e.map, { ...map, elements: [...map.elements, element] });
    ops.push({ entry: e });
  }
  return { ops, table: { sets, chains } };
}

/**
 * The table as written (`written`, or none yet) with one pod's whole part added (`own`: the
 * parts of a compile of that pod alone, with its allowing chains and the peer sets they name):
 * what an ADD writes itself, whatever else is pending, when the table lacks the pod's allowing
 * rules. Everything else of `written` is kept as it is. Undefined when the two disagree on
 * anything they share (a peer set with other members, a chain of the same name with other
 * rules, an address mapped elsewhere, a set declared otherwise): then what the kernel should hold
 * is the pass's to decide.
 *
 * @example
 * ```ts
 * withPodPart(undefined, own); // own itself: the first isolated pod of the node
 * ```
 */
export function withPodPart(
  written: RenderedTable | undefined,
  own: RenderedTable,
): RenderedTable | undefined {
  if (!written) return own;
  const sets = new Map(written.sets);
  for (const [name, c] of own.sets) {
    const was = written.sets.get(name);
    if (!was) {
      sets.set(name, c);
      continue;
    }
    if (setSpec(was) !== setSpec(c)) return undefined;
    if (!VERDICT_MAPS.includes(name)) {
      // A peer set: named for its peer, and its members must be the ones written.
      const members = (x: NamedCollection) => [...x.elements].sort().join(",");
      if (members(was) !== members(c)) return undefined;
      continue;
    }
    const mapped = new Map(was.elements.map((e) => [e.split(" : ")[0], e]));
    const elements = [...was.elements];
    for (const e of c.elements) {
      const there = mapped.get(e.split(" : ")[0]);
      if (there === e) continue;
      if (there !== undefined) return undefined;
      elements.push(e);
    }
    sets.set(name, { ...was, elements });
  }
  const chains = new Map(written.chains);
  for (const [name, lines] of own.chains) {
    const was = written.chains.get(name);
    if (was && was.join("\n") !== lines.join("\n")) return undefined;
    chains.set(name, lines);
  }
  return { sets, chains };
}
