/**
 * `deno task bench:dataplane [--quick] [--rounds N] [--add N] [--add-only] [--render]`: the pods'
 * own data path (issue 43), root.
 * TCP throughput (iperf3), request/response rate and new connections per second
 * (`bench/tcp_probe.ts`) between pods of the simulated cluster (`daemon/dev/cluster_sim.ts`, two
 * nodes): on one node, and across nodes with `routing.mode` host-gw and vxlan; each with port
 * security off and on, and NetworkPolicy off (no policy selects the server; policy enforcement
 * stays enabled, as by default) and on (one policy isolating the server pod, admitting the
 * client pods; a third pod is refused before anything is measured). Floors measured in the same
 * run: node↔node (the simulated nodes' own namespaces over their underlay) and the reference
 * plugins (Debian's `bridge` + `host-local` through libcni, two pods on a bridge in a namespace
 * of its own; one node).
 *
 * Per routing mode, two clusters run at once, port security on in one and off in the other; policy
 * is off, then on (vxlan: on, then off) in both; each state gets `--rounds` pairs (3 quick, 6
 * full): in each pair every path is measured on both clusters back to back, in ABBA order
 * (`bench/paired.ts`), and the floors after them. A busy machine's load drifts over seconds, so
 * the ratio on/off is taken per pair, and reported as the median of the pairs with a
 * distribution-free 95 % interval; the target (with port security on, ≥ 0.97× of off) is met
 * only when every interval lies at or above 0.97, missed when one lies wholly below, and
 * otherwise undecided by the run. Throughput is also counted per CPU-second of iperf3's client
 * and server (the packet path's cost, less swayed by what else runs). The daemon's ADD p50 with
 * port security on and off (`bench/portsec_bench.ts`, as `deno task bench` measures it) is
 * measured first, `--add` pods per run (0: not). Floors and the load average are recorded with it.
 *
 * Writes `bench/results/dataplane.json` and `dataplane.md` (rendered by `bench/report.ts`); with
 * `--render`, only renders them again from the samples the last result holds.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { abbaFirst, median, medianInterval, type RatioInterval, verdictOf } from "./paired.ts";
import { portSecurityAddCost } from "./portsec_bench.ts";
import { type SimCluster, type SimPod, withSimCluster } from "../daemon/dev/cluster_sim.ts";
import { buildLibcniDriver, HAVE_LIBCNI } from "../daemon/dev/libcni.ts";
import { IS_ROOT, run, uniqueToken } from "../daemon/dev/netns.ts";
import { NETWORK_POLICIES } from "../daemon/k8s/resources.ts";
import { dataplaneReport, type DataplaneResult } from "./report.ts";
import {
  PROBE_PORTS,
  type ProbeDurations,
  probeTcp,
  startProbeServers,
  type TcpSample,
  waitForReach,
} from "./tcp_probe.ts";

/** Where the two pods are and how the nodes route. */
export type Placement = "one node" | "across nodes, host-gw" | "across nodes, vxlan";

/** Every measurement of the run, by series name, in order. */
export type Samples = Record<string, TcpSample[]>;

/** The series name of one case. */
export const caseName = (placement: Placement, portSecurity: boolean, policy: boolean) =>
  `${placement} | port security ${portSecurity ? "on" : "off"} | policy ${policy ? "on" : "off"}`;

/** The floors' series names. */
export const FLOORS = { node: "node↔node (underlay)", reference: "reference bridge + host-local" };

/** The median of each metric over a series' samples. */
export function medianSample(xs: TcpSample[]): TcpSample {
  const cpu = xs.map((x) => x.gbitPerCpuS).filter((x) => x !== undefined);
  return {
    gbps: Math.round(median(xs.map((x) => x.gbps)) * 100) / 100,
    rrPerS: Math.round(median(xs.map((x) => x.rrPerS))),
    connsPerS: Math.round(median(xs.map((x) => x.connsPerS))),
    ...(cpu.length ? { gbitPerCpuS: Math.round(median(cpu) * 100) / 100 } : {}),
  };
}

