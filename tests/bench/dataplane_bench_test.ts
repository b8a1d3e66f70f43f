import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import {
  caseName,
  FLOORS,
  type Placement,
  type Samples,
  summarizeDataplane,
} from "../../bench/dataplane_bench.ts";
import { dataplaneReport } from "../../bench/report.ts";
import {
  canConnect,
  PROBE_PORTS,
  probeTcp,
  startProbeServers,
  waitForReach,
} from "../../bench/tcp_probe.ts";
import { IS_ROOT, run, withNetns } from "../../daemon/dev/netns.ts";

const META = {
  date: "2026-11-26T00:00:00Z",
  machine: "2 CPUs",
  quick: true,
  rounds: 3,
  durations: { throughputS: 1, rrS: 0.5, connS: 0.5 },
  loadavg: { before: "1 1 1", after: "2 2 2" },
};

/** Every case's series with `off` samples, port security on scaled by `onScale`. */
function samplesWith(onScale: (placement: Placement, policy: boolean) => number): Samples {
  const off = [
    { gbps: 10, rrPerS: 20_000, connsPerS: 5000 },
    { gbps: 2, rrPerS: 1000, connsPerS: 100 }, // an outlier the median leaves out
    { gbps: 10, rrPerS: 20_000, connsPerS: 5000 },
  ];
  const s: Samples = {
    [FLOORS.node]: off.map((x) => ({ ...x, gbps: 20 })),
    [FLOORS.reference]: off,
  };
  for (const p of ["one node", "across nodes, host-gw", "across nodes, vxlan"] as Placement[]) {
    for (const policy of [false, true]) {
      const k = onScale(p, policy);
      s[caseName(p, false, policy)] = off;
      s[caseName(p, true, policy)] = off.map((x) => ({
        gbps: x.gbps * k,
        rrPerS: x.rrPerS * k,
        connsPerS: x.connsPerS * k,
      }));
    }
  }
  return s;
}

Deno.test("the summary is port security on over off per case, from medians, against each case's floor", () => {
  const r = summarizeDataplane(samplesWith(() => 0.98), META);
  assertEquals(r.cases.length, 6);
  for (const k of r.cases) {
    assertEquals(k.onOverOff, { gbps: 0.98, rrPerS: 0.98, connsPerS: 0.98 });
    assertEquals(k.portSecurityOff, { gbps: 10, rrPerS: 20_000, connsPerS: 5000 });
    assertEquals(k.perRound?.map((p) => p.gbps), [0.98, 0.98, 0.98], "each round on over off");
  }
  const one = r.cases.find((k) => k.placement === "one node")!;
  assertEquals(one.floor, FLOORS.reference);
  assertEquals(one.onOverFloor?.gbps, 0.98);
  const across = r.cases.find((k) => k.placement === "across nodes, vxlan")!;
  assertEquals(across.floor, FLOORS.node);
  assertEquals(across.onOverFloor?.gbps, 0.49);
  assert(r.target.met, "0.98× everywhere meets the 0.97× target");
  assertEquals(r.target.conclusive, true, "a steady floor: the verdict stands");
});

