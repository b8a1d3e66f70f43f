/**
 * `deno task bench:multinet [--pods 40] [--burst 500 --nodes 10 --concurrency 20] [--burst-only]
 * [--kubeconfig FILE]` (as root): the ADD of a pod
 * with two extra macvlan networks (NetworkAttachmentDefinitions, host-local IPAM), with one
 * host-local one and with one whereabouts one served natively (`multiNetwork.whereaboutsIpam:
 * native`), against the same pod on the default network only, one pod at a time on one simulated
 * node (see `daemon/dev/cluster_sim.ts`) on the embedded API stand-in. The time is the runtime's:
 * the shim's ADD until its answer. With `--burst`, also a burst of that many pods spread over
 * `--nodes` simulated nodes, `--concurrency` ADDs at a time, on the real kube-apiserver when
 * `/opt/realk8s/kubeconfig` exists (or `--kubeconfig`; the stand-in otherwise): the harness's floor,
 * the default network alone and each pod with one native whereabouts network, two rounds each in
 * ABBA order (the series' mean wall times compared); then, in the same
 * run, whereabouts v0.9.0 itself and host-local with the same sizes through libcni
 * (`shared/tools/whereabouts/bench.py`, where the plugin is built). Targets: ≤ 1.3× the default
 * network, ≤ 0.1× whereabouts. `--burst-only` keeps the one-pod series of the last result. Written
 * to `bench/results/multinet.json` and `multinet.md`.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import {
  type SimCluster,
  type SimFloor,
  type SimPod,
  withSimCluster,
} from "../daemon/dev/cluster_sim.ts";
import { installNadCrd, installNetworkBlockCrd } from "../daemon/dev/crds.ts";
import { IS_ROOT } from "../daemon/dev/netns.ts";
import { NETWORK_ATTACHMENT_DEFINITIONS, NETWORKBLOCKS } from "../daemon/k8s/resources.ts";
import { KubeClient, type KubeObject } from "../daemon/k8s/client.ts";
import { loadKubeconfig } from "../daemon/k8s/kubeconfig.ts";
import { HttpTransport } from "../daemon/k8s/transport.ts";
import type { NetworkBlockObject } from "../daemon/ipam/nad_blocks.ts";
import {
  type BurstSeries,
  type MultinetBench,
  type MultinetBurst,
  multinetReport,
  type WhereaboutsBurst,
} from "./multinet_report.ts";

/**
 * What one run measured, and its burst (their shapes are beside their renderer,
 * `multinet_report.ts`).
 */
export type { BurstSeries, MultinetBench, MultinetBurst, WhereaboutsBurst };

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

const load1 = () => Math.round(Deno.loadavg()[0] * 10) / 10;

/**
 * whereabouts' own benchmark (`shared/tools/whereabouts/bench.py`): `pods` pods over `nodes`
 * simulated nodes, `concurrency` ADDs at a time, through libcni against the real kube-apiserver
 * of `kubeconfig`, with `ipam` (whereabouts or host-local).
 */
export async function whereaboutsBurst(
  script: string,
  ipam: "whereabouts" | "host-local",
  pods: number,
  nodes: number,
  concurrency: number,
  kubeconfig: string,
): Promise<WhereaboutsBurst> {
  const out = await Deno.makeTempFile({ prefix: "ferry-wab-", suffix: ".json" });
  try {
    const r = await new Deno.Command("python3", {
      args: [script, "--pods", `${pods}`, "--nodes", `${nodes}`, "--concurrency", `${concurrency}`]
        .concat(["--ipam", ipam, "--kubeconfig", kubeconfig, "--json-out", out]),
      stdout: "null",
      stderr: "inherit",
    }).output();
    const j = JSON.parse(await Deno.readTextFile(out));
    if (!r.success || j.failed) throw new Error(`bench.py --ipam ${ipam}: ${j.failed ?? r.code}`);
    const v = j.verify_del ?? {};
    return {
      addS: j.add.wall_s,
      p50: j.add.lat_ms.p50,
      p99: j.add.lat_ms.p99,
      errors: j.add.errors,
      delS: j.del.wall_s,
      duplicates: j.verify_add?.duplicates ?? 0,
      leftOver: (v.ippool_allocations_left ?? 0) + (v.hostlocal_files_left ?? 0) +
        (v.net1_left ?? 0),
      load: [Math.round(j.loadavg_start[0] * 10) / 10, Math.round(j.loadavg_end[0] * 10) / 10],
    };
  } finally {
    await Deno.remove(out).catch(() => {});
  }
}

