/**
 * `deno task bench:dataplane [--quick] [--sets N] [--window S] [--add N] [--add-only] [--render]`:
 * the pods' own data path (issue 43), root.
 * TCP throughput (one stream), request/response rate and new connections per second
 * (`bench/tcp_probe.ts`) between pods of the simulated cluster (`daemon/dev/cluster_sim.ts`, two
 * nodes): on one node, and across nodes with `routing.mode` host-gw and vxlan; each with port
 * security on and off, and NetworkPolicy off (no policy selects the server; policy enforcement
 * stays enabled, as by default) and on (one policy isolating the server pod, admitting the
 * client pods; a third pod is refused before anything is measured). Floors measured in the same
 * run: node↔node (the simulated nodes' own namespaces over their underlay) and the reference
 * plugins (Debian's `bridge` + `host-local` through libcni, two pods on a bridge in a namespace
 * of its own; one node).
 *
 * Port security on over off is measured in place: one cluster per routing mode, port security on
 * as shipped, and its guard switched between windows of one probe (`bench/guard_switch.ts`): on
 * (the daemon's chain), off (no bridge-family hook, as with `portSecurity.enabled` false) and at
 * its least (the hook and one rule: one lookup of each frame's port, source MAC and address in the
 * daemon's per-pod set, the floor of any guard the issue allows, measured beside the guard). Each
 * path and metric is one client process on one connection, pinned to a CPU (its server on the
 * other), through `3 × --sets + 1` windows of `--window` seconds (200 and 0.12 s; quick: 6): the
 * first warms up, then sets of three adjacent windows, one per state, every order in turn. Two
 * runs of one path on this kind of machine differ by up to 2× (which CPUs, which clusters, what
 * else ran); two windows a fifth of a second apart on one connection differ by ~10 %, and some
 * hundreds of sets narrow the median to the few per cent the target needs. The ratios on/off and
 * least/off are taken per set and reported as the median of the sets with a distribution-free
 * 95 % interval; the target (with port security on, ≥ 0.97× of off) is met only when every
 * interval lies at or above 0.97, missed when one lies wholly below, and otherwise undecided by
 * the run; where the least guard's interval lies wholly below 0.97 too, no guard of per-pod set
 * elements meets it on this machine. The daemon's ADD p50 with port security on and off
 * (`bench/portsec_bench.ts`, as `deno task bench` measures it) is measured first, `--add` pods
 * per run (0: not). Floors and the load average are recorded with it.
 *
 * Writes `bench/results/dataplane.json` and `dataplane.md` (rendered by
 * `bench/dataplane_report.ts`); with `--render`, only renders them again from the samples the
 * last result holds.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { median, medianInterval, type RatioInterval, verdictOf } from "./paired.ts";
import { portSecurityAddCost } from "./portsec_bench.ts";
import { type GuardState, type GuardSwitch, guardSwitch } from "./guard_switch.ts";
import { type SimCluster, type SimPod, withSimCluster } from "../daemon/dev/cluster_sim.ts";
import { resolveConfig } from "../daemon/config/config.ts";
import { buildLibcniDriver, HAVE_LIBCNI } from "../daemon/dev/libcni.ts";
import { IS_ROOT, run, uniqueToken } from "../daemon/dev/netns.ts";
import { NETWORK_POLICIES } from "../daemon/k8s/resources.ts";
import { dataplaneReport, type DataplaneResult } from "./dataplane_report.ts";
import {
  PROBE_PORTS,
  probeWindows,
  startProbeServers,
  type TcpSample,
  waitForReach,
  type WindowWork,
} from "./tcp_probe.ts";

/** Where the two pods are and how the nodes route. */
export type Placement = "one node" | "across nodes, host-gw" | "across nodes, vxlan";

/** Every measurement of the run, by series name, in order. */
export type Samples = Record<string, TcpSample[]>;

/** The series name of one case. */
export const caseName = (placement: Placement, portSecurity: boolean, policy: boolean) =>
  `${placement} | port security ${portSecurity ? "on" : "off"} | policy ${policy ? "on" : "off"}`;

/** The series of a case with the least guard (`bench/guard_switch.ts`'s `lookup`) in place. */
export const leastGuardName = (placement: Placement, policy: boolean) =>
  `${placement} | one lookup | policy ${policy ? "on" : "off"}`;

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
export type Path = { from: string; ip: string };

