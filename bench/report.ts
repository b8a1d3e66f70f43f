/**
 * The benchmarks' results as Markdown, rendered from their JSON in `bench/results/` and nowhere
 * else: each benchmark writes its `.md` beside its `.json` with these renderers, and
 * `deno task docs` puts the same tables, with machine and date, into `docs/performance.md`.
 * Pure: JSON in, text out.
 *
 * @module
 */
import type { ChaosReport } from "../daemon/dev/chaos.ts";
import type { ClusterChaosReport } from "../daemon/dev/chaos_cluster.ts";
import type { ProbeDurations, TcpSample } from "./tcp_probe.ts";
import { type RatioInterval, type Verdict, verdictOf } from "./paired.ts";

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

/** `bench/results/chaos.json`: the crash run (`deno task chaos`). */
export type ChaosResult = ChaosReport & { date: string };

/** `bench/results/chaos_cluster*.json`: address integrity under faults (`deno task chaos:cluster`). */
export type ChaosClusterResult = ClusterChaosReport & { date: string };

/** " on N CPUs" when the result says how many. */
const cpus = (n?: number) => (n ? `, ${n} CPUs` : "");

/** A Markdown table. */
function table(head: string[], rows: (string | number)[][]): string {
  return [
    `| ${head.join(" | ")} |`,
    `| ${head.map(() => "---").join(" | ")} |`,
    ...rows.map((r) => `| ${r.join(" | ")} |`),
  ].join("\n");
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
    `${r.date}${cpus(r.cpus)}, API: ${r.api}, IPAM: ${r.ipam}`,
    "",
    table(["measure", "value", "target"], rows),
    "",
    `- ${r.targets.met ? "met" : "NOT met"}: targets`,
    "",
  ].join("\n");
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

