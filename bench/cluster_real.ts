/**
 * `deno task bench:cluster-real [--sizes 30,90] [--cnis ferry,ref]` (root; the cluster of
 * ../shared/tools/realcluster running): pods created by a Deployment spread by the scheduler over
 * the three real nodes, Ferry's DaemonSet against the reference plugins (`use-cni.sh ref`) in the
 * same run. Per CNI and size: the time from the Deployment's creation to every pod Ready;
 * containerd's RunPodSandbox per node, p50/p99 (from its log: the request and its answer); and,
 * for Ferry, each daemon's resident memory after the burst and the CPU it spent during it (its
 * `/proc/1/stat`, through `kubectl exec`). Writes `bench/results/cluster_real.json` and `.md`.
 *
 * Ferry must be installed when it starts (`ferry.sh install`); it leaves the reference plugins in
 * place when `ref` is measured last.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import {
  appPods,
  kubectl,
  NODES,
  RC,
  REPO,
  script,
  uninstallFerry,
} from "../tests/cluster/_realcluster.ts";
import { clusterRealReport } from "./cluster_real_report.ts";

const CLK_TCK = 100;

function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

/** RunPodSandbox durations (ms) in a node's containerd log after `since` (ms since epoch). */
async function sandboxTimes(node: string, since: number): Promise<number[]> {
  const text = await Deno.readTextFile(`${RC}/nodes/${node}/logs/containerd.log`);
  const started = new Map<string, number>();
  const out: number[] = [];
  for (const line of text.split("\n")) {
    const t = /time="([^"]+)"/.exec(line)?.[1];
    if (!t) continue;
    const at = Date.parse(t);
    if (at < since) continue;
    const pod = /RunPodSandbox for &PodSandboxMetadata\{Name:([^,]+),Uid:([^,]+)/.exec(line);
    if (!pod) continue;
    const key = `${pod[1]}/${pod[2]}`;
    if (line.includes("returns sandbox id")) {
      const from = started.get(key);
      if (from !== undefined) out.push(at - from);
    } else if (!started.has(key)) started.set(key, at);
  }
  return out.sort((a, b) => a - b);
}

/** Each Ferry daemon's RSS (MiB) and CPU seconds so far. */
async function ferryUsage(): Promise<Record<string, { rssMiB: number; cpuS: number }>> {
  const out: Record<string, { rssMiB: number; cpuS: number }> = {};
  for (const p of await appPods("ferry")) {
    const status = await kubectl(
      "exec",
      "-n",
      "kube-system",
      p.name,
      "-c",
      "ferry",
      "--",
      "cat",
      "/proc/1/status",
      "/proc/1/stat",
    );
    const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
    const stat = status.trim().split("\n").at(-1)!;
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const cpu = (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
    out[p.node] = { rssMiB: Math.round(rssKb / 102.4) / 10, cpuS: cpu };
  }
  return out;
}

interface Run {
  cni: string;
  pods: number;
  allReadyMs: number;
  sandbox: Record<string, { n: number; p50Ms: number; p99Ms: number }>;
  ferry?: Record<string, { rssMiB: number; cpuS: number }>;
}

async function burst(cni: string, pods: number): Promise<Run> {
  const ns = `bench-${cni}-${pods}`;
  await kubectl("create", "namespace", ns);
  const before = cni === "ferry" ? await ferryUsage() : undefined;
  const since = Date.now() - 1000;
  const started = performance.now();
  const deployment = {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: "burst", namespace: ns },
    spec: {
      replicas: pods,
      selector: { matchLabels: { app: "burst" } },
      template: {
        metadata: { labels: { app: "burst" } },
        spec: {
          terminationGracePeriodSeconds: 0,
          containers: [{ name: "c", image: "registry.k8s.io/pause:3.9" }],
        },
      },
    },
  };
  const file = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(file, JSON.stringify(deployment));
  await kubectl("apply", "-f", file);
  await Deno.remove(file);
  await kubectl("rollout", "status", "-n", ns, "deployment/burst", "--timeout=600s");
  const allReadyMs = Math.round(performance.now() - started);
  await new Promise((r) => setTimeout(r, 1500)); // the log lines of the last sandboxes
  const sandbox: Run["sandbox"] = {};
  for (const n of NODES) {
    const t = await sandboxTimes(n, since);
    sandbox[n] = { n: t.length, p50Ms: percentile(t, 50), p99Ms: percentile(t, 99) };
  }
  let ferry: Run["ferry"];
  if (before) {
    const after = await ferryUsage();
    ferry = Object.fromEntries(
      Object.entries(after).map(([n, a]) => [n, {
        rssMiB: a.rssMiB,
        cpuS: Math.round((a.cpuS - (before[n]?.cpuS ?? 0)) * 100) / 100,
      }]),
    );
  }
  await kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s");
  return { cni, pods, allReadyMs, sandbox, ferry };
}

if (import.meta.main) {
  const flags = parseArgs(Deno.args, {
    string: ["sizes", "cnis"],
    default: { sizes: "30,90", cnis: "ferry,ref" },
  });
  const sizes = flags.sizes.split(",").map(Number);
  const runs: Run[] = [];
  for (const cni of flags.cnis.split(",")) {
    if (cni === "ref") {
      // Ferry out the operator's way, the reference plugins in.
      await uninstallFerry();
      await script("use-cni.sh", ["ref"]);
      await kubectl("wait", "--for=condition=Ready", "node", "--all", "--timeout=120s");
    }
    for (const n of sizes) {
      const run = await burst(cni, n);
      console.log(JSON.stringify(run));
      runs.push(run);
    }
  }
  const result = {
    date: new Date().toISOString(),
    machine: `${navigator.hardwareConcurrency} CPUs`,
    cluster:
      "3 nodes (../shared/tools/realcluster: kubelet + containerd 1.6 + kube-proxy per node)",
    runs,
  };
  await Deno.writeTextFile(
    `${REPO}bench/results/cluster_real.json`,
    JSON.stringify(result, null, 2) + "\n",
  );
  const md = clusterRealReport(result);
  await Deno.writeTextFile(`${REPO}bench/results/cluster_real.md`, md);
  console.log(md);
}