/** `a` over `b`, metric by metric, to two places. */
export function ratioOf(a: TcpSample, b: TcpSample): TcpSample {
  const r = (x: number, y: number) => Math.round((x / y) * 1000) / 1000;
  return {
    gbps: r(a.gbps, b.gbps),
    rrPerS: r(a.rrPerS, b.rrPerS),
    connsPerS: r(a.connsPerS, b.connsPerS),
    ...(a.gbitPerCpuS && b.gbitPerCpuS ? { gbitPerCpuS: r(a.gbitPerCpuS, b.gbitPerCpuS) } : {}),
  };
}

/** The metrics a case is judged on, in the report's order. */
export const METRICS = ["gbps", "gbitPerCpuS", "rrPerS", "connsPerS"] as const;

const ISOLATE = "dataplane-isolate-server";

/** Port security on over off, per metric: the target. */
const TARGET = 0.97;

/** Creates (`on`) or deletes the policy isolating the server, and waits until it holds or not. */
async function setPolicy(
  c: SimCluster,
  on: boolean,
  other: SimPod,
  srv: SimPod,
  clients: SimPod[],
) {
  if (on) {
    await c.client.create(NETWORK_POLICIES, {
      metadata: { name: ISOLATE, namespace: "default" },
      spec: {
        podSelector: { matchLabels: { app: "dp-server" } },
        ingress: [{ from: [{ podSelector: { matchLabels: { role: "dp-client" } } }] }],
      },
    });
  } else {
    await c.client.delete(NETWORK_POLICIES, "default", ISOLATE).catch(() => {});
  }
  // The pod the policy does not admit shows whether it is in force; the clients must pass.
  await waitForReach(other.ns.name, srv.ip, PROBE_PORTS.accept, !on);
  for (const k of clients) await waitForReach(k.ns.name, srv.ip, PROBE_PORTS.accept, true);
}

/** A path to measure: the client's namespace and the server's address. */
type Path = { from: string; ip: string };

/** A measurement in the alternation: its series and its path. */
type Probe = { series: string; path: Path };

/** A cluster made ready: the server pod's servers run, the clients reach it. */
interface ReadyCluster {
  srv: SimPod;
  other: SimPod;
  clients: [Placement, SimPod][];
  /** The node↔node path (second node's namespace to the first's underlay address). */
  underlay: Path;
}

/**
 * Two nodes of `c`: the floor's servers in the first node's namespace, the server pod (app
 * dp-server) on the first node, client pods (role dp-client) on both, and a pod the policy does
 * not admit; waits until every client reaches the server (the routes to the other node in place).
 */
async function prepare(
  c: SimCluster,
  routing: "host-gw" | "vxlan",
  closers: (() => Promise<void>)[],
): Promise<ReadyCluster> {
  const [n1, n2] = c.nodes;
  const floor = await startProbeServers(n1.ns.name);
  closers.push(floor.close);
  const srv = await c.addPod(n1, "dp-srv", 30_000, { labels: { app: "dp-server" } });
  const local = await c.addPod(n1, "dp-cli", 30_000, { labels: { role: "dp-client" } });
  const remote = await c.addPod(n2, "dp-cli2", 30_000, { labels: { role: "dp-client" } });
  const other = await c.addPod(n1, "dp-other", 30_000, { labels: { role: "other" } });
  const servers = await startProbeServers(srv.ns.name);
  closers.push(servers.close);
  const clients: [Placement, SimPod][] = routing === "vxlan"
    ? [["across nodes, vxlan", remote]]
    : [["one node", local], ["across nodes, host-gw", remote]];
  for (const [, k] of clients) await waitForReach(k.ns.name, srv.ip, PROBE_PORTS.accept, true);
  return { srv, other, clients, underlay: { from: n2.ns.name, ip: n1.address } };
}

/**
 * Two clusters of `routing` alive at once, port security on in one and off in the other; for
 * policy off and on (in `policyOrder`), `rounds` pairs: each path measured on both clusters back
 * to back (which goes first in ABBA order), then the node↔node floor and the `extra` probes.
 */
