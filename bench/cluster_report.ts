/**
 * Pods over simulated nodes (`bench/results/cluster.json`, `deno task bench:cluster`,
 * `cluster_bench.ts`): the result and its Markdown. Pure: JSON in, text out.
 *
 * @module
 */
import { cpusNote, table } from "./markdown.ts";

/** What one run of `bench/cluster_bench.ts` measured. */
export interface ClusterBench {
  /** When, where. */
  date: string;
  /** The machine's CPUs. */
  cpus?: number;
  /** The API: "stand-in" or the real server's kubeconfig. */
  api: string;
  /** Nodes and pods. */
  nodes: number;
  /** Pods plugged. */
  pods: number;
  /** ADDs in flight at once. */
  concurrency: number;
  /** Wall time from the first ADD to the last answer, in ms. */
  allPluggedMs: number;
  /**
   * The same burst's wall time without Ferry: the harness alone (pod in the API, namespace, a
   * `/bin/true` process) and with the shim's cold start only (VERSION, no daemon work); 0 when
   * not measured.
   */
  floors: { harnessMs: number; shimStartMs: number };
  /** Per pod, in ms: created in the API, its namespace made, ADD through the shim (runtime-like). */
  add: { p50: number; p90: number; p99: number; max: number };
  /** API requests the daemons made while the pods were plugged, per ADD, by method. */
  apiRequestsPerAdd: Record<string, number>;
  /** The IPAM mode the nodes ran. */
  ipam: "kubernetes" | "pool";
  /** API writes per ADD (POST, PUT, PATCH, DELETE). */
  apiWritesPerAdd: number;
  /** Of those, the address management's (pool mode: block claims, updates, deletions). */
  ipamWritesPerAdd: number;
  /** API round trips an ADD waited for. */
  apiCallsOnCniPath: number;
  /** Where the daemons' ADD time went: per phase, the worst node's p50 and p99 (ms). */
  addPhases: Record<string, { p50: number; p99: number }>;
  /** Targets and whether they were met. */
  targets: { allPluggedMs: number; apiWritesPerAdd: number; met: boolean };
}

/** `bench/results/cluster.json`: pods over simulated nodes (`deno task bench:cluster`). */
export type ClusterBenchResult = ClusterBench;

/** Pods over simulated nodes: time to all plugged against its floors, API writes, ADD phases. */
export function clusterBenchReport(r: ClusterBenchResult, heading = "#"): string {
  const rows: (string | number)[][] = [
    [
      `${r.pods} pods over ${r.nodes} nodes (${r.concurrency} ADDs at once), first ADD to last answer`,
      `${r.allPluggedMs} ms`,
      `≤ ${r.targets.allPluggedMs} ms`,
    ],
  ];
  if (r.floors.harnessMs) {
    rows.push(
      [
        "the same burst without Ferry: API pod, namespace, `/bin/true` (the harness's floor)",
        `${r.floors.harnessMs} ms`,
        "",
      ],
      [
        "the same burst with only the shim's cold start (VERSION, no daemon work)",
        `${r.floors.shimStartMs} ms`,
        "",
      ],
      [
        "Ferry's own share (all plugged less the shim-start floor)",
        `${r.allPluggedMs - r.floors.shimStartMs} ms`,
        "",
      ],
    );
  }
  rows.push(
    [
      "per pod: created in the API, namespace made, ADD through the shim; p50 / p90 / p99 / max",
      `${r.add.p50} / ${r.add.p90} / ${r.add.p99} / ${r.add.max} ms`,
      "",
    ],
    [
      "API writes per ADD for addresses (pool mode: block claims and updates)",
      r.ipamWritesPerAdd,
      `≤ ${r.targets.apiWritesPerAdd}`,
    ],
    ["API writes per ADD in all (with the pod's attachments annotation)", r.apiWritesPerAdd, ""],
    ["API requests per ADD, by method", JSON.stringify(r.apiRequestsPerAdd), ""],
    ["API round trips an ADD waited for", r.apiCallsOnCniPath, ""],
    ...Object.entries(r.addPhases).map(([phase, p]) => [
      `daemon ADD phase ${phase}, p50 / p99 (worst node)`,
      `${p.p50} / ${p.p99} ms`,
      "",
    ]),
  );
  return [
    `${heading} Pods over simulated nodes (\`deno task bench:cluster\`)`,
    "",
    `${r.date}${cpusNote(r.cpus)}, API: ${r.api}, IPAM: ${r.ipam}`,
    "",
    table(["measure", "value", "target"], rows),
    "",
    `- ${r.targets.met ? "met" : "NOT met"}: targets`,
    "",
  ].join("\n");
}
