/**
 * The benchmark's run on the real kubelet node (`daemon/dev/realkubelet.ts`): 20 and 50 busybox
 * pods created with kubectl at once until all are Running with an address (the tools'
 * `bench-pods.sh`), with Debian's reference bridge + host-local, then with Ferry as installed
 * (`install-cni`: the shim chained with portmap) and its daemon watching the node; containerd's
 * RunPodSandbox p50 from its log, and the daemon's own ADD p99 under that load.
 *
 * @module
 */
import { run } from "../daemon/dev/netns.ts";
import {
  NODE_READY,
  removePortmapChains,
  REPO,
  sh,
  TOOLS,
  withRealApiserver,
} from "../daemon/dev/realkubelet.ts";

/** One burst. */
export interface NodeRun {
  /** Which CNI. */
  cni: "reference" | "ferry";
  /** Pods created at once. */
  pods: number;
  /** From `kubectl apply` until all Running with a podIP, s. */
  allRunningS: number;
  /** containerd's RunPodSandbox p50 and p90, ms. */
  runPodSandboxP50Ms?: number;
  /** See above. */
  runPodSandboxP90Ms?: number;
  /** Ferry's daemon: its ADD p99 over this burst (request in to answer out), ms. */
  daemonAddP99Ms?: number;
  /** The same, phase by phase (`addPhases` of `/v1/stats`: turn, podWait, ipam, plug, record), ms. */
  daemonAddPhaseP99Ms?: Record<string, number>;
  /**
   * Synchronous work on the daemon's JS thread over the burst (`netnsSync`, `netlinkSync` of
   * `/v1/stats`), ms: inside pod namespaces, and in netlink send/recv (total and longest call).
   */
  daemonSyncMs?: { netns: number; netlink: number; netlinkMax: number };
}

/** Each phase's p99 from `/v1/stats` `addPhases`, the total left out. */
function phaseP99s(addPhases: Record<string, { p99: number }> | undefined): Record<string, number> {
  return Object.fromEntries(
    Object.entries(addPhases ?? {}).filter(([k]) => k !== "total").map(([k, v]) => [k, v.p99]),
  );
}

/** What the node run found. */
export interface NodeBench {
  /** Every burst. */
  runs: NodeRun[];
  /** Targets of issue 18 met or not. */
  targets: { what: string; met: boolean; measured: string }[];
}

function parseBenchPods(
  out: string,
): Pick<NodeRun, "allRunningS" | "runPodSandboxP50Ms" | "runPodSandboxP90Ms"> {
  const running = /all Running with IP ([\d.]+)s/.exec(out);
  if (!running) throw new Error(`bench-pods.sh said:\n${out}`);
  const sandbox = /RunPodSandbox n=\d+ p50=(\d+)ms p90=(\d+)ms/.exec(out);
  return {
    allRunningS: Number(running[1]),
    runPodSandboxP50Ms: sandbox ? Number(sandbox[1]) : undefined,
    runPodSandboxP90Ms: sandbox ? Number(sandbox[2]) : undefined,
  };
}

/**
 * Runs the node comparison, or returns undefined (and says why) where the node is not built.
 * Starts the realk8s apiserver if it is not running (and stops it again), leaves the node
 * stopped and cleaned, Ferry's bridge, state and portmap's chains removed.
 */
