/**
 * The packets each commented rule of a policy table counted, read from `nft -j list table`'s
 * output (pure); `nft_netlink.ts` reads the same in-process.
 *
 * @module
 */

/** Packets counted by one commented rule of the table. */
export interface RuleCount {
  /** What the rule is: `ns/policy ingress[i]` for an allowing rule, `ns/pod: no … rule allows it` for a drop. */
  comment: string;
  /** Packets it counted since its chain was written. */
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
