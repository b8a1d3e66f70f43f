/**
 * What port security costs an ADD: the daemon's own ADD p50 (its `/v1/stats`) over `adds` pods
 * added one at a time on a one-node simulated cluster (API stand-in, the node in a namespace of
 * its own), with `portSecurity.enabled` on and off, each twice in turn (on, off, on, off) so that
 * a busy machine's drift falls on both. `deno task bench` reports it against its budget (issue 43:
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

/** The daemon's ADD p50 with port security on and off (ms), and each run's. */
export interface PortSecurityAddCost {
  /** Mean of the runs' p50 with port security on. */
  onP50Ms: number;
  /** The same, off. */
  offP50Ms: number;
  /** Each run: on or off and its p50. */
  runs: { enabled: boolean; addP50Ms: number }[];
}

async function addP50(c: SimCluster, n: number): Promise<number> {
  const node = c.nodes[0];
  const added: SimPod[] = [];
  for (let i = 0; i < n; i++) added.push(await c.addPod(node, `ps${i}`, 30_000));
  const res = await unixRequest(
    node.socket,
    "GET",
    STATS_PATH,
    undefined,
    AbortSignal.timeout(5000),
  );
  const stats = JSON.parse(res.body) as { addPhases?: { total?: { p50: number } } };
  for (const p of added) await c.removePod(p);
  return stats.addPhases?.total?.p50 ?? NaN;
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const round = (x: number) => Math.round(x * 100) / 100;

/** Measures {@link PortSecurityAddCost} over `adds` pods per run. */
export async function portSecurityAddCost(adds: number): Promise<PortSecurityAddCost> {
  const runs: PortSecurityAddCost["runs"] = [];
  for (const enabled of [true, false, true, false]) {
    const ms = await withSimCluster(
      { nodes: 1, config: { portSecurity: { enabled } } },
      (c) => addP50(c, adds),
    );
    runs.push({ enabled, addP50Ms: round(ms) });
  }
  const of = (on: boolean) =>
    round(mean(runs.filter((r) => r.enabled === on).map((r) => r.addP50Ms)));
  return { onP50Ms: of(true), offP50Ms: of(false), runs };
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