async function routingRound(
  routing: "host-gw" | "vxlan",
  policyOrder: boolean[],
  rounds: number,
  extra: Probe[],
  measure: (p: Probe) => Promise<void>,
): Promise<void> {
  const sim = (portSecurity: boolean) => (fn: (c: SimCluster) => Promise<void>) =>
    withSimCluster(
      { nodes: 2, config: { routing: { mode: routing }, portSecurity: { enabled: portSecurity } } },
      fn,
    );
  await sim(true)((on) =>
    sim(false)(async (off) => {
      const closers: (() => Promise<void>)[] = [];
      try {
        const ready = [
          { portSecurity: true, c: on, r: await prepare(on, routing, closers) },
          { portSecurity: false, c: off, r: await prepare(off, routing, closers) },
        ];
        for (const policy of policyOrder) {
          for (const k of ready) {
            await setPolicy(k.c, policy, k.r.other, k.r.srv, k.r.clients.map(([, p]) => p));
          }
          for (let i = 0; i < rounds; i++) {
            const order = abbaFirst(i) ? ready : [...ready].reverse();
            for (let j = 0; j < ready[0].r.clients.length; j++) {
              for (const k of order) {
                const [placement, p] = k.r.clients[j];
                await measure({
                  series: caseName(placement, k.portSecurity, policy),
                  path: { from: p.ns.name, ip: k.r.srv.ip },
                });
              }
            }
            await measure({ series: FLOORS.node, path: order[0].r.underlay });
            for (const e of extra) await measure(e);
          }
        }
      } finally {
        for (const close of closers) await close();
        for (const c of [on, off]) {
          await c.client.delete(NETWORK_POLICIES, "default", ISOLATE).catch(() => {});
        }
      }
    })
  );
}

/**
 * The reference plugins' floor: a namespace of its own playing the node, two pod namespaces
 * plugged by Debian's `bridge` (gateway, hairpin) + `host-local` through the libcni driver run
 * inside the node's namespace (so its bridge is made there); `fn` gets the pod-to-pod path across
 * that bridge (servers running), and everything is removed afterwards.
 */
async function withReference<T>(
  driver: string,
  dir: string,
  fn: (path: Path) => Promise<T>,
): Promise<T> {
  const token = uniqueToken();
  const names = [`fdr-${token}`, `fdr-${token}-a`, `fdr-${token}-b`];
  const made: string[] = [];
  const plugged: string[] = [];
  const conf = `${dir}/ref-${token}.conflist`;
  await Deno.writeTextFile(
    conf,
    JSON.stringify({
      cniVersion: "1.0.0",
      name: "reference",
      plugins: [{
        type: "bridge",
        bridge: "cni0",
        isGateway: true,
        hairpinMode: true,
        ipam: {
          type: "host-local",
          ranges: [[{ subnet: "10.122.0.0/24" }]],
          dataDir: `${dir}/host-local-${token}`,
        },
      }],
    }),
  );
  const driverRun = (cmd: "ADD" | "DEL", pod: string) =>
    new Deno.Command("ip", {
      args: [
        ...["netns", "exec", names[0], driver, cmd, conf, `c${pod}`, `/var/run/netns/${pod}`],
        ...["eth0", `${dir}/cnicache-${token}`],
      ],
      clearEnv: true,
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", CNI_PATH: "/usr/lib/cni" },
      stdout: "piped",
      stderr: "piped",
    }).output();
  try {
    for (const n of names) {
      await run("ip", "netns", "add", n);
      made.push(n);
      await run("ip", "-n", n, "link", "set", "lo", "up");
    }
    const ips: string[] = [];
    for (const pod of names.slice(1)) {
      const out = await driverRun("ADD", pod);
      const text = new TextDecoder().decode(out.stdout);
      if (!out.success) {
        throw new Error(`reference ADD failed: ${text} ${new TextDecoder().decode(out.stderr)}`);
      }
      plugged.push(pod);
      const result = JSON.parse(text) as { ips: { address: string }[] };
      ips.push(result.ips[0].address.split("/")[0]);
    }
    const servers = await startProbeServers(names[2]);
    try {
      await waitForReach(names[1], ips[1], PROBE_PORTS.accept, true);
      return await fn({ from: names[1], ip: ips[1] });
    } finally {
      await servers.close();
    }
  } finally {
    for (const pod of plugged) await driverRun("DEL", pod);
    for (const n of made.reverse()) await run("ip", "netns", "del", n).catch(() => {});
  }
}

