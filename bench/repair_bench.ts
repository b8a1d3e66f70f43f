/**
 * `deno task bench:repair [--runs 3] [--bound 45]` (as root): which faults Ferry repairs itself,
 * and how fast, on the simulated cluster (`daemon/dev/cluster_sim.ts`, two nodes, pool IPAM,
 * pods `a1`, `b1` (isolated by a policy: only `a1` may reach it) and `c1` on node 1, `a2` on node
 * 2). Each fault is made by hand on node 1, as an
 * operator or another program would; then the state is polled (every 250 ms, up to `--bound`
 * seconds, timed from the fault's end) until Ferry has put it back, while a probe says what
 * connectivity-test's matching check would show meanwhile. A fault not repaired within the bound is measured once and undone by
 * restarting node 1's daemon (what a restart of its pod does). Written to
 * `bench/results/repair.json` and `repair.md` (the table in docs/operations.md).
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import {
  type SimCluster,
  type SimPod,
  waitReady,
  withSimCluster,
} from "../daemon/dev/cluster_sim.ts";
import { IS_ROOT } from "../daemon/dev/netns.ts";
import { IPBLOCKS, NETWORK_POLICIES } from "../daemon/k8s/resources.ts";
import type { IpBlockObject } from "../daemon/ipam/ip_pools.ts";
import { forgedArgv, honestArgv, noPorts, snmpArgv } from "../cli/connectivity/forge.ts";

/** One fault, measured. */
export interface FaultResult {
  /** What was done by hand. */
  fault: string;
  /** What puts it back (or nothing). */
  repairedBy: string;
  /** Whether Ferry puts it back (false: something else does, e.g. the kubelet). */
  byFerry: boolean;
  /** Each run's time to repair in ms; null: not repaired within the bound. */
  runsMs: (number | null)[];
  /** The median of the repaired runs (ms), when every run was repaired. */
  medianMs?: number;
  /** The connectivity-test check the fault shows in, and what it showed while the fault lasted. */
  meanwhile: string;
}

/** The whole run. */
export interface RepairBench {
  /** When. */
  date: string;
  /** The machine's CPUs. */
  cpus?: number;
  /** The bound per run, in s. */
  boundSeconds: number;
  /** Each fault. */
  faults: FaultResult[];
}

const PORT = 18080;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function sh(args: string[]): Promise<{ code: number; out: string }> {
  const o = await new Deno.Command(args[0], {
    args: args.slice(1),
    stdout: "piped",
    stderr: "piped",
  })
    .output();
  const t = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: o.code, out: t(o.stdout) + t(o.stderr) };
}

const inNs = (ns: string, argv: string[]) => sh(["ip", "netns", "exec", ns, ...argv]);

/** A TCP connection from `from` to `ip`:{@link PORT} within 1 s. */
async function connects(from: SimPod, ip: string): Promise<boolean> {
  return (await inNs(from.ns.name, ["nc", "-z", "-w", "1", ip, String(PORT)])).code === 0;
}

/** Whether datagrams forged by `from` as `victim` reach `to` (its kernel's NoPorts rises). */
async function forgeryArrives(from: SimPod, to: SimPod, victim: string): Promise<boolean> {
  const count = async () => noPorts((await inNs(to.ns.name, snmpArgv())).out);
  await inNs(from.ns.name, honestArgv(to.ip));
  const before = await count();
  await inNs(from.ns.name, forgedArgv(to.ip, victim));
  return (await count()) > before;
}

async function until(done: () => Promise<boolean>, boundMs: number): Promise<number | null> {
  const start = Date.now();
  while (Date.now() - start < boundMs) {
    if (await done().catch(() => false)) return Date.now() - start;
    await sleep(250);
  }
  return null;
}

/** A fault: made by hand, seen repaired, and the probe of the check it shows in. */
interface Fault {
  fault: string;
  repairedBy: string;
  byFerry?: false;
  check: string;
  /** Makes the fault; returns what "repaired" means. */
  make(): Promise<() => Promise<boolean>>;
  /** The probe: what the check would say now (a sentence). */
  probe(): Promise<string>;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2
    ? s[(s.length - 1) / 2]
    : Math.round((s[s.length / 2 - 1] + s[s.length / 2]) / 2);
}

async function listen(pod: SimPod, address: string): Promise<Deno.ChildProcess> {
  const child = new Deno.Command("ip", {
    args: ["netns", "exec", pod.ns.name, "nc", "-lk", address, String(PORT)],
    stdout: "null",
    stderr: "null",
  }).spawn();
  await sleep(200);
  return child;
}

