/**
 * `deno task bench:guard-floor [--sets N] [--window S] [--works conn,rr,bytes] [--render]`: the one case of
 * `bench:dataplane` where port security costs most (two pods of one node, no policy selecting
 * the server), measured alone with many more sets, so that its intervals are narrow enough to
 * say on which side of the target (≥ 0.97× of off) the guard and its floor lie. The floor is the
 * least guard the issue allows (`bench/guard_switch.ts`'s `lookup`: the hook and one lookup of
 * each frame's port, source MAC and address in a per-pod set); where its interval lies wholly
 * below 0.97, no guard of per-pod set elements meets the target on this machine, whatever its
 * rules. Same method as `bench:dataplane` (one cluster, host-gw, port security on as shipped,
 * the guard switched in place between adjacent windows: on, off and least, every order in turn;
 * one pinned probe process and connection per metric), 600 sets of 0.12 s windows, connections
 * only unless told. Root.
 *
 * Writes `bench/results/guard_floor.json` and `guard_floor.md` (rendered by
 * `bench/guard_floor_report.ts`); with `--render`, only renders them again from the samples the
 * last result holds.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { medianInterval, type RatioInterval } from "./paired.ts";
import { type FloorMetric, guardFloorReport, type GuardFloorResult } from "./guard_floor_report.ts";
import { guardSwitch } from "./guard_switch.ts";
import { loadavg, measureSets, prepare, type Samples, WORKS } from "./dataplane_bench.ts";
import { withSimCluster } from "../daemon/dev/cluster_sim.ts";
import { resolveConfig } from "../daemon/config/config.ts";
import { IS_ROOT } from "../daemon/dev/netns.ts";
import type { TcpSample, WindowWork } from "./tcp_probe.ts";

export type { FloorMetric, GuardFloorResult };

/** Per-set ratios of `samples`' series `of` over `off`, for `metric`. */
function ratios(samples: Samples, of: string, metric: keyof TcpSample): RatioInterval {
  const over = samples.off ?? [];
  return medianInterval(
    (samples[of] ?? []).slice(0, over.length).map((x, i) => x[metric]! / over[i][metric]!),
  );
}

/** The per-metric intervals of a run's samples. */
export function summarizeFloor(
  samples: Samples,
  metrics: (keyof TcpSample)[],
): FloorMetric[] {
  return metrics.map((metric) => ({
    metric,
    guard: ratios(samples, "on", metric),
    least: ratios(samples, "lookup", metric),
  }));
}

if (import.meta.main) {
  const flags = parseArgs(Deno.args, { boolean: ["render"], string: ["sets", "window", "works"] });
  const out = new URL("./results/", import.meta.url);
  if (flags.render) {
    // `--render`: the report again from the last result's samples; nothing is measured.
    const last = JSON.parse(
      await Deno.readTextFile(new URL("guard_floor.json", out)),
    ) as GuardFloorResult;
    const again = {
      ...last,
      metrics: summarizeFloor(last.samples, last.metrics.map((m) => m.metric)),
    };
    await Deno.writeTextFile(new URL("guard_floor.json", out), JSON.stringify(again) + "\n");
    await Deno.writeTextFile(new URL("guard_floor.md", out), guardFloorReport(again));
    console.log(guardFloorReport(again));
    Deno.exit(0);
  }
  if (!IS_ROOT) {
    console.error("bench:guard-floor needs root (namespaces, nft)");
    Deno.exit(2);
  }
  const sets = Number(flags.sets ?? 600);
  const windowS = Number(flags.window ?? 0.12);
  const wanted = String(flags.works ?? "conn").split(",") as WindowWork[];
  const works = WORKS.filter(([w]) => wanted.includes(w));
  if (works.length !== wanted.length) {
    console.error(`--works takes bytes, rr and conn: ${flags.works}`);
    Deno.exit(2);
  }
  const before = await loadavg();
  const samples: Samples = {};
  await withSimCluster(
    { nodes: 2, config: { routing: { mode: "host-gw" }, portSecurity: { enabled: true } } },
    async (c) => {
      const closers: (() => Promise<void>)[] = [];
      try {
        const r = await prepare(c, "host-gw", closers);
        const guard = await guardSwitch(
          c.nodes.map((n) => n.ns.name),
          resolveConfig(undefined).portSecurity.table,
        );
        const local = r.clients.find(([p]) => p === "one node")![1];
        await measureSets(
          { from: local.ns.name, ip: r.srv.ip },
          { on: "on", off: "off", lookup: "lookup" },
          sets,
          windowS,
          guard,
          samples,
          works,
        );
      } finally {
        for (const close of closers) await close();
      }
    },
  );
  const result: GuardFloorResult = {
    date: new Date().toISOString(),
    machine: `${navigator.hardwareConcurrency} CPUs, kernel ${Deno.osRelease()}`,
    sets,
    windowS,
    loadavg: { before, after: await loadavg() },
    metrics: summarizeFloor(samples, works.map(([, m]) => m)),
    samples,
  };
  await Deno.writeTextFile(new URL("guard_floor.json", out), JSON.stringify(result) + "\n");
  await Deno.writeTextFile(new URL("guard_floor.md", out), guardFloorReport(result));
  console.log(guardFloorReport(result));
}