export async function runNodeBench(
  workDir: string,
  log: (line: string) => void,
): Promise<NodeBench | undefined> {
  if (!NODE_READY || !TOOLS) {
    log("node run skipped: needs root, /opt/realkubelet (build.sh) and /opt/realk8s");
    return undefined;
  }
  const runs = await withRealApiserver(() => burstsOnTheNode(workDir, log));
  const find = (cni: string, pods: number) => runs.find((r) => r.cni === cni && r.pods === pods)!;
  const targets = [20, 50].flatMap((pods) => {
    const ref = find("reference", pods), ferry = find("ferry", pods);
    const out = [{
      what: `real node, ${pods} pods: all Running no later than with the reference plugins`,
      met: ferry.allRunningS <= ref.allRunningS,
      measured: `${ferry.allRunningS} vs ${ref.allRunningS} s`,
    }, {
      what: `real node, ${pods} pods: RunPodSandbox p50 no worse than the reference plugins'`,
      met: (ferry.runPodSandboxP50Ms ?? Infinity) <= (ref.runPodSandboxP50Ms ?? 0),
      measured: `${ferry.runPodSandboxP50Ms} vs ${ref.runPodSandboxP50Ms} ms`,
    }];
    if (ferry.daemonAddP99Ms !== undefined) {
      out.push({
        what: `real node, ${pods} pods: the daemon's ADD p99 ≤ 50 ms`,
        met: ferry.daemonAddP99Ms <= 50,
        measured: `${ferry.daemonAddP99Ms} ms (p99 by phase: ${
          Object.entries(ferry.daemonAddPhaseP99Ms ?? {}).map(([k, v]) => `${k} ${v}`).join(", ")
        })`,
      });
    }
    return out;
  });
  return { runs, targets };
}

/** The bursts, reference plugins first, with the apiserver up; the node is left stopped and clean. */
async function burstsOnTheNode(workDir: string, log: (line: string) => void): Promise<NodeRun[]> {
  const tablesBefore = await run("nft", "list", "tables").catch(() => "");
  const runs: NodeRun[] = [];
  const config = `${workDir}/node-daemon.json`;
  await Deno.writeTextFile(
    config,
    JSON.stringify({
      network: { bridge: "klferry0", subnet: "10.247.0.0/24" },
      // The node is this machine's own namespace: its nftables and TCP ports are not Ferry's.
      masquerade: { enabled: false },
      server: { httpPort: 0 },
    }),
  );
  const stats = async () =>
    JSON.parse((await sh(`${TOOLS}/ferry.sh`, "status")).split("\n").slice(1).join("\n"));
  try {
    for (const cni of ["reference", "ferry"] as const) {
      log(`node: ${cni}`);
      if (cni === "reference") {
        await sh(`${TOOLS}/use-cni.sh`, "ref");
      } else {
        await sh(`${TOOLS}/ferry.sh`, "install", REPO);
        await sh(`${TOOLS}/ferry.sh`, "start", REPO, config);
      }
      await sh(`${TOOLS}/start.sh`);
      for (const pods of [20, 50]) {
        if (cni === "ferry" && pods !== 20) {
          // A fresh daemon per burst: its ADD percentiles then cover this burst alone.
          await sh(`${TOOLS}/ferry.sh`, "stop");
          await sh(`${TOOLS}/ferry.sh`, "start", REPO, config);
        }
        const out = await sh(`${TOOLS}/bench-pods.sh`, String(pods));
        const r: NodeRun = { cni, pods, ...parseBenchPods(out) };
        if (cni === "ferry") {
          const { addPhases, netnsSync, netlinkSync } = await stats();
          r.daemonAddP99Ms = addPhases?.total?.p99;
          r.daemonAddPhaseP99Ms = phaseP99s(addPhases);
          if (netnsSync && netlinkSync) {
            r.daemonSyncMs = {
              netns: netnsSync.ms,
              netlink: netlinkSync.ms,
              netlinkMax: netlinkSync.maxMs,
            };
          }
        }
        runs.push(r);
        log(`  ${pods} pods: ${JSON.stringify(r)}`);
      }
      await sh(`${TOOLS}/stop.sh`, "--clean");
      if (cni === "ferry") {
        await sh(`${TOOLS}/ferry.sh`, "stop");
        await sh(`${TOOLS}/ferry.sh`, "clean");
      }
    }
  } finally {
    await sh(`${TOOLS}/stop.sh`, "--clean").catch(() => {});
    await sh(`${TOOLS}/ferry.sh`, "stop").catch(() => {});
    await sh(`${TOOLS}/ferry.sh`, "clean").catch(() => {});
    await removePortmapChains(tablesBefore);
  }
  return runs;
}
