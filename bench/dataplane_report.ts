/**
 * The pods' data path (`bench/results/dataplane.json`, `deno task bench:dataplane`,
 * `dataplane_bench.ts`): the result and its Markdown, port security on over off per case with the
 * pairs' intervals. Pure: JSON in, text out.
 *
 * @module
 */
import type { ProbeDurations, TcpSample } from "./tcp_probe.ts";
import type { RatioInterval, Verdict } from "./paired.ts";
import { table } from "./markdown.ts";

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
