/**
 * Multiple networks (`bench/results/multinet.json`, `deno task bench:multinet`,
 * `multinet_bench.ts`): a pod's ADD with extra networks, and the burst against whereabouts; the
 * result and its Markdown. Pure: JSON in, text out.
 *
 * @module
 */
import { cpusNote, table } from "./markdown.ts";

/** What a burst measured: wall time (s) and per-pod latency (ms). */
export interface BurstSeries {
  /** First ADD to last answer (s); of several rounds, their mean. */
  wallS: number;
  /** Each round's, when the series ran several (ABBA with the series it is compared with). */
  walls?: number[];
  /** Per pod (created in the API, namespace, ADD through the shim): p50 / p99 (ms). */
  p50: number;
  p99: number;
}

/** whereabouts v0.9.0 and host-local through libcni (`shared/tools/whereabouts/bench.py`). */
export interface WhereaboutsBurst {
  /** ADD wall time (s), latency p50 / p99 (ms), failures. */
  addS: number;
  p50: number;
  p99: number;
  errors: number;
  /** DEL wall time (s). */
  delS: number;
  /** Addresses on two pods, allocations left after DEL. */
  duplicates: number;
  leftOver: number;
  /** The machine's load average (1 min) at its start and end. */
  load: [number, number];
}

/** The burst (with `--burst`). */
export interface MultinetBurst {
  /** When. */
  date?: string;
  pods: number;
  nodes: number;
  /** ADDs (and DELs) at a time. */
  concurrency: number;
  /** The API: "stand-in" or the real server's kubeconfig. */
  api: string;
  /** Wall time (s) on the default network alone. */
  defaultOnlyS: number;
  /** Wall time (s) with one native whereabouts NAD each. */
  nativeNadS: number;
  /** nativeNadS / defaultOnlyS (target ≤ 1.3). */
  ratio: number;
  /** The series in full. */
  series?: {
    defaultOnly: BurstSeries;
    nativeNad: BurstSeries;
    harnessFloor: BurstSeries;
    /** The harness with the shim's cold start (`CNI_COMMAND=VERSION`), no daemon work. */
    shimFloor?: BurstSeries;
  };
  /** The real plugin with the same pods, nodes and concurrency, in the same run. */
  whereabouts?: WhereaboutsBurst;
  /** The same libcni path with host-local (per node, no cluster-wide coordination): its floor. */
  hostLocal?: WhereaboutsBurst;
  /** nativeNadS / whereabouts.addS (target ≤ 0.1). */
  vsWhereabouts?: number;
  /** Why the whereabouts comparison is missing, when it is. */
  whereaboutsSkipped?: string;
  /** The machine's load average (1 min) before each step. */
  load: Record<string, number>;
}

/** What one run of `bench/multinet_bench.ts` measured (ms). */
export interface MultinetBench {
  /** When. */
  date: string;
  /** The machine's CPUs. */
  cpus?: number;
  /** Pods per series. */
  pods: number;
  /** ADD p50 / p90 of a pod on the default network only. */
  defaultOnly: { p50: number; p90: number };
  /** ADD p50 / p90 of a pod with two extra macvlan networks. */
  twoExtra: { p50: number; p90: number };
  /** twoExtra p50 / defaultOnly p50. */
  ratio: number;
  /** ADD p50 / p90 of a pod with one extra macvlan network, host-local IPAM. */
  oneHostLocal?: { p50: number; p90: number };
  /** ADD p50 / p90 of a pod with one extra macvlan network, whereabouts IPAM served natively. */
  oneNative?: { p50: number; p90: number };
  /** The burst (with `--burst`): wall time (s) on the default network alone, and with one NAD. */
  burst?: MultinetBurst;
}

/** `bench/results/multinet.json`: a pod's ADD with two extra networks. */
export type MultinetResult = MultinetBench;

