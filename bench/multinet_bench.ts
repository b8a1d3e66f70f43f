/**
 * `deno task bench:multinet [--pods 40]` (as root): the ADD of a pod with two extra macvlan
 * networks (NetworkAttachmentDefinitions, host-local IPAM) against the same pod on the default
 * network only, one pod at a time on one simulated node (see `daemon/dev/cluster_sim.ts`) on the
 * embedded API stand-in. The time is the runtime's: the shim's ADD until its answer. Written to
 * `bench/results/multinet.json` and `multinet.md`.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { withSimCluster } from "../daemon/dev/cluster_sim.ts";
import { installNadCrd } from "../daemon/dev/crds.ts";
import { IS_ROOT } from "../daemon/dev/netns.ts";
import { NETWORK_ATTACHMENT_DEFINITIONS } from "../daemon/k8s/resources.ts";
import type { KubeObject } from "../daemon/k8s/client.ts";
import { multinetReport } from "./report.ts";

/** What one run measured (ms). */
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
}

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.floor(q * s.length))] * 10) / 10;
};

/** Runs the benchmark. */
export async function multinetBench(pods: number): Promise<MultinetBench> {
  return await withSimCluster({ nodes: 1 }, async (c) => {
    await installNadCrd(c.client);
    const dataDir = await Deno.makeTempDir({ prefix: "ferry-bench-hostlocal-" });
    try {
      for (const [i, name] of ["bench-x1", "bench-x2"].entries()) {
        await c.client.create(NETWORK_ATTACHMENT_DEFINITIONS, {
          metadata: { name, namespace: "default" },
          spec: {
            config: JSON.stringify({
              cniVersion: "1.0.0",
              type: "macvlan",
              master: "eth0",
              ipam: {
                type: "host-local",
                dataDir,
                ranges: [[{ subnet: `192.168.${95 + i}.0/24` }]],
              },
            }),
          },
        } as KubeObject);
      }
      const series = async (prefix: string, annotations?: Record<string, string>, n = pods) => {
        const times: number[] = [];
        for (let i = 0; i < n; i++) {
          const t = performance.now();
          const pod = await c.addPod(c.nodes[0], `${prefix}${i}`, 30_000, { annotations });
          times.push(performance.now() - t);
          await c.removePod(pod);
        }
        return times;
      };
      // Warm up both paths (the NAD watch starts at the first selection).
      const extra = { "k8s.v1.cni.cncf.io/networks": "bench-x1,bench-x2" };
      await series("warm-d", undefined, 3);
      await series("warm-m", extra, 3);
      const plain = await series("d", undefined);
      const multi = await series("m", extra);
      const defaultOnly = { p50: quantile(plain, 0.5), p90: quantile(plain, 0.9) };
      const twoExtra = { p50: quantile(multi, 0.5), p90: quantile(multi, 0.9) };
      return {
        date: new Date().toISOString(),
        cpus: navigator.hardwareConcurrency,
        pods,
        defaultOnly,
        twoExtra,
        ratio: Math.round((twoExtra.p50 / defaultOnly.p50) * 100) / 100,
      };
    } finally {
      await Deno.remove(dataDir, { recursive: true }).catch(() => {});
    }
  });
}

if (import.meta.main) {
  if (!IS_ROOT) {
    console.error("bench:multinet needs root (it plugs real network namespaces)");
    Deno.exit(2);
  }
  const flags = parseArgs(Deno.args, { string: ["pods"], default: { pods: "40" } });
  const result = await multinetBench(Number(flags.pods));
  const dir = new URL("./results/", import.meta.url);
  await Deno.writeTextFile(new URL("multinet.json", dir), JSON.stringify(result, null, 2) + "\n");
  await Deno.writeTextFile(new URL("multinet.md", dir), multinetReport(result));
  console.log(multinetReport(result));
}