/**
 * A burst of `pods` pods over `nodes` simulated nodes, `concurrency` ADDs at a time: the harness's
 * floor (no CNI: API pod, namespace, a process), then on the default network alone, then each also
 * on one macvlan NAD whose whereabouts IPAM is served natively; on `kubeconfig`'s API server (the
 * stand-in without). With `whereabouts` (bench.py's path), the real plugin and host-local with the
 * same sizes, in the same run, after Ferry's cluster is gone.
 */
export async function burstBench(
  pods: number,
  nodes: number,
  concurrency: number,
  kubeconfig?: string,
  whereabouts?: string,
): Promise<MultinetBurst> {
  const started = Date.now();
  const load: Record<string, number> = { start: load1() };
  const simNodes = new Set<string>();
  const ferry = await withSimCluster({ nodes, config: NATIVE, kubeconfig }, async (c) => {
    for (const n of c.nodes) simNodes.add(n.name);
    await installNadCrd(c.client);
    await installNetworkBlockCrd(c.client);
    await c.client.create(
      NETWORK_ATTACHMENT_DEFINITIONS,
      macvlanNad("bench-wb", { type: "whereabouts", range: "172.20.0.0/16" }),
    );
    try {
      return await bursts(c);
    } finally {
      await c.client.delete(NETWORK_ATTACHMENT_DEFINITIONS, "default", "bench-wb").catch(() => {});
    }
  }).finally(async () => {
    // The simulated nodes' NetworkBlocks outlive their daemons on a real server: remove them
    // (with a client of its own: the simulation's is closed with it).
    if (!kubeconfig) return;
    const transport = new HttpTransport(await loadKubeconfig(kubeconfig));
    try {
      const client = new KubeClient(transport);
      const blocks = await client.listAll<NetworkBlockObject>(NETWORKBLOCKS, {});
      for (const b of blocks.items) {
        if (!simNodes.has(b.spec?.node ?? "")) continue;
        await client.delete(NETWORKBLOCKS, undefined, b.metadata!.name!);
      }
    } catch (e) {
      console.error(`could not remove the simulated nodes' NetworkBlocks: ${e}`);
    } finally {
      transport.close();
    }
  });
  async function bursts(c: SimCluster) {
    const burst = async (
      prefix: string,
      annotations?: Record<string, string>,
      floor?: SimFloor,
    ): Promise<BurstSeries & { times: number[] }> => {
      load[prefix] = load1();
      const made: SimPod[] = [];
      const times: number[] = [];
      let next = 0;
      const t = performance.now();
      await Promise.all(Array.from({ length: concurrency }, async () => {
        while (next < pods) {
          const i = next++;
          const t0 = performance.now();
          made.push(
            await c.addPod(c.nodes[i % nodes], `${prefix}${i}`, 120_000, { annotations, floor }),
          );
          times.push(performance.now() - t0);
        }
      }));
      const wallS = Math.round((performance.now() - t) / 10) / 100;
      await Promise.all(Array.from({ length: concurrency }, async () => {
        for (let pod = made.pop(); pod; pod = made.pop()) {
          if (floor) await c.deletePodObject(pod);
          else await c.removePod(pod);
        }
      }));
      return { wallS, p50: quantile(times, 0.5), p99: quantile(times, 0.99), times };
    };
    /** The rounds of one series as one: their mean wall time, each round's, and the pods' quantiles. */
    const merged = (rounds: (BurstSeries & { times: number[] })[]): BurstSeries => {
      const times = rounds.flatMap((r) => r.times);
      const walls = rounds.map((r) => r.wallS);
      return {
        wallS: Math.round((walls.reduce((a, b) => a + b, 0) / walls.length) * 100) / 100,
        walls,
        p50: quantile(times, 0.5),
        p99: quantile(times, 0.99),
      };
    };
    const nad = { "k8s.v1.cni.cncf.io/networks": "bench-wb" };
    // Warm both paths on every node (the NAD watch starts at the first selection).
    await Promise.all(c.nodes.map((n, i) =>
      c.addPod(n, `warm-${i}`, 120_000, { annotations: nad })
        .then((p) => c.removePod(p))
    ));
    const { times: _, ...harnessFloor } = await burst("bf", undefined, "harness");
    // The shim's own cold start (a Deno process answering VERSION): what every ADD pays before
    // the daemon does anything, and no IPAM can make cheaper.
    const { times: __, ...shimFloor } = await burst("bs", undefined, "shimStart");
    // The two series alternate (ABBA) and each is the mean of its rounds: what drifts over the run
    // (the machine's load, the API server's state) weighs on both alike.
    const defaults: (BurstSeries & { times: number[] })[] = [];
    const nads: (BurstSeries & { times: number[] })[] = [];
    for (const [i, kind] of ["bd", "bw", "bw", "bd"].entries()) {
      if (kind === "bd") defaults.push(await burst(`bd${i}-`));
      else nads.push(await burst(`bw${i}-`, nad));
    }
    return { harnessFloor, shimFloor, defaultOnly: merged(defaults), nativeNad: merged(nads) };
  }
  const result: MultinetBurst = {
    date: new Date(started).toISOString(),
    pods,
    nodes,
    concurrency,
    api: kubeconfig ?? "stand-in",
    defaultOnlyS: ferry.defaultOnly.wallS,
    nativeNadS: ferry.nativeNad.wallS,
    ratio: Math.round((ferry.nativeNad.wallS / ferry.defaultOnly.wallS) * 100) / 100,
    series: ferry,
    load,
  };
  if (!whereabouts || !kubeconfig) {
    result.whereaboutsSkipped = kubeconfig
      ? "the whereabouts plugin is not built (shared/tools/whereabouts)"
      : "no real kube-apiserver";
    return result;
  }
  load.whereabouts = load1();
  result.whereabouts = await whereaboutsBurst(
    whereabouts,
    "whereabouts",
    pods,
    nodes,
    concurrency,
    kubeconfig,
  );
  load.hostLocal = load1();
  result.hostLocal = await whereaboutsBurst(
    whereabouts,
    "host-local",
    pods,
    nodes,
    concurrency,
    kubeconfig,
  );
  result.vsWhereabouts = Math.round((result.nativeNadS / result.whereabouts.addS) * 1000) / 1000;
  return result;
}