/** A pod's ADD with two extra macvlan networks against the default network only. */
export function multinetReport(r: MultinetResult, heading = "#"): string {
  return [
    `${heading} Multiple networks (\`deno task bench:multinet\`)`,
    "",
    `${r.date}${cpus(r.cpus)}, API stand-in, one pod at a time (${r.pods} per series)`,
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

/** `bench/results/policy.json`: NetworkPolicy at scale (`deno task bench:policy`). */
export interface PolicyBenchResult {
  date: string;
  machine: string;
  scale: {
    pods: number;
    policies: number;
    nodes: number;
    localPods: number;
    isolatedPods: number;
    compileMs: number;
    tableKiB: number;
    tableRules: number;
    nftWriteMs: number;
  }[];
  enforcement: {
    pods: number;
    policies: number;
    nodes: number;
    policyCreated: { n: number; p50Ms: number; p99Ms: number };
    podLabelled: { n: number; p50Ms: number; p99Ms: number };
    podStarted: { n: number; p50Ms: number; p99Ms: number };
  };
  memory: {
    pods: number;
    policies: number;
    rssMiB: Record<string, number>;
    /** When measured, if not with the rest (a partial run, `--parts memory`). */
    date?: string;
  };
  path: { case: string; addP50Ms: number; gbps: number; connsPerS: number }[];
  /** A tenant's large policies on one node (absent from runs before it was measured). */
  tenant?: {
    case: string;
    entries: number;
    refused: number;
    renderMs: number;
    tableKiB: number;
    nftWriteMs: number;
  }[];
}

/** NetworkPolicy at scale: compile and write, time to enforcement, memory, the pod's own path. */
export function policyBenchReport(r: PolicyBenchResult, heading = "#"): string {
  const off = r.path.find((p) => p.case === "policy off");
  const ratio = (x: number, base?: number) => (base ? `${(x / base).toFixed(2)}×` : "");
  const e = r.enforcement;
  return [
    `${heading} NetworkPolicy at scale (\`deno task bench:policy\`)`,
    "",
    `${r.date}, ${r.machine}`,
    "",
    "One node's recompile of its verdicts after any change, the table it writes, and the `nft -f` " +
    "transaction that replaces it (100 pods per node):",
    "",
    table(
      [
        "pods",
        "policies",
        "this node's pods",
        "isolated",
        "compile (ms)",
        "table (KiB)",
        "rules",
        "nft write (ms)",
      ],
      r.scale.map((x) => [
        x.pods,
        x.policies,
        x.localPods,
        x.isolatedPods,
        x.compileMs,
        x.tableKiB,
        x.tableRules,
        x.nftWriteMs,
      ]),
    ),
    "",
    `From the API write until every node that must show a change has written it (${e.pods} pods, ` +
    `${e.policies} policies, ${e.nodes} nodes' watches and tables in one process on the same ` +
    "cores; target p99 ≤ 1 s):",
    "",
    table(["change", "n", "p50 (ms)", "p99 (ms)"], [
      ["a policy created", e.policyCreated.n, e.policyCreated.p50Ms, e.policyCreated.p99Ms],
      ["a pod labelled into a policy", e.podLabelled.n, e.podLabelled.p50Ms, e.podLabelled.p99Ms],
      [
        "a peer pod started (its address set)",
        e.podStarted.n,
        e.podStarted.p50Ms,
        e.podStarted.p99Ms,
      ],
    ]),
    "",
    `The daemon's resident memory with ${r.memory.pods} pods and ${r.memory.policies} policies in ` +
    `the cluster: ${r.memory.rssMiB.on} MiB with policy on, ${r.memory.rssMiB.off} MiB with it off ` +
    `(target ≤ 100 MB)${r.memory.date ? `; measured ${r.memory.date}` : ""}.`,
    "",
    "Two pods of one node: the daemon's own ADD p50, TCP throughput (iperf3) and new connections " +
    "per second, against policy off (targets: throughput ≥ 0.95×, connections ≥ 0.8×):",
    "",
    table(
      ["case", "ADD p50 (ms)", "throughput (Gbit/s)", "", "connections/s", ""],
      r.path.map((p) => [
        p.case,
        p.addP50Ms,
        p.gbps,
        ratio(p.gbps, off?.gbps),
        p.connsPerS,
        ratio(p.connsPerS, off?.connsPerS),
      ]),
    ),
    "",
    ...(r.tenant
      ? [
        "One tenant's large policies selecting a pod of the node (the shape of #42 item 4): the " +
        "table the node writes for them, with the size limits (`policy.limits`) applied or not:",
        "",
        table(
          [
            "case",
            "entries",
            "refused",
            "compile and render (ms)",
            "table (KiB)",
            "nft write (ms)",
          ],
          r.tenant.map((t) => [t.case, t.entries, t.refused, t.renderMs, t.tableKiB, t.nftWriteMs]),
        ),
        "",
      ]
      : []),
  ].join("\n");
}

/** `bench/results/dataplane.json`: the pods' data path (`deno task bench:dataplane`). */
export interface DataplaneResult {
  date: string;
  machine: string;
  /** `--quick`: two rounds of short measurements. */
  quick: boolean;
  /** Pairs per case (before `windowS`: rounds of the alternation of two clusters). */
  rounds: number;
  /**
   * The windows' length (s): each pair is two adjacent windows of one probe process, the guard
   * switched in place between them. Absent from the runs before (two clusters, one with port
   * security and one without, measured back to back for `durations`).
   */
  windowS?: number;
  durations: ProbeDurations;
  /** `/proc/loadavg` (1, 5, 15 min) before and after the run. */
  loadavg: { before: string; after: string };
  /** Each floor's medians, by name. */
  floors: Record<string, TcpSample>;
  cases: {
    placement: string;
    policy: boolean;
    /**
     * The least guard (one lookup per frame, `bench/guard_switch.ts`) over off, per metric: the
     * median of the sets' ratios and its 95 % interval (runs that measured it).
     */
    leastGuard?: Record<string, RatioInterval>;
    /** On over off in each round (the two measured one after the other): the noise. */
    perRound?: TcpSample[];
    /** Per metric: the median of the pairs' ratios and its 95 % interval (`bench/paired.ts`). */
    intervals?: Record<string, RatioInterval>;
    /** What the intervals say of the target in this case. */
    verdict?: Verdict;
    portSecurityOn: TcpSample;
    portSecurityOff: TcpSample;
    onOverOff: TcpSample;
    floor: string;
    onOverFloor?: TcpSample;
    offOverFloor?: TcpSample;
  }[];
  target: {
    what: string;
    worst: number;
    met: boolean;
    /**
     * The node↔node floor's median absolute deviation of throughput over its median: the
     * machine's noise in this run (absent from results before it was measured).
     */
    noise?: number;
    /** Whether the noise is within the target's 3 %, so that met or not means something. */
    conclusive?: boolean;
    /** The lowest interval end of any case and metric. */
    lowest?: number;
    /** What the intervals say: met, not met, or undecided by the run. */
    verdict?: Verdict;
    /**
     * The least guard over off: its lowest median, and how many of its intervals lie wholly
     * below the target (out of how many): there, no guard of per-pod set elements meets it here.
     */
    leastGuard?: { worst: number; below: number; of: number };
  };
  /** The daemon's ADD p50 with port security on and off (`bench/portsec_bench.ts`). */
  add?: {
    adds: number;
    onP50Ms: number;
    offP50Ms: number;
    runs: { enabled: boolean; addP50Ms: number }[];
  };
  /** Every measurement, by series. */
  samples: Record<string, TcpSample[]>;
}

/** The pairs' intervals per case, and what they say of the target (results that have them). */
function dataplaneIntervals(r: DataplaneResult): string[] {
  if (!r.cases.some((k) => k.intervals)) return [];
  const iv = (i?: RatioInterval) => i ? `${i.median.toFixed(3)} [${i.low}–${i.high}]` : "-";
  const n = r.cases.find((k) => k.intervals)?.intervals?.gbps;
  const add = r.add;
  // Iperf3's CPU count (the two-cluster runs); the windowed probes have none.
  const perCpu = r.cases.some((k) => k.intervals?.gbitPerCpuS);
  const least = r.target.leastGuard;
  const pairs = r.windowS && least
    ? `sets of three adjacent ${r.windowS} s windows (the guard on, off and at its least, switched ` +
      "in place between them, every order in turn)"
    : r.windowS
    ? `pairs of adjacent ${r.windowS} s windows (ABBA order, the guard switched in place between them)`
    : "back-to-back pairs (ABBA order)";
  return [
    `Port security on / off, the median of ${n?.n ?? "?"} ${pairs} with ` +
    `its ${Math.round((n?.coverage ?? 0) * 1000) / 10} % interval (order statistics):`,
    "",
    table(
      [
        "pods",
        "policy",
        "throughput",
        ...(perCpu ? ["throughput per CPU-second"] : []),
        "req/resp",
        "conn/s",
        "verdict",
      ],
      r.cases.map((k) => [
        k.placement,
        k.policy ? "isolating the server" : "none selecting",
        iv(k.intervals?.gbps),
        ...(perCpu ? [iv(k.intervals?.gbitPerCpuS)] : []),
        iv(k.intervals?.rrPerS),
        iv(k.intervals?.connsPerS),
        k.verdict ?? "-",
      ]),
    ),
    "",
    `- ${r.target.what}: **${r.target.verdict}** (lowest median ${r.target.worst}×, lowest ` +
    `interval end ${r.target.lowest}×; met needs every interval at or above 0.97, not met one ` +
    "wholly below)",
    ...(least
      ? [
        "",
        "The least guard port security can be (one lookup of each frame's port, source MAC and " +
        "address in a per-pod set, `bench/guard_switch.ts`) over off, in the same sets:",
        "",
        table(
          ["pods", "policy", "throughput", "req/resp", "conn/s"],
          r.cases.map((k) => [
            k.placement,
            k.policy ? "isolating the server" : "none selecting",
            iv(k.leastGuard?.gbps),
            iv(k.leastGuard?.rrPerS),
            iv(k.leastGuard?.connsPerS),
          ]),
        ),
        "",
        `- the least guard: lowest median ${least.worst}×; ${least.below} of ${least.of} ` +
        "intervals wholly below 0.97" +
        (least.below
          ? ": there, no guard that binds addresses to ports with per-pod set elements meets " +
            "the target on this machine"
          : ""),
      ]
      : []),
    ...(add
      ? [
        `- the daemon's own ADD p50 (\`bench/portsec_bench.ts\`, as \`deno task bench\` measures it; ` +
        `${add.adds} pods to each of two clusters at once, their ADDs alternating): ${add.onP50Ms} ms ` +
        `on, ${add.offP50Ms} ms off, ` +
        `${Math.round((add.onP50Ms - add.offP50Ms) * 100) / 100} ms more (target ≤ 0.5 ms: ` +
        `${add.onP50Ms - add.offP50Ms <= 0.5 ? "met" : "**not met**"}; runs ${
          add.runs.map((x) => `${x.enabled ? "on" : "off"} ${x.addP50Ms}`).join(", ")
        })`,
      ]
      : []),
    "",
  ];
}

/**
 * How far the pairs' ratios spread: the quartiles of many short windows (a stalled window's ratio
 * says nothing of the rest), or the whole range of a few rounds.
 */
function spread(xs: number[], quartiles: boolean): string {
  const s = [...xs].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))];
  return quartiles ? `${at(0.25)}–${at(0.75)}` : `${s[0]}–${s[s.length - 1]}`;
}

