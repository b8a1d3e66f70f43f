/**
 * Pods on the real three-node cluster (`bench/results/cluster_real.json`, `cluster_real.ts`): the
 * result and its Markdown. Pure: JSON in, text out.
 *
 * @module
 */
import { table } from "./markdown.ts";

/** `bench/results/cluster_real.json`: pods on the real three-node cluster. */
export interface ClusterRealResult {
  date: string;
  machine: string;
  cluster: string;
  runs: {
    cni: string;
    pods: number;
    allReadyMs: number;
    sandbox: Record<string, { n: number; p50Ms: number; p99Ms: number }>;
    ferry?: Record<string, { rssMiB?: number; cpuS?: number }>;
  }[];
}

/** Pods on the real three-node cluster, Ferry against the reference plugins. */
export function clusterRealReport(r: ClusterRealResult, heading = "#"): string {
  const nodes = [...new Set(r.runs.flatMap((x) => Object.keys(x.sandbox)))].sort();
  return [
    `${heading} Pods on the real three-node cluster (\`deno task bench:cluster-real\`)`,
    "",
    `${r.date}, ${r.machine}, ${r.cluster}. A Deployment of pause pods spread by the scheduler; ` +
    "all Ready: from its creation to the rollout's end; RunPodSandbox from containerd's log (ms, " +
    "p50 / p99 per node); Ferry's daemons: resident memory after the burst, CPU spent during it.",
    "",
    table(
      ["CNI", "pods", "all Ready (s)", ...nodes, "Ferry daemons"],
      r.runs.map((x) => [
        x.cni,
        x.pods,
        (x.allReadyMs / 1000).toFixed(1),
        ...nodes.map((n) => `${x.sandbox[n]?.p50Ms ?? "-"} / ${x.sandbox[n]?.p99Ms ?? "-"}`),
        x.ferry
          ? nodes.map((n) => `${x.ferry![n]?.rssMiB ?? "-"} MiB, ${x.ferry![n]?.cpuS ?? "-"} s`)
            .join("; ")
          : "-",
      ]),
    ),
    "",
  ].join("\n");
}