/** A pod's ADD with two extra macvlan networks against the default network only. */
export function multinetReport(r: MultinetResult, heading = "#"): string {
  return [
    `${heading} Multiple networks (\`deno task bench:multinet\`)`,
    "",
    `${r.date}${cpusNote(r.cpus)}, API stand-in, one pod at a time (${r.pods} per series)`,
    "",
    table(["pod ADD (pod created in the API, namespace, shim ADD)", "p50", "p90"], [
      ["default network only", `${r.defaultOnly.p50} ms`, `${r.defaultOnly.p90} ms`],
      [
        "default network + two macvlan NADs (host-local)",
        `${r.twoExtra.p50} ms`,
        `${r.twoExtra.p90} ms`,
      ],
      ...(r.oneHostLocal
        ? [[
          "default network + one macvlan NAD (host-local)",
          `${r.oneHostLocal.p50} ms`,
          `${r.oneHostLocal.p90} ms`,
        ]]
        : []),
      ...(r.oneNative
        ? [[
          "default network + one macvlan NAD (whereabouts config, served natively)",
          `${r.oneNative.p50} ms`,
          `${r.oneNative.p90} ms`,
        ]]
        : []),
    ]),
    "",
    `- two extra networks cost ${r.ratio}× the default network's p50`,
    ...(r.burst
      ? [
        `- ${
          r.burst.date ? `${r.burst.date}: ` : ""
        }a burst of ${r.burst.pods} pods over ${r.burst.nodes} simulated nodes` +
        (r.burst.concurrency
          ? `, ${r.burst.concurrency} at a time, API ${r.burst.api}`
          : " at once") +
        `: ${r.burst.defaultOnlyS} s on the default network alone, ${r.burst.nativeNadS} s with one ` +
        `native whereabouts NAD each (${r.burst.ratio}×; target ≤ 1.3×)`,
        ...burstLines(r.burst),
      ]
      : []),
    "",
  ].join("\n");
}

/** The burst's series, floors and the comparison with whereabouts (`bench:multinet --burst`). */
function burstLines(b: NonNullable<MultinetResult["burst"]>): string[] {
  const row = (what: string, x?: BurstSeries) =>
    x
      ? [[
        what,
        `${x.wallS} s${x.walls && x.walls.length > 1 ? ` (${x.walls.join(" s, ")} s)` : ""}`,
        `${x.p50} / ${x.p99} ms`,
      ]]
      : [];
  const wab = (what: string, x?: NonNullable<typeof b.whereabouts>) =>
    x
      ? [[
        what,
        `${x.addS} s (DEL ${x.delS} s; ${x.errors} failed, ${x.duplicates} doubled, ${x.leftOver} left)`,
        `${x.p50} / ${x.p99} ms`,
      ]]
      : [];
  if (!b.series) return [];
  return [
    "",
    table(["burst (same pods, nodes, concurrency)", "ADD wall", "per pod p50 / p99"], [
      ...row("Ferry harness floor (API pod, namespace, a process; no CNI)", b.series.harnessFloor),
      ...row("Ferry harness + the shim's cold start (VERSION; no daemon work)", b.series.shimFloor),
      ...row("Ferry, default network alone", b.series.defaultOnly),
      ...row(
        "Ferry, default network + one NAD (whereabouts config, served natively)",
        b.series.nativeNad,
      ),
      ...wab("whereabouts v0.9.0 through libcni (one macvlan network)", b.whereabouts),
      ...wab("host-local through the same libcni path (per node: that path's floor)", b.hostLocal),
    ]),
    "",
    b.vsWhereabouts !== undefined
      ? `- native NAD burst / whereabouts' burst: ${b.vsWhereabouts}× (target ≤ 0.1×)` +
        (b.whereabouts
          ? `; floors in the same run: Ferry's default network alone (which every NAD pod gets ` +
            `too) ${
              Math.round((b.defaultOnlyS / b.whereabouts.addS) * 1000) / 1000
            }×, host-local through whereabouts' libcni path ${
              b.hostLocal ? Math.round((b.hostLocal.addS / b.whereabouts.addS) * 1000) / 1000 : "-"
            }×, the harness alone ${
              b.series
                ? Math.round((b.series.harnessFloor.wallS / b.whereabouts.addS) * 1000) / 1000
                : "-"
            }×${
              b.series?.shimFloor
                ? `, the harness with the shim's cold start ${
                  Math.round((b.series.shimFloor.wallS / b.whereabouts.addS) * 1000) / 1000
                }×`
                : ""
            }; the NAD's own cost (its burst less the default network's) over whereabouts' (its ` +
            `burst less host-local's): ${
              b.hostLocal
                ? Math.round(
                  ((b.nativeNadS - b.defaultOnlyS) / (b.whereabouts.addS - b.hostLocal.addS)) *
                    1000,
                ) / 1000
                : "-"
            }×`
          : "")
      : `- whereabouts not measured: ${b.whereaboutsSkipped ?? "not run"}`,
    ...(b.series?.defaultOnly.walls
      ? [
        `- the default and NAD series ran in ABBA order, two rounds each; their mean wall times compared`,
      ]
      : []),
    `- load average (1 min) before each step: ${
      Object.entries(b.load ?? {}).map(([k, v]) => `${k} ${v}`).join(", ")
    }`,
  ];
}
