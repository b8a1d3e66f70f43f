/**
 * `deno task bench:policy [--quick]`: NetworkPolicy at scale (root, nft). Five measurements, each
 * against a floor or its counterpart measured in the same run:
 *
 * 1. **Compile and write** at 1,000 and 10,000 pods with 200 policies (100 pods per node): one
 *    node's recompile of its verdicts (the work each change costs every node), the table's size,
 *    and the `nft -f` transaction that replaces it, in a throwaway namespace.
 * 2. **Time to enforcement on every node**: three nodes' policy sides (their own watches on the
 *    API stand-in, each writing into a namespace of its own) over 1,000 pods and 200 policies; a
 *    policy created, a pod labelled so that a policy selects it, a peer pod started (its address
 *    set); from the API write until every node that must show it has a table showing it.
 * 3. **Memory**: the daemon (a process, policy on) with 10,000 pods and 200 policies in the
 *    cluster, against the same daemon with policy off.
 * 4. **The pod's own path**: the daemon's ADD p50 with 0 policies, 100 policies that do not select
 *    the pod, and 100 of which one selects it; TCP throughput and new connections per second
 *    between two pods (iperf3, a connect loop) with policy off, and with 0, 10 and 100 policies
 *    of which one isolates the server.
 *
 * 5. **A tenant's large policies** (the shape of #42 item 4): the table one node writes for them,
 *    with the size limits applied and without, its size and `nft -f` time.
 *
 * Writes `bench/results/policy.json` and `policy.md` (rendered by `bench/policy_report.ts`).
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import type { Namespace, Pod } from "kubernetes-types/core/v1.d.ts";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import { getLogger } from "@logtape/logtape";
import { KubeStandin } from "../daemon/dev/kube_standin/server.ts";
import { KubeClient } from "../daemon/k8s/client.ts";
import { HttpTransport } from "../daemon/k8s/transport.ts";
import { loadKubeconfig } from "../daemon/k8s/kubeconfig.ts";
import { Watcher } from "../daemon/k8s/watcher.ts";
import { NAMESPACES, NETWORK_POLICIES, PODS } from "../daemon/k8s/resources.ts";
import { compilePolicies, ipInBlock, type PolicyView } from "../daemon/policy/compile.ts";
import { policyPodOf } from "../daemon/policy/policy_objects.ts";
import { DEFAULT_POLICY_LIMITS, limitPolicies, policyEntries } from "../daemon/policy/limits.ts";
import { policyScript } from "../daemon/policy/nft_scripts.ts";
import { renderPolicyTable } from "../daemon/policy/nft_policy.ts";
import { policySide } from "../daemon/policy/policy_watches.ts";
import type { AttachmentStore } from "../daemon/records/attachment_store.ts";
import { NftRunner } from "../daemon/cluster/masquerade.ts";
import { DaemonProcess, waitForDaemon } from "../daemon/dev/daemon_process.ts";
import { IS_ROOT, run, type TestNetns, uniqueToken } from "../daemon/dev/netns.ts";
import { type SimCluster, type SimPod, withSimCluster } from "../daemon/dev/cluster_sim.ts";
import { testSubnet } from "../daemon/dev/harness.ts";
import { unixRequest } from "../lib/unix_http.ts";
import { STATS_PATH } from "../lib/socket_api.ts";
import { policyBenchReport, type PolicyBenchResult } from "./policy_report.ts";

const NAMESPACE_COUNT = 20;
const APPS = 50;
const PODS_PER_NODE = 100;

/** A synthetic cluster: namespaces, pods spread over `nodes`, and `policies` policies. */
export function syntheticCluster(pods: number, policies: number, nodes: number) {
  const namespaces: Namespace[] = Array.from({ length: NAMESPACE_COUNT }, (_, i) => ({
    metadata: { name: `ns-${i}`, labels: { team: `t-${i % 4}` } },
  }));
  const podList: Pod[] = Array.from({ length: pods }, (_, i) => podObject(i, nodes));
  const policyList: NetworkPolicy[] = Array.from({ length: policies }, (_, j) => ({
    metadata: { name: `pol-${j}`, namespace: `ns-${j % NAMESPACE_COUNT}` },
    spec: {
      podSelector: { matchLabels: { app: `a-${j % APPS}` } },
      policyTypes: j % 5 === 0 ? ["Ingress", "Egress"] : ["Ingress"],
      ingress: [{
        from: [
          { podSelector: { matchLabels: { tier: "web" } } },
          { namespaceSelector: { matchLabels: { team: `t-${j % 4}` } } },
          { ipBlock: { cidr: "192.168.0.0/16", except: ["192.168.1.0/24"] } },
        ],
        ports: [{ port: "http" }, { protocol: "UDP", port: 5000, endPort: 5010 }],
      }],
      ...(j % 5 === 0
        ? {
          egress: [{
            to: [{ podSelector: { matchLabels: { tier: "db" } } }],
            ports: [{ port: 5432 }],
          }],
        }
        : {}),
    },
  }));
  return { namespaces, pods: podList, policies: policyList };
}

