/**
 * The fault runs' results and their Markdown: the crash run (`bench/results/chaos.json`,
 * `deno task chaos`) and address integrity under faults (`bench/results/chaos_cluster*.json`,
 * `deno task chaos:cluster`), both run by `daemon/dev/`. Pure: JSON in, text out.
 *
 * @module
 */
import type { ChaosReport } from "../daemon/dev/chaos.ts";
import type { ClusterChaosReport } from "../daemon/dev/chaos_cluster.ts";
import { table } from "./markdown.ts";

/** `bench/results/chaos.json`: the crash run (`deno task chaos`). */
export type ChaosResult = ChaosReport & { date: string };

/** `bench/results/chaos_cluster*.json`: address integrity under faults (`deno task chaos:cluster`). */
export type ChaosClusterResult = ClusterChaosReport & { date: string };

/** The crash run: what churned, what was killed, and that nothing was lost, doubled or leaked. */
export function chaosReport(r: ChaosResult, heading = "#"): string {
  const o = r.options;
  const leaked = r.leaked.allocations.length + r.leaked.records.length + r.leaked.hostLinks.length;
  return [
    `${heading} Crash run (\`deno task chaos\`)`,
    "",
    `${r.date}: ${o.pods} pods, ${o.concurrency} at a time, ${r.kills} SIGKILLs of the daemon, ` +
    `the API away for ${o.apiOutageSeconds} s; ${(r.durationMs / 1000).toFixed(0)} s`,
    "",
    table(["outcome", "count"], [
      ["ADDs answered with a result", r.adds.ok],
      ["ADDs answered 11 (try again later), then retried", r.adds.tryAgainLater],
      ["ADDs failed otherwise", r.adds.other],
      ["DELs succeeded / failed", `${r.dels.ok} / ${r.dels.failed}`],
      ["addresses on two pods", r.duplicateAddresses.length],
      ["left afterwards (allocations, records, host links)", leaked],
      ["rule violations", r.violations.length],
    ]),
    "",
    `- ${r.ok ? "passed" : "FAILED"}`,
    "",
  ].join("\n");
}

/** Address integrity under faults over simulated pool-IPAM nodes. */
export function chaosClusterReport(r: ChaosClusterResult, heading = "#"): string {
  const o = r.options;
  const leaked = r.leaked.allocations.length + r.leaked.records.length +
    r.leaked.findings.length;
  return [
    `${heading} Address integrity under faults, API: ${r.api} (\`deno task chaos:cluster\`)`,
    "",
    `${r.date}: ${o.nodes} nodes, ${o.pods} pods, ${o.concurrency} at a time, /${o.blockSize} ` +
    `blocks, ${r.faults.length} faults (${o.kills} SIGKILLs, the API away for ` +
    `${o.apiOutageSeconds} s, blocks deleted and re-pointed, an impostor, an overlapping pool); ` +
    `${(r.durationMs / 1000).toFixed(0)} s`,
    "",
    table(["outcome", "count"], [
      ["ADDs that succeeded", `${r.adds.ok} of ${o.pods}`],
      ["ADDs given up / failed", `${r.adds.givenUp} / ${r.adds.failed}`],
      ["checks of the ground truth and `ipam check`", r.checks],
      ["addresses on two pods at any check", r.duplicates.length],
      ["`ipam check` findings", r.integrityFindings.length],
      ["left afterwards (allocations, records, findings)", leaked],
      ["rule violations", r.violations.length],
    ]),
    "",
    `- ${r.ok ? "passed" : "FAILED"}`,
    "",
  ].join("\n");
}
