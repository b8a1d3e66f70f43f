/**
 * The CNI benchmark's result (`bench/results/latest.json`, `deno task bench`, `cni_bench.ts`) and
 * its Markdown. Pure: JSON in, text out.
 *
 * @module
 */
import { table } from "./markdown.ts";

/** A latency series: count and percentiles (ms). */
interface Series {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

/** A target of a benchmark, met or not. */
interface Target {
  what: string;
  met: boolean;
  measured: string;
}

/** `bench/results/latest.json`: the CNI benchmark (`deno task bench`). */
export interface CniBenchResult {
  machine: { cpus: number; deno: string; kernel: string; date: string };
  results: Record<string, Series>;
  figures: Record<string, number | string>;
  memory: { at: string; rssMb: number; rssAnonMb: number; fds: number }[];
  shimModules: Record<string, number>;
  node?: {
    cni: string;
    pods: number;
    allRunningS: number;
    runPodSandboxP50Ms?: number;
    runPodSandboxP90Ms?: number;
    daemonAddP99Ms?: number;
  }[];
  targets: Target[];
}

/**
 * The CNI benchmark: every series, the figures, memory, the shim's modules, the real node's
 * bursts and the targets.
 *
 * @example
 * ```ts
 * cniBenchReport(JSON.parse(await Deno.readTextFile("bench/results/latest.json")), "#");
 * ```
 */
export function cniBenchReport(r: CniBenchResult, heading = "#"): string {
  const m = r.machine;
  return [
    `${heading} Ferry benchmark (\`deno task bench\`)`,
    "",
    `${m.date}, ${m.cpus} CPUs, Deno ${m.deno}, kernel ${m.kernel}; libcni (Debian) as the client; ` +
    "reference = Debian's bridge + host-local",
    "",
    table(
      ["series (ms)", "n", "p50", "p90", "p99", "max"],
      Object.entries(r.results).map(([k, s]) => [k, s.n, s.p50, s.p90, s.p99, s.max]),
    ),
    "",
    table(["figure", "value"], Object.entries(r.figures).map(([k, v]) => [k, v])),
    "",
    table(
      ["daemon", "RSS (MB)", "of which private (MB)", "open fds"],
      r.memory.map((x) => [x.at, x.rssMb, x.rssAnonMb, x.fds]),
    ),
    "",
    `The shim's bundle by module (bytes): ${
      Object.entries(r.shimModules).map(([k, b]) => `${k} ${b}`).join(", ")
    }`,
    "",
    ...(r.node?.length
      ? [
        table(
          [
            "real node (kubelet + containerd)",
            "pods",
            "all Running (s)",
            "RunPodSandbox p50 / p90 (ms)",
            "daemon ADD p99 (ms)",
          ],
          r.node.map((n) => [
            n.cni,
            n.pods,
            n.allRunningS,
            `${n.runPodSandboxP50Ms} / ${n.runPodSandboxP90Ms}`,
            n.daemonAddP99Ms ?? "",
          ]),
        ),
        "",
      ]
      : []),
    ...r.targets.map((t) => `- ${t.met ? "met" : "NOT met"}: ${t.what} (measured: ${t.measured})`),
    "",
  ].join("\n");
}