/** Pod `i` of a synthetic cluster of `nodes` nodes: its labels, node, named port and address. */
function podObject(i: number, nodes: number, labels: Record<string, string> = {}): Pod {
  return {
    metadata: {
      name: `p-${i}`,
      namespace: `ns-${i % NAMESPACE_COUNT}`,
      labels: { app: `a-${i % APPS}`, tier: ["web", "db", "cache"][i % 3], ...labels },
    },
    spec: {
      nodeName: `node-${i % nodes}`,
      containers: [{ name: "c", image: "pause", ports: [{ name: "http", containerPort: 8080 }] }],
    },
    status: {
      phase: "Running",
      podIPs: [{ ip: `10.${100 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}` }],
    },
  };
}

/** A throwaway network namespace (removed by {@link netnsDel}). */
async function netnsAdd(): Promise<TestNetns> {
  const name = `fyq-${uniqueToken()}`;
  await run("ip", "netns", "add", name);
  return { name, path: `/var/run/netns/${name}` };
}

async function netnsDel(ns: TestNetns): Promise<void> {
  await run("ip", "netns", "del", ns.name).catch(() => {});
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const pct = (xs: number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

/** Part 1: one node's compile, the table, and its transaction, at `pods` pods. */
export async function compileAndWrite(pods: number, policies: number) {
  const nodes = Math.max(1, Math.round(pods / PODS_PER_NODE));
  const c = syntheticCluster(pods, policies, nodes);
  const view: PolicyView = {
    policies: c.policies,
    namespaces: new Map(c.namespaces.map((n) => [n.metadata!.name!, n.metadata!.labels ?? {}])),
    pods: c.pods.map(policyPodOf),
  };
  const local = view.pods.filter((p) => (p as { node?: string }).node === "node-0");
  const times: number[] = [];
  let verdicts = compilePolicies(view, local, ipInBlock);
  for (let i = 0; i < 5; i++) {
    const t = performance.now();
    verdicts = compilePolicies(view, local, ipInBlock);
    times.push(performance.now() - t);
  }
  const table = renderPolicyTable("ferry-bench", verdicts)!;
  const ns = await netnsAdd();
  const nft = new NftRunner();
  const writes: number[] = [];
  try {
    for (let i = 0; i < 3; i++) {
      const t = performance.now();
      await nft.applyIn(ns.path, policyScript("ferry-bench", table));
      writes.push(performance.now() - t);
    }
  } finally {
    await netnsDel(ns);
  }
  return {
    pods,
    policies,
    nodes,
    localPods: local.length,
    isolatedPods: verdicts.length,
    compileMs: round(median(times)),
    tableKiB: round(table.length / 1024),
    tableRules: table.split("\n").filter((l) => /counter (accept|drop)/.test(l)).length,
    nftWriteMs: round(median(writes)),
  };
}

/**
 * One tenant's policies of the shape #42 item 4 reported (each `blocks` ipBlocks of `excepts`
 * excepts, every other /24 of its block, and `ports` ports), all selecting one pod of the node;
 * `distinct`: each policy's blocks its own (else the same in all).
 */
function tenantPolicies(
  policies: number,
  blocks: number,
  excepts: number,
  ports: number,
  distinct: boolean,
): NetworkPolicy[] {
  return Array.from({ length: policies }, (_, i) => ({
    metadata: { namespace: "tenant", name: `hog-${i}` },
    spec: {
      podSelector: {},
      ingress: [{
        from: Array.from({ length: blocks }, (_, b) => {
          const prefix = `${distinct ? 10 + (i % 200) : 10}.${b}`;
          return {
            ipBlock: {
              cidr: `${prefix}.0.0/16`,
              except: Array.from({ length: excepts }, (_, e) => `${prefix}.${2 * e}.0/24`),
            },
          };
        }),
        ports: Array.from({ length: ports }, (_, p) => ({ port: 1000 + p })),
      }],
    },
  }));
}

/**
 * A tenant's large policies on one node: the table the daemon writes for them (the limits
 * applied, or not), its size, the compile and render, and the `nft -f` that writes it.
 */
export async function tenantShapes() {
  const pod = {
    namespace: "tenant",
    name: "hog",
    labels: {},
    ips: ["10.244.1.5"],
    hostNetwork: false,
    done: false,
    ports: [],
  };
  const cases: [string, NetworkPolicy[], boolean][] = [
    [
      "150 × (40 blocks × 100 excepts, 40 ports), limits",
      tenantPolicies(150, 40, 100, 40, false),
      true,
    ],
    ["the same, no limits", tenantPolicies(150, 40, 100, 40, false), false],
    ["150 distinct, no limits", tenantPolicies(150, 40, 100, 40, true), false],
    [
      "a namespace at its limits: 10 distinct × (9 blocks × 100 excepts, 40 ports)",
      tenantPolicies(10, 9, 100, 40, true),
      true,
    ],
  ];
  const rows = [];
  for (const [what, all, limited] of cases) {
    const t = performance.now();
    const { policies, refused } = limited
      ? limitPolicies(all, DEFAULT_POLICY_LIMITS)
      : { policies: all, refused: [] };
    const view: PolicyView = { policies, namespaces: new Map([["tenant", {}]]), pods: [pod] };
    const table = renderPolicyTable("ferry-bench", compilePolicies(view, [pod], ipInBlock))!;
    const renderMs = performance.now() - t;
    const ns = await netnsAdd();
    try {
      const w = performance.now();
      await new NftRunner().applyIn(ns.path, policyScript("ferry-bench", table));
      rows.push({
        case: what,
        entries: all.reduce((n, p) => n + policyEntries(p), 0),
        refused: refused.length,
        renderMs: round(renderMs),
        tableKiB: round(table.length / 1024),
        nftWriteMs: round(performance.now() - w),
      });
    } finally {
      await netnsDel(ns);
    }
    console.log(JSON.stringify(rows.at(-1)));
  }
  return rows;
}

/** Creates the synthetic cluster's objects in the API (pods with their addresses). */
async function populate(client: KubeClient, c: ReturnType<typeof syntheticCluster>) {
  for (const ns of c.namespaces) {
    await client.create(NAMESPACES, ns).catch(() => {});
  }
  const createPod = async (p: Pod) => {
    await client.create(PODS, { ...p, status: undefined });
    await client.patchMerge(PODS, p.metadata!.namespace, p.metadata!.name!, {
      status: p.status,
    }, { subresource: "status" });
  };
  for (let i = 0; i < c.pods.length; i += 50) {
    await Promise.all(c.pods.slice(i, i + 50).map(createPod));
  }
  for (const p of c.policies) await client.create(NETWORK_POLICIES, p);
}

/** Part 2: time to enforcement on every node, per kind of change. */
async function timeToEnforcement(pods: number, policies: number, nodes: number, rounds: number) {
  const standin = await KubeStandin.start({ token: "bench", bookmarkIntervalMs: 1000 });
  const dir = await Deno.makeTempDir({ prefix: "ferry-bench-policy-" });
  const namespaces: TestNetns[] = [];
  const sides: ReturnType<typeof policySide>[] = [];
  const watchers: Watcher[] = [];
  const transports: HttpTransport[] = [];
  try {
    await Deno.writeTextFile(`${dir}/kubeconfig`, standin.kubeconfig());
    const conn = await loadKubeconfig(`${dir}/kubeconfig`);
    const admin = new HttpTransport(conn);
    transports.push(admin);
    const client = new KubeClient(admin);
    const c = syntheticCluster(pods, policies, nodes);
    await populate(client, c);
    // What each node last wrote into its namespace's table.
    const written = Array.from({ length: nodes }, () => "");
    for (let n = 0; n < nodes; n++) {
      const ns = await netnsAdd();
      namespaces.push(ns);
      const transport = new HttpTransport(conn);
      transports.push(transport);
      const kube = new KubeClient(transport);
      const watcher = new Watcher();
      watchers.push(watcher);
      const runner = new NftRunner();
      const side = policySide({
        kube,
        watcher,
        watchOptions: {},
        nodeName: `node-${n}`,
        table: "ferry-bench",
        nft: {
          apply: async (script) => {
            await runner.applyIn(ns.path, script);
            written[n] = script;
          },
          remove: () => Promise.resolve(),
          applyIn: (netns, script) => runner.applyIn(netns, script),
        },
        store: { list: () => [] } as unknown as AttachmentStore,
        labelsOf: () => undefined,
        netnsExists: () => Promise.resolve(true),
        logger: getLogger(["ferry", "bench"]),
      });
      sides.push(side);
      watcher.start();
      side.start();
    }
    await until(() => watchers.every((w) => w.synced) && written.every((w) => w.length > 0));
    /** Waits until `shows(n)` holds for each node of `must`; ms since `since`. */
    const converge = async (since: number, must: number[], shows: (text: string) => boolean) => {
      await until(() => must.every((n) => shows(written[n])), 60_000, 5);
      return performance.now() - since;
    };
    const nodesOf = (ns: string, app: string) => [
      ...new Set(
        c.pods.filter((p) => p.metadata!.namespace === ns && p.metadata!.labels!.app === app)
          .map((p) => Number(p.spec!.nodeName!.slice(5))),
      ),
    ];
    for (let r = 0; r < rounds; r++) {
      const pns = c.pods[r * 13 + 1].metadata!.namespace!;
      await client.create(NETWORK_POLICIES, {
        metadata: { name: `iso-${r}`, namespace: pns },
        spec: {
          podSelector: { matchLabels: { app: `isolated-${r}` } },
          ingress: [{ from: [{ ipBlock: { cidr: "203.0.113.0/24" } }] }],
        },
      });
    }
    await new Promise((res) => setTimeout(res, 1000));
    const out = {
      policyCreated: [] as number[],
      podLabelled: [] as number[],
      podStarted: [] as number[],
    };
    for (let r = 0; r < rounds; r++) {
      // A policy created: each node hosting a pod it selects shows its rule.
      // An app that has pods in that namespace (app ≡ namespace modulo 10, by construction).
      const ns = `ns-${r % NAMESPACE_COUNT}`;
      const app = `a-${(r % NAMESPACE_COUNT) % 10 + 10 * (r % 5)}`;
      const name = `new-${r}`;
      let t = performance.now();
      await client.create(NETWORK_POLICIES, {
        metadata: { name, namespace: ns },
        spec: { podSelector: { matchLabels: { app } }, ingress: [{ from: [{ podSelector: {} }] }] },
      });
      out.policyCreated.push(
        await converge(t, nodesOf(ns, app), (w) => w.includes(`${ns}/${name} ingress[0]`)),
      );
      // A pod labelled so that a policy (made for it before the rounds) selects it: its node
      // shows that policy's rule.
      const i = r * 13 + 1;
      const pod = c.pods[i];
      const pns = pod.metadata!.namespace!;
      t = performance.now();
      await client.patchMerge(PODS, pns, pod.metadata!.name!, {
        metadata: { labels: { app: `isolated-${r}` } },
      });
      out.podLabelled.push(
        await converge(t, [i % nodes], (w) => w.includes(`${pns}/iso-${r} ingress[0]`)),
      );
      // A peer pod started: every node hosting a pod isolated by a policy of its namespace that
      // lets tier=web in shows its address.
      const k = pods + r;
      const fresh = podObject(k, nodes, { tier: "web", app: "fresh" });
      const fns = fresh.metadata!.namespace!;
      const ip = fresh.status!.podIPs![0].ip!;
      await client.create(PODS, { ...fresh, status: undefined });
      const must = [
        ...new Set(
          c.policies.filter((p) => p.metadata!.namespace === fns)
            .flatMap((p) => nodesOf(fns, p.spec!.podSelector.matchLabels!.app)),
        ),
      ];
      t = performance.now();
      await client.patchMerge(PODS, fns, fresh.metadata!.name!, { status: fresh.status }, {
        subresource: "status",
      });
      out.podStarted.push(await converge(t, must, (w) => w.includes(ip)));
    }
    const summary = (xs: number[]) => ({
      n: xs.length,
      p50Ms: round(pct(xs, 0.5)),
      p99Ms: round(pct(xs, 0.99)),
    });
    return {
      pods,
      policies,
      nodes,
      policyCreated: summary(out.policyCreated),
      podLabelled: summary(out.podLabelled),
      podStarted: summary(out.podStarted),
    };
  } finally {
    for (const s of sides) await s.close();
    for (const w of watchers) await w.stop();
    for (const t of transports) t.close();
    for (const ns of namespaces) await netnsDel(ns);
    await standin.stop();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

async function until(cond: () => boolean, ms = 300_000, every = 20): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, every));
  }
}