Deno.test("the target is met only when every interval clears 0.97: pairs straddling it leave it undecided, pairs wholly below miss it, and the report says which", () => {
  const s = samplesWith(() => 1);
  const offs = Array.from({ length: 10 }, () => ({ gbps: 10, rrPerS: 1000, connsPerS: 100 }));
  const scaled = (ks: number[]) =>
    offs.map((x, i) => ({ gbps: x.gbps * ks[i], rrPerS: x.rrPerS, connsPerS: x.connsPerS }));
  const straddling = [0.95, 1.0, 0.99, 1.01, 0.96, 1.02, 0.98, 1.0, 0.97, 1.03];
  for (const k of Object.keys(s)) if (k.includes("port security")) s[k] = offs;
  s[caseName("across nodes, vxlan", true, true)] = scaled(straddling);
  const r = summarizeDataplane(s, { ...META, quick: false });
  const vx = r.cases.find((k) => k.placement === "across nodes, vxlan" && k.policy)!;
  // Ten pairs: the interval is the 2nd and 9th of the sorted ratios (97.9 %).
  assertEquals(vx.intervals?.gbps, {
    median: 0.995,
    low: 0.96,
    high: 1.02,
    n: 10,
    coverage: 0.979,
  });
  assertEquals(vx.verdict, "undecided");
  assertEquals(r.target.verdict, "undecided", "one undecided case leaves the run undecided");
  assertEquals(r.target.met, false);
  assertEquals(r.target.conclusive, false);
  let md = dataplaneReport(r, "##");
  assert(md.includes("**undecided**") && md.includes("0.995 [0.96–1.02]"), md);
  // The same ratios a few percent lower: the whole interval below 0.97.
  s[caseName("across nodes, vxlan", true, true)] = scaled(straddling.map((x) => x - 0.08));
  const low = summarizeDataplane(s, { ...META, quick: false });
  assertEquals(low.target.verdict, "not met");
  md = dataplaneReport(low, "##");
  assert(md.includes("**not met**"), md);
  // And higher: every interval at or above 0.97.
  s[caseName("across nodes, vxlan", true, true)] = scaled(straddling.map((x) => x + 0.02));
  assertEquals(summarizeDataplane(s, { ...META, quick: false }).target.verdict, "met");
});

Deno.test("one case below 0.97× of off fails the target, and the report says so", () => {
  const r = summarizeDataplane(
    samplesWith((p, policy) => (p === "across nodes, vxlan" && policy ? 0.9 : 1)),
    META,
  );
  assertEquals(r.target.met, false);
  assertEquals(r.target.worst, 0.9);
  const md = dataplaneReport(r, "##");
  assert(md.includes("**not met** (lowest median 0.9×"), md);
  assert(md.includes("**quick mode**"), "quick-mode figures are marked as such");
  assert(md.includes("| 0.9–0.9 |"), "the per-round spread is shown");
  assert(md.includes("load average 1 1 1 before, 2 2 2 after"), "the load average is reported");
});

Deno.test({
  name: "the probe measures a real path, and sees it closed by a drop rule on the server",
  ignore: !IS_ROOT,
  fn: () =>
    withNetns(2, async ([a, b]) => {
      const veth = `fdp${crypto.randomUUID().slice(0, 8)}`;
      await run(
        "ip",
        "link",
        "add",
        veth,
        "netns",
        a.name,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        b.name,
      );
      await run("ip", "-n", a.name, "addr", "add", "192.0.2.1/30", "dev", veth);
      await run("ip", "-n", b.name, "addr", "add", "192.0.2.2/30", "dev", "eth0");
      for (const [ns, dev] of [[a, veth], [b, "eth0"], [a, "lo"], [b, "lo"]] as const) {
        await run("ip", "-n", ns.name, "link", "set", dev, "up");
      }
      const servers = await startProbeServers(b.name);
      try {
        await waitForReach(a.name, "192.0.2.2", PROBE_PORTS.accept, true, 10_000);
        const s = await probeTcp(a.name, "192.0.2.2", { throughputS: 1, rrS: 0.3, connS: 0.3 });
        assert(s.gbps > 0, `throughput measured: ${JSON.stringify(s)}`);
        assert(s.rrPerS > 0, `request/response measured: ${JSON.stringify(s)}`);
        assert(s.connsPerS > 0, `connections measured: ${JSON.stringify(s)}`);
        assert(
          (s.gbitPerCpuS ?? 0) > 0,
          `throughput per CPU-second measured: ${JSON.stringify(s)}`,
        );
        await run(
          "ip",
          ...["netns", "exec", b.name, "nft", "add table inet fdp; add chain inet fdp inp"],
          "{ type filter hook input priority 0; policy accept; }; add rule inet fdp inp tcp dport 5202 drop",
        );
        await waitForReach(a.name, "192.0.2.2", PROBE_PORTS.accept, false, 10_000);
        assertEquals(
          await canConnect(a.name, "192.0.2.2", PROBE_PORTS.echo),
          true,
          "only 5202 is dropped",
        );
        await assertRejects(
          () => waitForReach(a.name, "192.0.2.2", PROBE_PORTS.accept, true, 1000),
          Error,
          "to be open",
        );
      } finally {
        await servers.close();
      }
    }),
});
