/**
 * The Markdown pieces every benchmark's report is made of: a table, and the machine's CPUs as a
 * note after the date. Pure.
 *
 * @module
 */

/**
 * ", N CPUs" when the result says how many, else nothing.
 *
 * @example
 * ```ts
 * `${r.date}${cpusNote(r.cpus)}`; // "2026-01-01, 2 CPUs"
 * ```
 */
export const cpusNote = (n?: number): string => (n ? `, ${n} CPUs` : "");

/**
 * A Markdown table: a header row, its rule, then one row per entry.
 *
 * @example
 * ```ts
 * table(["series", "p50"], [["ADD", 3]]); // "| series | p50 |\n| --- | --- |\n| ADD | 3 |"
 * ```
 */
export function table(head: string[], rows: (string | number)[][]): string {
  return [
    `| ${head.join(" | ")} |`,
    `| ${head.map(() => "---").join(" | ")} |`,
    ...rows.map((r) => `| ${r.join(" | ")} |`),
  ].join("\n");
}