/** The data path: port security on over off per case, each against its floor of the same run. */
export function dataplaneReport(r: DataplaneResult, heading = "#"): string {
  const x = (s?: TcpSample) =>
    s
      ? [`${s.gbps.toFixed(2)}×`, `${s.rrPerS.toFixed(2)}×`, `${s.connsPerS.toFixed(2)}×`]
      : ["-", "-", "-"];
  const abs = (s: TcpSample) => `${s.gbps} Gbit/s, ${s.rrPerS} rr/s, ${s.connsPerS} conn/s`;
  return [
    `${heading} The pods' data path (\`deno task bench:dataplane\`)`,
    "",
    `${r.date}, ${r.machine}, ${r.quick ? "**quick mode** (" : "("}` +
    (r.windowS
      ? `${r.rounds} ${r.target.leastGuard ? "sets" : "pairs"} per case and metric, windows of ` +
        `${r.windowS} s; one cluster per routing mode with port security on, its guard switched ` +
        `${r.target.leastGuard ? "on, off and to its least" : "off and on"} in place; one probe ` +
        "process and connection per series, pinned to a CPU, its server on the other; "
      : `${r.rounds} rounds per case, iperf3 ${r.durations.throughputS} s, request/response ` +
        `${r.durations.rrS} s, connections ${r.durations.connS} s; `) +
    `load average ${r.loadavg.before} before, ${r.loadavg.after} after); ` +
    "medians; two simulated nodes on the API stand-in",
    "",
    ...dataplaneIntervals(r),
    table(
      [
        "pods",
        "policy",
        "port security on / off: throughput",
        "req/resp",
        "conn/s",
        r.windowS
          ? "on / off per set, throughput (quartiles)"
          : "on / off per round, throughput (min–max)",
        "floor",
        "on / floor: throughput",
        "req/resp",
        "conn/s",
      ],
      r.cases.map((k) => [
        k.placement,
        k.policy ? "isolating the server" : "none selecting",
        ...x(k.onOverOff),
        k.perRound?.length ? spread(k.perRound.map((p) => p.gbps), !!r.windowS) : "-",
        k.floor,
        ...x(k.onOverFloor),
      ]),
    ),
    "",
    ...(r.target.verdict ? [] : [
      `- ${r.target.what}: ${r.target.met ? "met" : "**not met**"} (worst ${r.target.worst}×)` +
      (r.quick ? "; quick mode: too few rounds for the target, see the per-round spread" : ""),
    ]),
    ...(r.target.noise !== undefined
      ? [
        `- noise: the node↔node floor's throughput strayed ${
          Math.round(r.target.noise * 100)
        } % from its median (median absolute deviation) in this run` +
        (r.target.verdict
          ? " (the pairs' ratios cancel what the two of a pair share)"
          : r.target.conclusive
          ? ", within the target's 3 %"
          : `: **inconclusive**, more than the 3 % the target asks to resolve (rerun on a quiet machine, or with more \`--rounds\`)`),
      ]
      : []),
    ...Object.entries(r.floors).map(([f, s]) => `- floor ${f}: ${abs(s)} (this machine, this run)`),
    "",
  ].join("\n");
}

