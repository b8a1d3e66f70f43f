/**
 * What port security costs an ADD: the daemon's own ADD p50 (its `/v1/stats`) over `adds` pods
 * added one at a time on a one-node simulated cluster (API stand-in, the node in a namespace of
 * its own), with `portSecurity.enabled` on and off: two clusters alive at once, their ADDs
 * alternating in ABBA order (`bench/paired.ts`), so that a busy machine's load falls on both alike
 * (one cluster after the other, minutes apart, measured the load's drift more than the guard). `deno task bench` reports it against its budget (issue 43:
 * at most 0.5 ms more); `deno run -A bench/portsec_bench.ts [--n 40]` prints it alone. With
 * `--dataplane`, also TCP between two pods of one node (iperf3 throughput and new connections per
 * second, `tcpBetween` of `bench/policy_bench.ts`) with port security on and off, in the same
 * alternation (issue 43's 0.97× of off; one node only: the whole of it, across nodes and against
 * floors, is `deno task bench:dataplane`, `bench/dataplane_bench.ts`).
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { type SimCluster, type SimPod, withSimCluster } from "../daemon/dev/cluster_sim.ts";
import { IS_ROOT } from "../daemon/dev/netns.ts";
import { STATS_PATH } from "../lib/socket_api.ts";
import { unixRequest } from "../lib/unix_http.ts";
import { tcpBetween } from "./policy_bench.ts";
import { abbaFirst } from "./paired.ts";

/** The daemon's ADD p50 with port security on and off (ms), and each run's. */
export interface PortSecurityAddCost {
  /** Mean of the runs' p50 with port security on. */
  onP50Ms: number;
  /** The same, off. */
  offP50Ms: number;
  /** Each run: on or off and its p50. */
  runs: { enabled: boolean; addP50Ms: number }[];
}

/** The daemon's ADD p50 so far (its `/v1/stats`). */
async function addP50(c: SimCluster): Promise<number> {
  const node = c.nodes[0];
  const res = await unixRequest(
    node.socket,
    "GET",
    STATS_PATH,
    undefined,
    AbortSignal.timeout(5000),
  );
  const stats = JSON.parse(res.body) as { addPhases?: { total?: { p50: number } } };
  return stats.addPhases?.total?.p50 ?? NaN;
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const round = (x: number) => Math.round(x * 100) / 100;

/**
 * Measures {@link PortSecurityAddCost}: `adds` pods added one at a time to each of two clusters
 * alive at once (port security on in one, off in the other), the two alternating in ABBA order;
 * each daemon's p50 is one run.
 */
export async function portSecurityAddCost(adds: number): Promise<PortSecurityAddCost> {
  const sim = (enabled: boolean) => (fn: (c: SimCluster) => Promise<number[]>) =>
    withSimCluster({ nodes: 1, config: { portSecurity: { enabled } } }, fn);
  const [onMs, offMs] = await sim(true)((on) =>
    sim(false)(async (off) => {
      const added: [SimCluster, SimPod][] = [];
      for (let i = 0; i < adds; i++) {
        for (const c of abbaFirst(i) ? [on, off] : [off, on]) {
          added.push([c, await c.addPod(c.nodes[0], `ps${i}`, 30_000)]);
        }
      }
      const p50s = [await addP50(on), await addP50(off)];
      for (const [c, p] of added) await c.removePod(p);
      return p50s;
    })
  );
  const runs = [{ enabled: true, addP50Ms: round(onMs) }, {
    enabled: false,
    addP50Ms: round(offMs),
  }];
  return { onP50Ms: round(onMs), offP50Ms: round(offMs), runs };
}

/** TCP between two pods of one node with port security on and off (each twice, in turn). */
export interface PortSecurityDataplane {
  /** Mean throughput (Gbit/s) and connection rate (per second), on and off. */
  on: { gbps: number; connsPerS: number };
  off: { gbps: number; connsPerS: number };
  /** On against off. */
  ratio: { gbps: number; connsPerS: number };
  /** Each run. */
  runs: { enabled: boolean; gbps: number; connsPerS: number }[];
}

/** Measures {@link PortSecurityDataplane}. */
export async function portSecurityDataplane(): Promise<PortSecurityDataplane> {
  const runs: PortSecurityDataplane["runs"] = [];
  for (const enabled of [true, false, true, false]) {
    const r = await withSimCluster({ nodes: 1, config: { portSecurity: { enabled } } }, tcpBetween);
    runs.push({ enabled, ...r });
  }
  const of = (on: boolean) => {
    const mine = runs.filter((r) => r.enabled === on);
    return {
      gbps: round(mean(mine.map((r) => r.gbps))),
      connsPerS: Math.round(mean(mine.map((r) => r.connsPerS))),
    };
  };
  const on = of(true), off = of(false);
  return {
    on,
    off,
    ratio: { gbps: round(on.gbps / off.gbps), connsPerS: round(on.connsPerS / off.connsPerS) },
    runs,
  };
}

if (import.meta.main) {
  if (!IS_ROOT) {
    console.error("the port security benchmark needs root (namespaces, nft)");
    Deno.exit(2);
  }
  const flags = parseArgs(Deno.args, {
    string: ["n"],
    boolean: ["dataplane"],
    default: { n: "40" },
  });
  console.log(JSON.stringify(await portSecurityAddCost(Number(flags.n))));
  if (flags.dataplane) console.log(JSON.stringify(await portSecurityDataplane()));
}