const loadavg = async () =>
  (await Deno.readTextFile("/proc/loadavg")).split(" ").slice(0, 3).join(" ");

/**
 * Runs the alternation (`rounds` rounds per routing mode and policy state): host-gw's pair of
 * clusters with the reference floor measured in each round, then vxlan's.
 */
export async function dataplaneBench(
  rounds: number,
  d: ProbeDurations,
  dir: string,
): Promise<Samples> {
  const samples: Samples = {};
  const measure = async (p: Probe) => {
    const s = await probeTcp(p.path.from, p.path.ip, d);
    (samples[p.series] ??= []).push(s);
    console.log(JSON.stringify({ series: p.series, ...s }));
  };
  const driver = HAVE_LIBCNI ? await buildLibcniDriver(dir) : undefined;
  if (!driver) console.error("no libcni (deno task setup installs it): no reference floor");
  const hostGw = (extra: Probe[]) => routingRound("host-gw", [false, true], rounds, extra, measure);
  if (driver) {
    await withReference(driver, dir, (path) => hostGw([{ series: FLOORS.reference, path }]));
  } else await hostGw([]);
  await routingRound("vxlan", [true, false], rounds, [], measure);
  return samples;
}

/**
 * The result: per case the on/off ratio of each pair, their median with its 95 % interval per
 * metric and the verdict of those intervals; medians against floors; and every sample.
 */
export function summarizeDataplane(
  samples: Samples,
  meta: Pick<
    DataplaneResult,
    "date" | "machine" | "quick" | "rounds" | "durations" | "loadavg" | "add"
  >,
): DataplaneResult {
  const med = (name: string) => samples[name] ? medianSample(samples[name]) : undefined;
  const placements: Placement[] = ["one node", "across nodes, host-gw", "across nodes, vxlan"];
  const cases = placements.flatMap((placement) =>
    [false, true].map((policy) => {
      const on = med(caseName(placement, true, policy))!;
      const off = med(caseName(placement, false, policy))!;
      const floor = med(placement === "one node" ? FLOORS.reference : FLOORS.node);
      const ons = samples[caseName(placement, true, policy)];
      const offs = samples[caseName(placement, false, policy)];
      // Pair i: the i-th sample of each, measured back to back.
      const perRound = ons.slice(0, offs.length).map((x, i) => ratioOf(x, offs[i]));
      const intervals: Record<string, RatioInterval> = {};
      for (const m of METRICS) {
        const rs = perRound.map((r) => r[m]).filter((x) => x !== undefined);
        if (rs.length) intervals[m] = medianInterval(rs);
      }
      const verdicts = Object.values(intervals).map((i) => verdictOf(i, TARGET));
      return {
        placement,
        policy,
        perRound,
        intervals,
        verdict: verdicts.includes("not met")
          ? "not met" as const
          : verdicts.every((v) => v === "met")
          ? "met" as const
          : "undecided" as const,
        portSecurityOn: on,
        portSecurityOff: off,
        onOverOff: Object.fromEntries(
          Object.entries(intervals).map(([m, i]) => [m, i.median]),
        ) as unknown as TcpSample,
        floor: placement === "one node" ? FLOORS.reference : FLOORS.node,
        onOverFloor: floor ? ratioOf(on, floor) : undefined,
        offOverFloor: floor ? ratioOf(off, floor) : undefined,
      };
    })
  );
  const worst = Math.min(...cases.flatMap((k) => Object.values(k.intervals).map((i) => i.median)));
  const lowest = Math.min(...cases.flatMap((k) => Object.values(k.intervals).map((i) => i.low)));
  const verdict = cases.some((k) => k.verdict === "not met")
    ? "not met" as const
    : cases.every((k) => k.verdict === "met")
    ? "met" as const
    : "undecided" as const;
  // The node↔node floor is the same path every round: how far its throughput strays from its
  // median is the machine's noise (reported; the verdict comes from the pairs' intervals).
  const floorGbps = (samples[FLOORS.node] ?? []).map((x) => x.gbps);
  const noise = floorGbps.length
    ? Math.round(
      (median(floorGbps.map((g) => Math.abs(g - median(floorGbps)))) / median(floorGbps)) * 100,
    ) / 100
    : NaN;
  return {
    ...meta,
    floors: Object.fromEntries(
      Object.values(FLOORS).filter((f) => samples[f]).map((f) => [f, med(f)!]),
    ),
    cases,
    target: {
      what: "port security on ≥ 0.97× of off, every case and metric (the whole 95 % interval)",
      worst,
      lowest,
      met: verdict === "met",
      verdict,
      noise,
      conclusive: verdict !== "undecided",
    },
    samples,
  };
}

