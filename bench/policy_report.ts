/**
 * NetworkPolicy at scale (`bench/results/policy.json`, `deno task bench:policy`,
 * `policy_bench.ts`): the result and its Markdown. Pure: JSON in, text out.
 *
 * @module
 */
import { table } from "./markdown.ts";

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
