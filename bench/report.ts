/**
 * The benchmarks' results as Markdown, rendered from their JSON in `bench/results/` and nowhere
 * else: each benchmark writes its `.md` beside its `.json` with its renderer (`*_report.ts`, one
 * per benchmark), and `deno task docs` (`daemon/dev/docs.ts`) puts the same tables, with machine
 * and date, into `docs/performance.md` through {@link resultSections}, in {@link REPORTS}' order.
 * Pure: JSON in, text out.
 *
 * @module
 */
import { cniBenchReport } from "./cni_report.ts";
import { clusterBenchReport } from "./cluster_report.ts";
import { clusterRealReport } from "./cluster_real_report.ts";
import { multinetReport } from "./multinet_report.ts";
import { policyBenchReport } from "./policy_report.ts";
import { dataplaneReport } from "./dataplane_report.ts";
import { guardFloorReport } from "./guard_floor_report.ts";
import { chaosClusterReport, chaosReport } from "./chaos_report.ts";

/** Each result file of `bench/results/` and its renderer, in the page's order. */
export const REPORTS: { file: string; render: (json: never, heading: string) => string }[] = [
  { file: "latest.json", render: cniBenchReport },
  { file: "cluster_real.json", render: clusterRealReport },
  { file: "cluster.json", render: clusterBenchReport },
  { file: "multinet.json", render: multinetReport },
  { file: "policy.json", render: policyBenchReport },
  { file: "dataplane.json", render: dataplaneReport },
  { file: "guard_floor.json", render: guardFloorReport },
  { file: "chaos.json", render: chaosReport },
  { file: "chaos_cluster.json", render: chaosClusterReport },
  { file: "chaos_cluster_real.json", render: chaosClusterReport },
];

/**
 * Every result of `results` (file name → parsed JSON) that has a renderer, as sections under
 * `heading`; files missing from `results` are left out.
 */
export function resultSections(results: Record<string, unknown>, heading = "##"): string {
  return REPORTS.filter((r) => results[r.file] !== undefined)
    .map((r) => r.render(results[r.file] as never, heading)).join("\n");
}
