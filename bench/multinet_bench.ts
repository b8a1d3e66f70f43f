/**
 * `deno task bench:multinet [--pods 40] [--burst 500 --nodes 10]` (as root): the ADD of a pod
 * with two extra macvlan networks (NetworkAttachmentDefinitions, host-local IPAM), with one
 * host-local one and with one whereabouts one served natively (`multiNetwork.whereaboutsIpam:
 * native`), against the same pod on the default network only, one pod at a time on one simulated
 * node (see `daemon/dev/cluster_sim.ts`) on the embedded API stand-in. The time is the runtime's:
 * the shim's ADD until its answer. With `--burst`, also a burst of that many pods spread over
 * `--nodes` simulated nodes at once, on the default network alone and then each with one native
 * whereabouts network: the wall time of each burst. Written to `bench/results/multinet.json` and
 * `multinet.md`.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { withSimCluster } from "../daemon/dev/cluster_sim.ts";
import { installNadCrd, installNetworkBlockCrd } from "../daemon/dev/crds.ts";
import { IS_ROOT } from "../daemon/dev/netns.ts";
import { NETWORK_ATTACHMENT_DEFINITIONS } from "../daemon/k8s/resources.ts";
import type { KubeObject } from "../daemon/k8s/client.ts";
import { type MultinetBench, multinetReport } from "./report.ts";

/** What one run measured (its shape is beside its renderer, `report.ts`). */
export type { MultinetBench };

/** Every simulated node serves whereabouts configs natively. */
const NATIVE = { multiNetwork: { whereaboutsIpam: "native" } };

/** A macvlan NAD on the underlay with `ipam`. */
function macvlanNad(name: string, ipam: Record<string, unknown>): KubeObject {
  return {
    metadata: { name, namespace: "default" },
    spec: {
      config: JSON.stringify({ cniVersion: "1.0.0", type: "macvlan", master: "eth0", ipam }),
    },
  } as KubeObject;
}

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.floor(q * s.length))] * 10) / 10;
};

/** Runs the benchmark. */
export async function multinetBench(pods: number): Promise<MultinetBench> {
  return await withSimCluster({ nodes: 1, config: NATIVE }, async (c) => {
    await installNadCrd(c.client);
    await installNetworkBlockCrd(c.client);
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
              ranges: [[{ subnet: `192.168.${95 + i}.0/24` }]],
            },
          }),
        },
      } as KubeObject);
    }
    await c.client.create(
      NETWORK_ATTACHMENT_DEFINITIONS,
      macvlanNad("bench-h1", {
        type: "host-local",
        ranges: [[{ subnet: "192.168.97.0/24" }]],
      }),
    );
    await c.client.create(
      NETWORK_ATTACHMENT_DEFINITIONS,
      macvlanNad("bench-w1", { type: "whereabouts", range: "192.168.98.0/24" }),
    );
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
    const hostLocal = { "k8s.v1.cni.cncf.io/networks": "bench-h1" };
    const native = { "k8s.v1.cni.cncf.io/networks": "bench-w1" };
    await series("warm-h", hostLocal, 3);
    await series("warm-w", native, 3);
    const plain = await series("d", undefined);
    const multi = await series("m", extra);
    const one = await series("h", hostLocal);
    const wa = await series("w", native);
    const defaultOnly = { p50: quantile(plain, 0.5), p90: quantile(plain, 0.9) };
    const twoExtra = { p50: quantile(multi, 0.5), p90: quantile(multi, 0.9) };
    return {
      date: new Date().toISOString(),
      cpus: navigator.hardwareConcurrency,
      pods,
      defaultOnly,
      twoExtra,
      ratio: Math.round((twoExtra.p50 / defaultOnly.p50) * 100) / 100,
      oneHostLocal: { p50: quantile(one, 0.5), p90: quantile(one, 0.9) },
      oneNative: { p50: quantile(wa, 0.5), p90: quantile(wa, 0.9) },
    };
  });
}

/**
 * A burst of `pods` pods over `nodes` simulated nodes, all at once: on the default network alone,
 * then each also on one macvlan NAD whose whereabouts IPAM is served natively. Wall times (s).
 */
export async function burstBench(
  pods: number,
  nodes: number,
): Promise<NonNullable<MultinetBench["burst"]>> {
  return await withSimCluster({ nodes, config: NATIVE }, async (c) => {
    await installNadCrd(c.client);
    await installNetworkBlockCrd(c.client);
    await c.client.create(
      NETWORK_ATTACHMENT_DEFINITIONS,
      macvlanNad("bench-wb", { type: "whereabouts", range: "172.20.0.0/16" }),
    );
    const burst = async (prefix: string, annotations?: Record<string, string>) => {
      const t = performance.now();
      const made = await Promise.all(
        Array.from(
          { length: pods },
          (_, i) => c.addPod(c.nodes[i % nodes], `${prefix}${i}`, 120_000, { annotations }),
        ),
      );
      const s = (performance.now() - t) / 1000;
      for (const pod of made) await c.removePod(pod);
      return Math.round(s * 100) / 100;
    };
    await burst("warm-b", { "k8s.v1.cni.cncf.io/networks": "bench-wb" });
    const defaultOnlyS = await burst("bd");
    const nativeNadS = await burst("bw", { "k8s.v1.cni.cncf.io/networks": "bench-wb" });
    return {
      pods,
      nodes,
      defaultOnlyS,
      nativeNadS,
      ratio: Math.round((nativeNadS / defaultOnlyS) * 100) / 100,
    };
  });
}

if (import.meta.main) {
  if (!IS_ROOT) {
    console.error("bench:multinet needs root (it plugs real network namespaces)");
    Deno.exit(2);
  }
  const flags = parseArgs(Deno.args, {
    string: ["pods", "burst", "nodes"],
    default: { pods: "40", nodes: "10" },
  });
  const result = await multinetBench(Number(flags.pods));
  if (flags.burst) result.burst = await burstBench(Number(flags.burst), Number(flags.nodes));
  const dir = new URL("./results/", import.meta.url);
  await Deno.writeTextFile(new URL("multinet.json", dir), JSON.stringify(result, null, 2) + "\n");
  await Deno.writeTextFile(new URL("multinet.md", dir), multinetReport(result));
  console.log(multinetReport(result));
}