/** Writes `result` as `bench/results/dataplane.json` and `dataplane.md`. */
async function writeResult(result: DataplaneResult): Promise<void> {
  const out = new URL("./results/", import.meta.url);
  await Deno.writeTextFile(new URL("dataplane.json", out), JSON.stringify(result, null, 2) + "\n");
  await Deno.writeTextFile(new URL("dataplane.md", out), dataplaneReport(result));
  console.log(dataplaneReport(result));
}

if (import.meta.main) {
  const flags = parseArgs(Deno.args, {
    boolean: ["quick", "render", "add-only"],
    string: ["rounds", "add"],
  });
  if (flags.render) {
    // `--render`: the summary and table again from the samples of the last result (after a
    // change of the summary or the renderer); nothing is measured.
    const last = JSON.parse(
      await Deno.readTextFile(new URL("./results/dataplane.json", import.meta.url)),
    ) as DataplaneResult;
    await writeResult(summarizeDataplane(last.samples, last));
    Deno.exit(0);
  }
  if (flags["add-only"]) {
    // `--add-only`: the ADD cost alone, measured again into the last result (its data path kept).
    const last = JSON.parse(
      await Deno.readTextFile(new URL("./results/dataplane.json", import.meta.url)),
    ) as DataplaneResult;
    const adds = Number(flags.add ?? 20);
    const add = { ...await portSecurityAddCost(adds), adds };
    await writeResult(summarizeDataplane(last.samples, { ...last, add }));
    Deno.exit(0);
  }
  if (!IS_ROOT) {
    console.error("bench:dataplane needs root (namespaces, nft)");
    Deno.exit(2);
  }
  const quick = flags.quick;
  const rounds = Number(flags.rounds ?? (quick ? 3 : 6));
  const adds = Number(flags.add ?? (quick ? 0 : 20));
  // Short probes, many pairs: the load of a shared machine changes less within a pair.
  const durations: ProbeDurations = { throughputS: 1, rrS: 0.3, connS: 0.3 }; // iperf3: whole s
  const dir = await Deno.makeTempDir({ prefix: "ferry-bench-dataplane-" });
  const before = await loadavg();
  try {
    const add = adds > 0 ? await portSecurityAddCost(adds) : undefined;
    if (add) console.log(JSON.stringify({ add }));
    const samples = await dataplaneBench(rounds, durations, dir);
    await writeResult(summarizeDataplane(samples, {
      ...(add ? { add: { ...add, adds } } : {}),
      date: new Date().toISOString(),
      machine: `${navigator.hardwareConcurrency} CPUs, kernel ${Deno.osRelease()}`,
      quick,
      rounds,
      durations,
      loadavg: { before, after: await loadavg() },
    }));
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}