function faults(
  c: SimCluster,
  p: { a1: SimPod; b1: SimPod; c1: SimPod; a2: SimPod },
): Fault[] {
  const [n1, n2] = c.nodes;
  const nft = (...args: string[]) => sh(["ip", "netns", "exec", n1.ns.name, "nft", ...args]);
  const hasTable = async (family: string, name: string) =>
    (await nft("list", "table", family, name)).code === 0;
  const routesToN2 = async () =>
    (await sh(["ip", "-n", n1.ns.name, "-4", "route", "show"])).out.split("\n")
      .filter((l) => l.includes(`via ${n2.address}`));
  const reach = async () =>
    (await connects(p.a1, p.a2.ip)) ? "a1 → a2 connects" : "a1 → a2 fails (timed out)";
  return [
    {
      fault: "a route to another node's pods deleted by hand",
      repairedBy: "the route check every 30 s (and any Node change)",
      check: "pod→pod across nodes",
      async make() {
        const before = await routesToN2();
        for (const r of before) {
          await sh(["ip", "-n", n1.ns.name, "route", "del", ...r.trim().split(/\s+/)]);
        }
        return async () => (await routesToN2()).length >= before.length;
      },
      probe: reach,
    },
    {
      fault: "the NetworkPolicy table deleted (nft delete table inet ferry-policy)",
      repairedBy: "the next read of its counters (every 10 s) finds it gone: written again whole",
      check: "NetworkPolicy deny-all enforced",
      async make() {
        await nft("delete", "table", "inet", "ferry-policy");
        return () => hasTable("inet", "ferry-policy");
      },
      probe: async () =>
        (await connects(p.a2, p.b1.ip))
          ? "a2 → isolated b1 connects (deny not enforced)"
          : "a2 → isolated b1 blocked",
    },
    {
      fault: "the port-security table deleted (nft delete table bridge ferry-portsec)",
      repairedBy:
        "the next read of its counters (every 10 s) finds it gone: written again whole, ports under ADD closed again",
      check: "forged source dropped",
      async make() {
        await nft("delete", "table", "bridge", "ferry-portsec");
        return () => hasTable("bridge", "ferry-portsec");
      },
      probe: async () =>
        (await forgeryArrives(p.a1, p.c1, p.a2.ip))
          ? "a1's datagrams forged as a2 arrive at c1"
          : "a1's forged datagrams dropped",
    },
    {
      fault: "the masquerade table deleted (nft delete table inet ferry)",
      repairedBy: "the route check every 30 s, which now also looks for the masquerade table",
      check: "pod→outside address (--external)",
      async make() {
        await nft("delete", "table", "inet", "ferry");
        return () => hasTable("inet", "ferry");
      },
      probe: async () =>
        (await connects(p.a1, c.internet))
          ? "a1 → outside connects"
          : "a1 → outside fails (leaves with the pod's address, no way back)",
    },
    {
      fault:
        "the daemon killed (SIGKILL) and started again at once, as the kubelet restarts the DaemonSet's pod",
      byFerry: false,
      repairedBy:
        "not Ferry: the kubelet restarts the pod (here at once, as a first restart); the time is from its start to ready",
      check: "all checks of running pods (new pods wait)",
      async make() {
        await c.killDaemon(n1);
        const down = await reach();
        this.probe = () => Promise.resolve(`${down} while it is down`);
        await c.startDaemon(n1);
        let ready = false;
        void waitReady(n1).then(() => ready = true, () => {});
        return () => Promise.resolve(ready);
      },
      probe: reach,
    },
    {
      fault: "the node's IPBlock deleted from the API (pool IPAM)",
      repairedBy: "the daemon's block writer (its records name the block's addresses)",
      check: "none (pods keep their addresses and traffic)",
      async make() {
        const { items } = await c.client.listAll<IpBlockObject>(IPBLOCKS, {});
        const mine = items.filter((b) => b.spec?.node === n1.name);
        for (const b of mine) {
          await c.client.delete(IPBLOCKS, undefined, b.metadata!.name!).catch(() => {});
        }
        return async () => ((await c.blocks()).get(n1.name)?.length ?? 0) >= mine.length;
      },
      probe: reach,
    },
  ];
}