/** A measurement in the alternation: its series and its path. */
type Probe = { series: string; path: Path };

/** A cluster made ready: the server pod's servers run, the clients reach it. */
export interface ReadyCluster {
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
export async function prepare(
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

/** The windowed probes of one path, in the order they run: what each measures. */
export const WORKS: [WindowWork, keyof TcpSample][] = [
  ["bytes", "gbps"],
  ["rr", "rrPerS"],
  ["conn", "connsPerS"],
];

/** Each set's order of the three states, in turn: every state in every place equally often. */
const ORDERS: GuardState[][] = [
  ["on", "off", "lookup"],
  ["off", "lookup", "on"],
  ["lookup", "on", "off"],
  ["lookup", "off", "on"],
  ["off", "on", "lookup"],
  ["on", "lookup", "off"],
];

/**
 * The guard's state in each window of a series: the first warms the connection up (not counted),
 * then `sets` sets of three adjacent windows, the guard on, off and at its least
 * ({@link GuardState}), in the orders of {@link ORDERS} in turn.
 */
export function guardStates(sets: number): GuardState[] {
  return ["on", ...Array.from({ length: sets }, (_, i) => ORDERS[i % ORDERS.length]).flat()];
}

/**
 * The sets of `path`: per work of `works` (all three unless told), one process and one
 * connection through `3 × sets + 1` windows of `windowS`, the guard set before each as
 * {@link guardStates} says; set `k` of every metric goes into the `k`-th sample of each series
 * (its windows adjacent in time).
 */
export async function measureSets(
  path: Path,
  series: Record<GuardState, string>,
  sets: number,
  windowS: number,
  guard: GuardSwitch,
  samples: Samples,
  works: [WindowWork, keyof TcpSample][] = WORKS,
): Promise<void> {
  const states = guardStates(sets);
  const got: Record<GuardState, Partial<TcpSample>[]> = { on: [], off: [], lookup: [] };
  for (const [work, metric] of works) {
    const rates = await probeWindows(
      path.from,
      path.ip,
      work,
      states.length,
      windowS,
      (i) => guard.set(states[i]),
    );
    await guard.set("on");
    const seen: Record<GuardState, number> = { on: 0, off: 0, lookup: 0 };
    for (let i = 1; i < states.length; i++) {
      (got[states[i]][seen[states[i]]++] ??= {})[metric] = Math.round(rates[i] * 1000) / 1000;
    }
  }
  for (const state of ["on", "off", "lookup"] as const) {
    (samples[series[state]] ??= []).push(...got[state] as TcpSample[]);
    console.log(JSON.stringify({
      series: series[state],
      sets,
      median: medianSample(got[state] as TcpSample[]),
    }));
  }
}

/**
 * A floor's windows (`windows` per work, one process each), paused before each by the same
 * guard work as a series' so that they are alike; their rates go into `series`.
 */
async function measureFloor(
  series: string,
  path: Path,
  windows: number,
  windowS: number,
  guard: GuardSwitch,
  samples: Samples,
): Promise<void> {
  const got: Partial<TcpSample>[] = [];
  for (const [work, metric] of WORKS) {
    const rates = await probeWindows(
      path.from,
      path.ip,
      work,
      windows + 1,
      windowS,
      () => guard.set("on"),
    );
    rates.slice(1).forEach((r, i) => (got[i] ??= {})[metric] = Math.round(r * 1000) / 1000);
  }
  (samples[series] ??= []).push(...got as TcpSample[]);
  console.log(JSON.stringify({ series, median: medianSample(got as TcpSample[]) }));
}

/**
 * One cluster of `routing` (two nodes, port security on as shipped); for policy off and on (in
 * `policyOrder`), every path's sets with the guard switched in place ({@link guardSwitch}), then
 * the node↔node floor and the `extra` floors.
 */
async function routingRound(
  routing: "host-gw" | "vxlan",
  policyOrder: boolean[],
  m: { sets: number; windowS: number; floorWindows: number },
  extra: Path | undefined,
  samples: Samples,
): Promise<void> {
  await withSimCluster(
    { nodes: 2, config: { routing: { mode: routing }, portSecurity: { enabled: true } } },
    async (c) => {
      const closers: (() => Promise<void>)[] = [];
      try {
        const r = await prepare(c, routing, closers);
        const config = resolveConfig({ routing: { mode: routing } });
        // The daemons' chain, with vxlan the VXLAN port its pods may not send to.
        const guard = await guardSwitch(
          c.nodes.map((n) => n.ns.name),
          config.portSecurity.table,
          routing === "vxlan" ? { tunnelPort: config.routing.vxlan.port } : {},
        );
        for (const policy of policyOrder) {
          await setPolicy(c, policy, r.other, r.srv, r.clients.map(([, p]) => p));
          for (const [placement, p] of r.clients) {
            await measureSets(
              { from: p.ns.name, ip: r.srv.ip },
              {
                on: caseName(placement, true, policy),
                off: caseName(placement, false, policy),
                lookup: leastGuardName(placement, policy),
              },
              m.sets,
              m.windowS,
              guard,
              samples,
            );
          }
          await measureFloor(FLOORS.node, r.underlay, m.floorWindows, m.windowS, guard, samples);
          if (extra) {
            await measureFloor(FLOORS.reference, extra, m.floorWindows, m.windowS, guard, samples);
          }
        }
      } finally {
        for (const close of closers) await close();
        await c.client.delete(NETWORK_POLICIES, "default", ISOLATE).catch(() => {});
      }
    },
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

/** The load average (1, 5 and 15 min), as `/proc/loadavg` gives it. */
export const loadavg = async (): Promise<string> =>
  (await Deno.readTextFile("/proc/loadavg")).split(" ").slice(0, 3).join(" ");

/**
 * Runs the whole measurement: host-gw's cluster (with the reference floor when libcni is there),
 * then vxlan's; `sets` sets of windows per case and metric, windows of `windowS`.
 */
export async function dataplaneBench(
  sets: number,
  windowS: number,
  dir: string,
): Promise<Samples> {
  const samples: Samples = {};
  const m = { sets, windowS, floorWindows: Math.max(4, Math.round(sets / 8)) };
  const driver = HAVE_LIBCNI ? await buildLibcniDriver(dir) : undefined;
  if (!driver) console.error("no libcni (deno task setup installs it): no reference floor");
  const hostGw = (extra?: Path) => routingRound("host-gw", [false, true], m, extra, samples);
  if (driver) await withReference(driver, dir, (path) => hostGw(path));
  else await hostGw();
  await routingRound("vxlan", [true, false], m, undefined, samples);
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
    "date" | "machine" | "quick" | "rounds" | "windowS" | "durations" | "loadavg" | "add"
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
      // The least guard over off, set by set (runs that measured it).
      const leasts = samples[leastGuardName(placement, policy)];
      const leastIntervals: Record<string, RatioInterval> = {};
      for (const m of leasts ? METRICS : []) {
        const rs = leasts.slice(0, offs.length).map((x, i) => ratioOf(x, offs[i])[m])
          .filter((x) => x !== undefined);
        if (rs.length) leastIntervals[m] = medianInterval(rs);
      }
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
        ...(leasts ? { leastGuard: leastIntervals } : {}),
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
  // The least guard's intervals: wholly below the target in a case and metric, no guard of
  // per-pod set elements can meet it there on this machine.
  const leastAll = cases.flatMap((k) => Object.values(k.leastGuard ?? {}));
  const least = leastAll.length
    ? {
      worst: Math.min(...leastAll.map((i) => i.median)),
      below: leastAll.filter((i) => verdictOf(i, TARGET) === "not met").length,
      of: leastAll.length,
    }
    : undefined;
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
      ...(least ? { leastGuard: least } : {}),
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
    string: ["sets", "window", "add"],
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
  const sets = Number(flags.sets ?? (quick ? 6 : 200));
  const windowS = Number(flags.window ?? 0.12);
  const adds = Number(flags.add ?? (quick ? 0 : 20));
  const dir = await Deno.makeTempDir({ prefix: "ferry-bench-dataplane-" });
  const before = await loadavg();
  try {
    const add = adds > 0 ? await portSecurityAddCost(adds) : undefined;
    if (add) console.log(JSON.stringify({ add }));
    const samples = await dataplaneBench(sets, windowS, dir);
    await writeResult(summarizeDataplane(samples, {
      ...(add ? { add: { ...add, adds } } : {}),
      date: new Date().toISOString(),
      machine: `${navigator.hardwareConcurrency} CPUs, kernel ${Deno.osRelease()}`,
      quick,
      rounds: sets,
      windowS,
      durations: { throughputS: windowS, rrS: windowS, connS: windowS },
      loadavg: { before, after: await loadavg() },
    }));
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}
