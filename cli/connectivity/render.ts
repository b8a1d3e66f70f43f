/**
 * `kubectl ferry connectivity-test` as a person reads it: a progress line per check (stderr), a
 * summary table and a last line naming the nodes the failures involve (stdout); and the JSON of
 * `--json`. Pure.
 *
 * @module
 */
import { type Check, TESTS } from "./plan.ts";

function route(c: Check): string {
  const host = c.to.address.includes(":") ? `[${c.to.address}]` : c.to.address;
  const to = c.to.node && c.to.label !== `${c.to.node} NodePort`
    ? `${c.to.label} (${c.to.node})`
    : c.to.label;
  const as = c.spoofAs ? ` as ${c.spoofAs.label} ${c.spoofAs.address}` : "";
  return `${c.from.name} (${c.from.node})${as} → ${to} ${host}:${c.to.port}`;
}

function outcome(r: CheckResult): string {
  if (r.repaired) {
    return `ok, repaired after ${(r.repaired.afterMs / 1000).toFixed(1)} s (${r.repaired.failure})`;
  }
  if (r.skipped) return `skipped: ${r.skipped}`;
  return r.ok ? `ok ${r.ms} ms` : `FAILED ${r.ms} ms: ${r.reason}`;
}

/** A check's outcome. */
export interface CheckResult {
  /** The check. */
  check: Check;
  /** Whether it got what it expected. */
  ok: boolean;
  /** How long it took (for the policy checks: until the policy was in force, or the bound). */
  ms: number;
  /** Why it failed. */
  reason?: string;
  /** It failed first and passed within `--wait-repair`: how long that took, and the failure. */
  repaired?: { afterMs: number; failure: string };
  /** Not run, and why (ok is then true: nothing failed). */
  skipped?: string;
}

/** The run's outcome. */
export interface ConnectivityRun {
  /** Its namespace (deleted). */
  namespace: string;
  /** Every check's result, in order. */
  results: CheckResult[];
  /** Why the run stopped before its checks, if it did. */
  error?: string;
}

/**
 * `[7/31] pod→pod across nodes ct-0-a (n1) → ct-2-a (n3) 10.244.2.5:8080 … ok 3 ms`.
 *
 * @example
 * ```ts
 * progress(progressLine(7, 31, result));
 * ```
 */
export function progressLine(n: number, of: number, r: CheckResult): string {
  return `[${n}/${of}] ${TESTS[r.check.test]} ${route(r.check)} … ${outcome(r)}`;
}

/** The nodes the failed checks involve, the most often named first, with their counts. */
export function failedNodes(results: CheckResult[]): { node: string; failures: number }[] {
  const counts = new Map<string, number>();
  for (const r of results.filter((r) => !r.ok)) {
    for (const n of r.check.nodes) counts.set(n, (counts.get(n) ?? 0) + 1);
  }
  return [...counts].map(([node, failures]) => ({ node, failures }))
    .sort((a, b) => b.failures - a.failures || a.node.localeCompare(b.node));
}

/** The summary's last line. */
export function summaryLine(run: ConnectivityRun): string {
  const failed = run.results.filter((r) => !r.ok);
  const skipped = run.results.filter((r) => r.skipped).length;
  const head = `${run.results.length} checks: ` +
    `${run.results.length - failed.length - skipped} passed, ${failed.length} failed` +
    (skipped ? `, ${skipped} skipped` : "");
  const nodes = failedNodes(run.results);
  const tail = nodes.length
    ? `; failures involve ${
      nodes.map((n) => `${n.node} (${n.failures} of ${failed.length})`).join(", ")
    }`
    : "";
  const repaired = run.results.filter((r) => r.repaired).length;
  const repairs = repaired ? `; ${repaired} repaired while waiting` : "";
  return `${head}${repairs}${tail}${run.error ? `; stopped: ${run.error}` : ""}`;
}

/** The summary table, then the summary line. */
export function summaryText(run: ConnectivityRun): string {
  const rows = run.results.map((r) => [
    TESTS[r.check.test],
    `IPv${r.check.family}`,
    route(r.check),
    outcome(r),
  ]);
  const head = ["CHECK", "FAMILY", "FROM → TO", "RESULT"];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]))).join("  ");
  return [line(head), ...rows.map(line), summaryLine(run)].join("\n") + "\n";
}

/** The JSON of `--json`. */
export function summaryJson(run: ConnectivityRun): string {
  const failed = run.results.filter((r) => !r.ok).length;
  const skipped = run.results.filter((r) => r.skipped).length;
  return JSON.stringify(
    {
      namespace: run.namespace,
      passed: run.results.length - failed - skipped,
      failed,
      skipped,
      failedNodes: failedNodes(run.results),
      error: run.error,
      checks: run.results.map((r) => ({
        test: r.check.test,
        family: r.check.family,
        from: { pod: r.check.from.name, node: r.check.from.node },
        to: r.check.to,
        expect: r.check.expect,
        ok: r.ok,
        ms: r.ms,
        reason: r.reason,
        repaired: r.repaired,
        skipped: r.skipped,
        spoofAs: r.check.spoofAs,
      })),
    },
    null,
    2,
  ) + "\n";
}
