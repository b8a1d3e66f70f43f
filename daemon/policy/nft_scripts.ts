/**
 * The `nft -f` scripts that bring a policy table to the kernel, pure: one that replaces it whole
 * (or removes it), and one that changes it in place from what was written to what is rendered
 * now, each one transaction.
 *
 * @module
 */
import { type NamedCollection, setSpec } from "./nft_sets.ts";
import { type RenderedTable, tableDefinition } from "./nft_policy.ts";

/**
 * One `nft -f` script that replaces the table whole (or removes it when `definition` is
 * undefined): declaring it first makes the delete valid whether or not it exists, and the three
 * commands are one transaction, so packets see the old rules or the new, never none.
 */
export function policyScript(table: string, definition: string | undefined): string {
  return `table inet ${table}\ndelete table inet ${table}\n${definition ?? ""}`;
}

/**
 * The `nft -f` script that brings table `table`, written as `before`, to `after` in place, or an
 * empty string when nothing changed. One transaction, ordered so that every reference is valid
 * at each step: new sets and chains first, then the rules of new and changed chains, then the
 * sets' and maps' elements, then what is gone (its rules flushed before any chain or set is
 * deleted). Packets see the table as it was or as it is; the rules of unchanged chains keep
 * their counters.
 */
export function policyUpdateScript(
  table: string,
  before: RenderedTable,
  after: RenderedTable,
): string {
  const t = `inet ${table}`;
  const kind = (c: NamedCollection) => (c.type.includes(":") ? "map" : "set");
  const adds: string[] = [];
  const changed: string[] = [];
  const rules: string[] = [];
  const removals: string[] = [];
  const additions: string[] = [];
  const gone: string[] = [];
  const deletes: string[] = [];
  for (const [name, c] of after.sets) {
    const was = before.sets.get(name);
    if (was && setSpec(was) !== setSpec(c)) {
      return policyScript(table, tableDefinition(table, after));
    }
    if (!was) adds.push(`add ${kind(c)} ${t} ${name} { ${setSpec(c)} }`);
    const had = new Set(was?.elements ?? []);
    const has = new Set(c.elements);
    // A map's element is deleted by its key alone.
    const removed = [...had].filter((e) => !has.has(e)).map((e) => e.split(" : ")[0]);
    const added = c.elements.filter((e) => !had.has(e));
    if (removed.length) removals.push(`delete element ${t} ${name} { ${removed.join(", ")} }`);
    if (added.length) additions.push(`add element ${t} ${name} { ${added.join(", ")} }`);
  }
  for (const [name, lines] of after.chains) {
    const was = before.chains.get(name);
    if (was && was.join("\n") === lines.join("\n")) continue;
    if (was) changed.push(`flush chain ${t} ${name}`);
    else adds.push(`add chain ${t} ${name}`);
    for (const line of lines) rules.push(`add rule ${t} ${name} ${line}`);
  }
  for (const name of before.chains.keys()) {
    if (after.chains.has(name)) continue;
    gone.push(`flush chain ${t} ${name}`);
    deletes.push(`delete chain ${t} ${name}`);
  }
  for (const [name, c] of before.sets) {
    if (!after.sets.has(name)) deletes.push(`delete ${kind(c)} ${t} ${name}`);
  }
  const lines = [...adds, ...changed, ...rules, ...removals, ...additions, ...gone, ...deletes];
  return lines.length ? lines.join("\n") + "\n" : "";
}