if (import.meta.main) {
  if (!IS_ROOT) {
    console.error("bench:multinet needs root (it plugs real network namespaces)");
    Deno.exit(2);
  }
  const flags = parseArgs(Deno.args, {
    string: ["pods", "burst", "nodes", "concurrency", "kubeconfig", "whereabouts-bench"],
    boolean: ["burst-only"],
    default: { pods: "40", nodes: "10", concurrency: "20" },
  });
  const real = "/opt/realk8s/kubeconfig";
  const kubeconfig = flags.kubeconfig ?? (await Deno.stat(real).then(() => real, () => undefined));
  // shared/tools/whereabouts beside the checkout (or beside the worktrees' folder).
  const script = flags["whereabouts-bench"] ??
    ["../../shared", "../../../shared"].map((d) =>
      new URL(`${d}/tools/whereabouts/bench.py`, import.meta.url).pathname
    ).find((p) => {
      try {
        return Deno.statSync(p).isFile;
      } catch {
        return false;
      }
    });
  const built = await Deno.stat("/opt/cnitest/whereabouts/bin/whereabouts").then(
    () => true,
    () => false,
  );
  const result = flags["burst-only"]
    ? JSON.parse(await Deno.readTextFile(new URL("./results/multinet.json", import.meta.url)))
    : await multinetBench(Number(flags.pods));
  if (flags.burst) {
    result.burst = await burstBench(
      Number(flags.burst),
      Number(flags.nodes),
      Number(flags.concurrency),
      kubeconfig,
      built && script ? script : undefined,
    );
  }
  const dir = new URL("./results/", import.meta.url);
  await Deno.writeTextFile(new URL("multinet.json", dir), JSON.stringify(result, null, 2) + "\n");
  await Deno.writeTextFile(new URL("multinet.md", dir), multinetReport(result));
  console.log(multinetReport(result));
}