/** Part 3: a daemon's resident memory with `pods` pods of the cluster, policy on and off. */
async function daemonMemory(pods: number, policies: number) {
  const standin = await KubeStandin.start({ token: "bench", bookmarkIntervalMs: 1000 });
  const dir = await Deno.makeTempDir({ prefix: "ferry-bench-rss-" });
  try {
    await Deno.writeTextFile(`${dir}/kubeconfig`, standin.kubeconfig());
    const transport = new HttpTransport(await loadKubeconfig(`${dir}/kubeconfig`));
    await populate(
      new KubeClient(transport),
      syntheticCluster(pods, policies, pods / PODS_PER_NODE),
    );
    transport.close();
    const rss: Record<string, number> = {};
    for (const enabled of [false, true]) {
      // In the host's namespace, beside the stand-in; a node no pod is on, so that it writes no
      // table there: what is measured is what the cluster's pods and policies cost it to know.
      const socket = `${dir}/${enabled}.sock`;
      const log = `${dir}/${enabled}.log`;
      const bridge = `fyq${uniqueToken().slice(0, 8)}`;
      await Deno.writeTextFile(
        `${dir}/${enabled}.json`,
        JSON.stringify({
          socket,
          stateDir: `${dir}/state-${enabled}`,
          kubeconfig: `${dir}/kubeconfig`,
          nodeName: "node-without-pods",
          masquerade: { enabled: false },
          network: { bridge, forwarding: false, subnet: testSubnet() },
          server: { httpPort: -1 },
          policy: { enabled, table: "ferry-bench" },
        }),
      );
      const daemon = new DaemonProcess(`${dir}/${enabled}.json`, socket, log);
      try {
        await daemon.start();
        await waitForDaemon(socket, log, { ready: true, timeoutMs: 120_000 });
        // Past the quiet spell after the first lists, when the daemon gives freed memory back.
        await new Promise((r) => setTimeout(r, 15_000));
        const status = await Deno.readTextFile(`/proc/${daemon.pid}/status`);
        rss[enabled ? "on" : "off"] = round(Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024);
      } finally {
        await daemon.stop();
        await run("ip", "link", "del", bridge).catch(() => {});
      }
    }
    return { pods, policies, rssMiB: rss };
  } finally {
    await standin.stop();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** The daemon's own ADD p50 (its `/v1/stats`) over `n` pods added one at a time. */
async function addP50(c: SimCluster, n: number, labels: Record<string, string>) {
  const node = c.nodes[0];
  const added: SimPod[] = [];
  for (let i = 0; i < n; i++) added.push(await c.addPod(node, `b${i}`, 30_000, { labels }));
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

/** `count` policies in default, none of which selects app=bench; with `selecting`, one more that does. */
async function benchPolicies(c: SimCluster, count: number, selecting: boolean) {
  for (let j = 0; j < count; j++) {
    await c.client.create(NETWORK_POLICIES, {
      metadata: { name: `bp-${j}`, namespace: "default" },
      spec: {
        podSelector: { matchLabels: { app: `other-${j}` } },
        ingress: [{
          from: [{ podSelector: { matchLabels: { role: "client" } } }],
          ports: [{ port: 5201 }],
        }],
      },
    });
  }
  if (selecting) {
    await c.client.create(NETWORK_POLICIES, {
      metadata: { name: "bp-server", namespace: "default" },
      spec: {
        podSelector: { matchLabels: { app: "bench" } },
        ingress: [{ from: [{ podSelector: { matchLabels: { role: "client" } } }] }],
      },
    });
  }
  await new Promise((r) => setTimeout(r, 2000));
}

/**
 * TCP between two pods of one node: iperf3 throughput (Gbit/s) and new connections per second
 * (also `bench/portsec_bench.ts`).
 */
export async function tcpBetween(c: SimCluster) {
  const node = c.nodes[0];
  const srv = await c.addPod(node, "srv", 30_000, { labels: { app: "bench" } });
  const cli = await c.addPod(node, "cli", 30_000, { labels: { role: "client" } });
  const server = new Deno.Command("ip", {
    args: ["netns", "exec", srv.ns.name, "iperf3", "-s", "-1", "-p", "5201"],
    stdout: "null",
    stderr: "null",
  }).spawn();
  const acceptor = new Deno.Command("ip", {
    args: [
      "netns",
      "exec",
      srv.ns.name,
      "python3",
      "-c",
      "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n" +
      "s.bind(('0.0.0.0',5202))\ns.listen(512)\nwhile True:\n  c,_=s.accept()\n  c.close()\n",
    ],
    stdout: "null",
    stderr: "null",
  }).spawn();
  try {
    await new Promise((r) => setTimeout(r, 500));
    const out = await run(
      "ip",
      "netns",
      "exec",
      cli.ns.name,
      "iperf3",
      "-c",
      srv.ip,
      "-p",
      "5201",
      "-t",
      "4",
      "-J",
    );
    const gbps = (JSON.parse(out) as { end: { sum_received: { bits_per_second: number } } }).end
      .sum_received.bits_per_second / 1e9;
    const rate = await run(
      "ip",
      "netns",
      "exec",
      cli.ns.name,
      "python3",
      "-c",
      "import socket,time\nn=0\nend=time.time()+3\nwhile time.time()<end:\n" +
        `  s=socket.create_connection(('${srv.ip}',5202),timeout=2)\n  s.close()\n  n+=1\nprint(n/3)\n`,
    );
    return { gbps: round(gbps, 2), connsPerS: Math.round(Number(rate.trim())) };
  } finally {
    for (const p of [server, acceptor]) {
      try {
        p.kill("SIGKILL");
      } catch { /* gone */ }
      await p.status;
    }
    await c.removePod(srv);
    await c.removePod(cli);
  }
}

/** Part 4: the pod's own path with policy off, and with 0, 10 and 100 policies present. */
async function podPath(adds: number) {
  const cases = [
    { label: "policy off", enabled: false, count: 0, selecting: false },
    { label: "0 policies", enabled: true, count: 0, selecting: false },
    { label: "10 policies, one isolating the server", enabled: true, count: 9, selecting: true },
    { label: "100 policies, none selecting the pod", enabled: true, count: 100, selecting: false },
    { label: "100 policies, one isolating the server", enabled: true, count: 99, selecting: true },
  ];
  const rows = [];
  for (const k of cases) {
    rows.push(
      await onSimNode(k, async (c) => {
        const addMs = await addP50(c, adds, { app: "bench" });
        return { case: k.label, addP50Ms: round(addMs, 2), ...await tcpBetween(c) };
      }),
    );
    console.log(JSON.stringify(rows.at(-1)));
  }
  return rows;
}

/** A one-node simulated cluster with policy on or off and `count` policies (`selecting`: one more isolating app=bench). */
function onSimNode<T>(
  k: { enabled: boolean; count: number; selecting: boolean },
  fn: (c: SimCluster) => Promise<T>,
): Promise<T> {
  return withSimCluster({ nodes: 1, config: { policy: { enabled: k.enabled } } }, async (c) => {
    await benchPolicies(c, k.count, k.selecting);
    return fn(c);
  });
}

/** The daemon's ADD p50 in one case of {@link policyAddCost}. */
export interface PolicyAddCase {
  /** The case. */
  case:
    | "policy off"
    | "no policy"
    | "100 policies, none selecting the pods"
    | "100 policies, one isolating the pods";
  /** The daemon's own ADD p50 (ms). */
  addP50Ms: number;
}

/**
 * What NetworkPolicy costs an ADD (the daemon's own p50 over `adds` pods added one at a time, a
 * one-node simulated cluster on the API stand-in per case): with policy off, with no policy, and
 * with 100 policies of which none selects the pods or one isolates them (the first of them
 * waits for the table's pass, every later one writes its own chain in-process). `deno task bench`
 * reports it against its budget.
 */
export async function policyAddCost(adds: number): Promise<PolicyAddCase[]> {
  const cases = [
    { label: "policy off", enabled: false, count: 0, selecting: false },
    { label: "no policy", enabled: true, count: 0, selecting: false },
    { label: "100 policies, none selecting the pods", enabled: true, count: 100, selecting: false },
    { label: "100 policies, one isolating the pods", enabled: true, count: 99, selecting: true },
  ] as const;
  const rows: PolicyAddCase[] = [];
  for (const k of cases) {
    const addMs = await onSimNode(k, (c) => addP50(c, adds, { app: "bench" }));
    rows.push({ case: k.label, addP50Ms: round(addMs, 2) });
  }
  return rows;
}

if (import.meta.main) {
  if (!IS_ROOT) {
    console.error("bench:policy needs root (namespaces, nft)");
    Deno.exit(2);
  }
  const flags = parseArgs(Deno.args, { boolean: ["quick"], string: ["parts"] });
  const quick = flags.quick;
  // `--parts scale,enforcement,memory,path,tenant`: a partial run prints its parts and writes
  // nothing.
  const parts = flags.parts?.split(",") ?? ["scale", "enforcement", "memory", "path", "tenant"];
  const scale = [];
  if (parts.includes("scale")) {
    for (const pods of quick ? [1000] : [1000, 10_000]) {
      scale.push(await compileAndWrite(pods, 200));
      console.log(JSON.stringify(scale.at(-1)));
    }
  }
  const enforcement = parts.includes("enforcement")
    ? await timeToEnforcement(1000, 200, 3, quick ? 5 : 30)
    : undefined;
  console.log(JSON.stringify(enforcement));
  const memory = parts.includes("memory")
    ? await daemonMemory(quick ? 1000 : 10_000, 200)
    : undefined;
  console.log(JSON.stringify(memory));
  const path = parts.includes("path") ? await podPath(quick ? 10 : 30) : [];
  const tenant = parts.includes("tenant") ? await tenantShapes() : undefined;
  if (!enforcement || !memory || !path.length || !scale.length) Deno.exit(0);
  const result: PolicyBenchResult = {
    date: new Date().toISOString(),
    machine: `${navigator.hardwareConcurrency} CPUs, kernel ${Deno.osRelease()}`,
    scale,
    enforcement,
    memory,
    path,
    tenant,
  };
  const dir = new URL("./results/", import.meta.url);
  await Deno.writeTextFile(new URL("policy.json", dir), JSON.stringify(result, null, 2) + "\n");
  await Deno.writeTextFile(new URL("policy.md", dir), policyBenchReport(result));
  console.log(policyBenchReport(result));
}
