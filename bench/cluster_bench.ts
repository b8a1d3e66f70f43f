/**
 * `deno task bench:cluster [--nodes 10] [--pods 500] [--concurrency 100] [--ipam pool|kubernetes]
 * [--kubeconfig FILE] [--no-floors]`
 * (as root): pods spread over simulated nodes (each a namespace with its own daemon process; see
 * `daemon/dev/cluster_sim.ts`), plugged through each node's shim at once, on the embedded stand-in
 * or, with `--kubeconfig` (default `/opt/realk8s/kubeconfig` when it exists; that server is
 * started for the run when it is down, and stopped again), a real kube-apiserver. Measures the time until every pod is plugged, ADD latency as a runtime sees
 * it, and API requests per ADD (from the daemons' own counters). Written to
 * `bench/results/cluster.json` and `cluster.md`.
 *
 * For scale (issue 15): whereabouts takes 4 min 34 s for 500 pods over 100 nodes with its
 * single-object lease. Target here: all plugged in ≤ 10 s, ≤ 1 API write per ADD.
 *
 * @module
 */
import { withRealApiserver } from "../daemon/dev/realkubelet.ts";
import { parseArgs } from "deno-std/cli/parse_args.js";
import { type SimFloor, type SimPod, withSimCluster } from "../daemon/dev/cluster_sim.ts";
import { IS_ROOT } from "../daemon/dev/netns.ts";
import { STATS_PATH } from "../lib/socket_api.ts";
import { unixRequest } from "../lib/unix_http.ts";
import { type ClusterBench, clusterBenchReport } from "./cluster_report.ts";
import type { DaemonStats } from "../daemon/daemon.ts";

/** What one run measured (its shape is beside its renderer, `cluster_report.ts`). */
export type { ClusterBench };

async function statsOf(socket: string): Promise<DaemonStats> {
  const res = await unixRequest(socket, "GET", STATS_PATH, undefined, AbortSignal.timeout(5000));
  return JSON.parse(res.body) as DaemonStats;
}

const sum = (stats: DaemonStats[]) => {
  const out: Record<string, number> = {};
  for (const s of stats) {
    for (const [k, v] of Object.entries(s.apiRequests)) out[k] = (out[k] ?? 0) + v;
  }
  return out;
};