async function measure(c: SimCluster, runs: number, boundMs: number): Promise<FaultResult[]> {
  const [n1, n2] = c.nodes;
  const a1 = await c.addPod(n1, "a1", 20_000, { labels: { role: "a" } });
  const b1 = await c.addPod(n1, "b1", 20_000, { labels: { role: "b" } });
  const c1 = await c.addPod(n1, "c1", 20_000, { labels: { role: "c" } });
  const a2 = await c.addPod(n2, "a2", 20_000, { labels: { role: "c" } });
  const listeners = [await listen(a2, a2.ip), await listen(b1, b1.ip)];
  const outside = new Deno.Command("ip", {
    args: ["netns", "exec", c.outside.name, "nc", "-lk", c.internet, String(PORT)],
    stdout: "null",
    stderr: "null",
  }).spawn();
  listeners.push(outside);
  // b1 isolated from a2 (a policy so the table exists): only a1 may reach it.
  await c.client.create<NetworkPolicy>(NETWORK_POLICIES, {
    metadata: { name: `repair-bench-${n1.name}`, namespace: "default" },
    spec: {
      podSelector: { matchLabels: { role: "b" } },
      policyTypes: ["Ingress"],
      ingress: [{ from: [{ podSelector: { matchLabels: { role: "a" } } }] }],
    },
  });
  try {
    if (await until(async () => !(await connects(a2, b1.ip)), 20_000) === null) {
      throw new Error("the policy isolating b1 was not enforced within 20 s");
    }
    if (!(await connects(a1, a2.ip)) || !(await connects(a1, b1.ip))) {
      throw new Error("a1 does not reach a2 and b1 before any fault");
    }
    const out: FaultResult[] = [];
    if (await forgeryArrives(a1, c1, b1.ip)) {
      throw new Error("a forgery arrives before any fault");
    }
    for (const f of faults(c, { a1, b1, c1, a2 })) {
      const runsMs: (number | null)[] = [];
      let meanwhile = "";
      for (let i = 0; i < runs; i++) {
        // Timed from the fault's end (for the daemon: its start again); the probe runs meanwhile.
        const repaired = await f.make();
        const [ms, seen] = await Promise.all([until(repaired, boundMs), f.probe()]);
        if (!meanwhile) meanwhile = seen;
        runsMs.push(ms);
        console.error(`${f.fault}: run ${i + 1}: ${ms === null ? "not repaired" : `${ms} ms`}`);
        if (ms === null) {
          // Undone as a restart of the pod would.
          await c.killAndRestart(n1);
          await waitReady(n1);
          if (!(await until(repaired, 30_000))) {
            throw new Error(`${f.fault}: not back after a restart`);
          }
          break;
        }
        await sleep(1000);
      }
      const done = runsMs.filter((x): x is number => x !== null);
      out.push({
        fault: f.fault,
        repairedBy: done.length ? f.repairedBy : "nothing within the bound; " + f.repairedBy,
        byFerry: f.byFerry ?? true,
        runsMs,
        ...(done.length === runsMs.length ? { medianMs: median(done) } : {}),
        meanwhile: `${f.check}: ${meanwhile}`,
      });
    }
    return out;
  } finally {
    for (const l of listeners) {
      try {
        l.kill("SIGTERM");
      } catch { /* gone */ }
      await l.status;
    }
    await c.client.delete(NETWORK_POLICIES, "default", `repair-bench-${n1.name}`).catch(() => {});
  }
}

/** The Markdown table. */
export function repairTable(b: RepairBench): string {
  const rows = b.faults.map((f) => {
    const repaired = f.runsMs.every((x) => x !== null)
      ? `${f.byFerry ? "yes" : "restarted"}, median ${(f.medianMs! / 1000).toFixed(1)} s (${
        f.runsMs.map((x) => (x! / 1000).toFixed(1)).join(", ")
      } s)`
      : `no (not within ${b.boundSeconds} s)`;
    return `| ${f.fault} | ${repaired} | ${f.repairedBy} | ${f.meanwhile} |`;
  });
  return [
    `Measured ${b.date} on ${b.cpus ?? "?"} CPUs (\`deno task bench:repair\`, simulated cluster):`,
    "",
    "| Fault (on one node) | Repaired by Ferry? | By what | What connectivity-test shows meanwhile |",
    "|---|---|---|---|",
    ...rows,
    "",
  ].join("\n");
}

if (import.meta.main) {
  if (!IS_ROOT) {
    console.error("bench:repair needs root (network namespaces)");
    Deno.exit(2);
  }
  const f = parseArgs(Deno.args, { string: ["runs", "bound"] });
  const runs = Number(f.runs ?? 3), boundSeconds = Number(f.bound ?? 45);
  const faultsMeasured = await withSimCluster(
    { nodes: 2, pool: {} },
    (c) => measure(c, runs, boundSeconds * 1000),
  );
  const bench: RepairBench = {
    date: new Date().toISOString(),
    cpus: navigator.hardwareConcurrency,
    boundSeconds,
    faults: faultsMeasured,
  };
  const dir = new URL("./results/", import.meta.url).pathname;
  await Deno.writeTextFile(`${dir}repair.json`, JSON.stringify(bench, null, 2) + "\n");
  await Deno.writeTextFile(`${dir}repair.md`, repairTable(bench));
  console.log(repairTable(bench));
}
