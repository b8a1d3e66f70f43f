/**
 * The table of one pod's network namespace for its additional interfaces (MultiNetworkPolicy),
 * pure: rules matched by interface in the pod's own `input` and `output` hooks, built of the same
 * allowing and closing rules and named sets as the node's table.
 *
 * @module
 */
import type { InterfaceVerdict } from "./multi_policy.ts";
import { declaration, NamedSets } from "./nft_sets.ts";
import { allowLines, denyLines } from "./nft_rules.ts";
import { nftIfname } from "./nft_text.ts";

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
          [...allowLines(rules, direction, sets), ...denyLines(direction, who)].map((l) =>
            `    ${l}\n`
          ).join("")
        }  }`,
      );
      hook.push(`    ${match} "${nftIfname(v.ifname)}" jump ${chain}`);
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
    ...[...sets.collections()].map(([name, c]) => declaration(name, c)),
    ...chains,
    ...base("input", input),
    ...base("output", output),
    "}",
  ].join("\n") + "\n";
}