/** One metric's per-set ratios over off: the guard's and its floor's. */
export interface FloorMetric {
  /** The metric (`TcpSample`'s key). */
  metric: keyof TcpSample;
  /** The guard on over off. */
  guard: RatioInterval;
  /** The least guard over off. */
  least: RatioInterval;
}

/** What `bench:guard-floor` writes. */
export interface GuardFloorResult {
  /** When. */
  date: string;
  /** What ran it. */
  machine: string;
  /** Sets per metric. */
  sets: number;
  /** One window's length, in seconds. */
  windowS: number;
  /** The load average before and after. */
  loadavg: { before: string; after: string };
  /** Per metric measured. */
  metrics: FloorMetric[];
  /** Every window's rate, per series (`on`, `off`, `lookup`). */
  samples: Record<string, TcpSample[]>;
}

/** Port security on over off: `bench:guard-floor`'s target (`bench:dataplane`'s too). */
const GUARD_TARGET = 0.97;

const NAMES: Partial<Record<keyof TcpSample, string>> = {
  gbps: "throughput",
  rrPerS: "req/resp",
  connsPerS: "conn/s",
};

/** The Markdown of a result: a row per metric, the guard's and the floor's interval and verdict. */
export function guardFloorReport(r: GuardFloorResult, heading = "#"): string {
  const show = (i: RatioInterval) =>
    `${i.median.toFixed(3)} [${i.low.toFixed(3)}–${i.high.toFixed(3)}]`;
  const said = (i: RatioInterval) => {
    const v = verdictOf(i, GUARD_TARGET);
    return v === "not met" ? "wholly below 0.97" : v === "met" ? "at or above 0.97" : "undecided";
  };
  return [
    `${heading} The guard and its floor, one case (\`deno task bench:guard-floor\`)`,
    "",
    `${r.date}, ${r.machine}, ${r.sets} sets of three adjacent ${r.windowS} s windows (the guard ` +
    "on, off and at its least, switched in place, every order in turn); two pods of one node, no " +
    `policy selecting the server; load average ${r.loadavg.before} before, ${r.loadavg.after} after`,
    "",
    "| metric | guard on / off | | least guard / off | |",
    "| --- | --- | --- | --- | --- |",
    ...r.metrics.map((m) =>
      `| ${NAMES[m.metric] ?? m.metric} | ${show(m.guard)} | ${said(m.guard)} | ${
        show(m.least)
      } | ${said(m.least)} |`
    ),
    "",
    "Medians of the per-set ratios with their distribution-free 95 % intervals. Where the least " +
    "guard's interval lies wholly below 0.97, no guard of per-pod set elements meets the target " +
    "in that metric on this machine.",
    "",
  ].join("\n");
}

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