/** Runs the benchmark. */
export async function clusterBench(
  options: {
    nodes: number;
    pods: number;
    concurrency: number;
    kubeconfig?: string;
    ipam: "kubernetes" | "pool";
    floors: boolean;
  },
): Promise<ClusterBench> {
  return await withSimCluster(
    {
      nodes: options.nodes,
      kubeconfig: options.kubeconfig,
      ...(options.ipam === "pool" ? { pool: {}, config: { ipam: { mode: "pool" } } } : {}),
    },
    async (c) => {
      const burst = async (prefix: string, floor?: SimFloor) => {
        const latencies: number[] = [];
        const pods: SimPod[] = [];
        let next = 0;
        const started = performance.now();
        await Promise.all(Array.from({ length: options.concurrency }, async () => {
          while (next < options.pods) {
            const i = next++;
            const t = performance.now();
            pods.push(
              await c.addPod(c.nodes[i % c.nodes.length], `${prefix}${i}`, 60_000, { floor }),
            );
            latencies.push(performance.now() - t);
          }
        }));
        return { ms: Math.round(performance.now() - started), latencies, pods };
      };
      // The floors: the same burst without Ferry (API pod, namespace, a process), and with only
      // the shim's cold start (VERSION: no daemon work).
      const floors = { harnessMs: 0, shimStartMs: 0 };
      if (options.floors) {
        floors.harnessMs = (await burst("floor-h", "harness")).ms;
        floors.shimStartMs = (await burst("floor-s", "shimStart")).ms;
      }
      // Let every daemon's annotation writes and syncs from start-up settle before counting.
      const before = sum(await Promise.all(c.nodes.map((n) => statsOf(n.socket))));
      const { ms: allPluggedMs, latencies, pods } = await burst("bench");
      // The annotation writes follow the answers: wait for them to count them.
      const deadline = Date.now() + 30_000;
      let after: DaemonStats[];
      while (true) {
        after = await Promise.all(c.nodes.map((n) => statsOf(n.socket)));
        const settled = after.every((s) => !s.annotationWrites?.pending && !s.ipam?.pending);
        if (settled || Date.now() > deadline) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      const requests = sum(after);
      const perAdd: Record<string, number> = {};
      for (const [k, v] of Object.entries(requests)) {
        const d = v - (before[k] ?? 0);
        if (d) perAdd[k] = Math.round((d / options.pods) * 100) / 100;
      }
      const writes = ["POST", "PUT", "PATCH", "DELETE"].reduce((n, k) => n + (perAdd[k] ?? 0), 0);
      // The daemons' only other write is the attachments annotation (one PATCH per pod).
      const ipamWrites = ["POST", "PUT", "DELETE"].reduce((n, k) => n + (perAdd[k] ?? 0), 0);
      const s = [...latencies].sort((a, b) => a - b);
      const at = (q: number) => Math.round(s[Math.min(s.length - 1, Math.floor(q * s.length))]);
      for (const pod of pods) await c.removePod(pod);
      const targets = { allPluggedMs: 10_000, apiWritesPerAdd: 1 };
      return {
        date: new Date().toISOString(),
        cpus: navigator.hardwareConcurrency,
        api: options.kubeconfig || "stand-in",
        nodes: options.nodes,
        pods: options.pods,
        concurrency: options.concurrency,
        allPluggedMs,
        floors,
        add: { p50: at(0.5), p90: at(0.9), p99: at(0.99), max: Math.round(s[s.length - 1]) },
        apiRequestsPerAdd: perAdd,
        ipam: options.ipam,
        apiWritesPerAdd: Math.round(writes * 100) / 100,
        ipamWritesPerAdd: Math.round(ipamWrites * 100) / 100,
        apiCallsOnCniPath: after.reduce((n, st) => n + st.apiCallsOnCniPath, 0),
        addPhases: worstPhases(after),
        targets: {
          ...targets,
          met: allPluggedMs <= targets.allPluggedMs && ipamWrites <= targets.apiWritesPerAdd,
        },
      };
    },
  );
}

function worstPhases(stats: DaemonStats[]): Record<string, { p50: number; p99: number }> {
  const out: Record<string, { p50: number; p99: number }> = {};
  for (const s of stats) {
    for (const [phase, p] of Object.entries(s.addPhases ?? {})) {
      const w = out[phase] ?? { p50: 0, p99: 0 };
      out[phase] = { p50: Math.max(w.p50, p!.p50), p99: Math.max(w.p99, p!.p99) };
    }
  }
  return out;
}

if (import.meta.main) {
  if (!IS_ROOT) {
    console.error("bench:cluster needs root (it plugs real network namespaces)");
    Deno.exit(2);
  }
  const real = "/opt/realk8s/kubeconfig";
  const flags = parseArgs(Deno.args, {
    string: ["nodes", "pods", "concurrency", "kubeconfig", "ipam"],
    boolean: ["no-floors"],
    default: { nodes: "10", pods: "500", concurrency: "100", ipam: "pool" },
  });
  const kubeconfig = flags.kubeconfig ??
    (await Deno.stat(real).then(() => real, () => undefined));
  const bench = () =>
    clusterBench({
      nodes: Number(flags.nodes),
      pods: Number(flags.pods),
      concurrency: Number(flags.concurrency),
      kubeconfig,
      ipam: flags.ipam === "kubernetes" ? "kubernetes" : "pool",
      floors: !flags["no-floors"],
    });
  // The built realk8s server is started for the run when it is down (and stopped after).
  const result = kubeconfig === real ? await withRealApiserver(bench) : await bench();
  const dir = new URL("./results/", import.meta.url);
  await Deno.writeTextFile(new URL("cluster.json", dir), JSON.stringify(result, null, 2) + "\n");
  await Deno.writeTextFile(new URL("cluster.md", dir), clusterBenchReport(result));
  console.log(clusterBenchReport(result));
}
