/**
 * `deno task chaos:cluster [--nodes 30] [--pods 1500] [--concurrency 30] [--block-size 28]
 * [--kills 10] [--api-outage 20] [--no-nad] [--kubeconfig FILE] [--out FILE]` (as root): address integrity
 * under faults, mistakes and tenants, on a simulated cluster (`cluster_sim.ts`: one daemon
 * process per node in its own network namespace) in pool IPAM sharing one IPPool of small blocks.
 * Without `--kubeconfig` the API is the embedded stand-in; with it, a real kube-apiserver.
 *
 * Pods churn through the nodes' shims as a runtime would (create, ADD retried while code 11,
 * hold, DEL retried until it succeeds, remove), while the run injects, spread over the churn:
 * daemons killed with SIGKILL; blocks deleted by hand; a block re-pointed by hand to another node;
 * a second daemon started with a taken node name; a Node (with a block of the pool) at an address
 * off the nodes' segment, which no node can route to; a node re-addressed (its interface and its
 * Node's InternalIP); an IPPool overlapping the shared one (another block size) created, and one
 * node reconfigured to draw from it first; the API gone for `--api-outage` seconds.
 *
 * Unless `--no-nad`, every pod also joins a macvlan NAD network whose whereabouts IPAM the daemons
 * serve natively (its `NetworkBlock`s checked as the pool's blocks are).
 *
 * Every few seconds, and at the end: the ground truth (the addresses on every live pod's
 * interface) and `ipam check`'s cluster-wide findings must show no address on two pods and no two
 * overlapping blocks. After the churn, a standing pod on every node reaches the one on the next
 * node (the re-addressed node's included; pods in a block deleted or re-pointed by hand are cut
 * off by design and left out) and every node masquerades and reports the unreachable
 * node's block unroutable. Once every pod is deleted, within a settling time: no allocation left in any
 * block of the pool, no attachment record on any node, and `ipam check` clean of leaks. The
 * figures are printed and written as JSON.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { type SimCluster, type SimNode, type SimPod, withSimCluster } from "./cluster_sim.ts";
import {
  IPBLOCKS,
  IPPOOLS,
  NETWORK_ATTACHMENT_DEFINITIONS,
  NETWORKBLOCKS,
  PODS,
} from "../k8s/resources.ts";
import type { KubeObject } from "../k8s/client.ts";
import type { NetworkBlockObject } from "../ipam/nad_blocks.ts";
import { networkFindings } from "../ipam/nad_integrity.ts";
import { installNadCrd, installNetworkBlockCrd } from "./crds.ts";
import { blockName, type IpBlockObject, type IpPoolObject } from "../ipam/ip_pools.ts";
import { cidrContains, formatCidr, parseCidr, parseIp } from "../ipam/cidr.ts";
import type { ClusterStats } from "../cluster/controller.ts";
import { STATS_PATH } from "../../lib/socket_api.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { clusterFindings, type Finding } from "../ipam/integrity.ts";
import { readClusterState } from "../tools/ipam_check.ts";
import { IS_ROOT, pingOnce, run } from "./netns.ts";

/** What to do. */
export interface ClusterChaosOptions {
  /** Simulated nodes. */
  nodes: number;
  /** Pods to churn through. */
  pods: number;
  /** Pods in flight at once. */
  concurrency: number;
  /** The pool's IPv4 block size (prefix length). */
  blockSize: number;
  /** Daemons killed with SIGKILL (restarted at once). */
  kills: number;
  /** How long the API is gone (0: never). */
  apiOutageSeconds: number;
  /** A real API server's kubeconfig; the stand-in when absent. */
  kubeconfig?: string;
  /**
   * Every pod also joins a macvlan NAD network whose whereabouts IPAM the daemons serve natively
   * (`multiNetwork.whereaboutsIpam: native`): the same rules hold on it.
   */
  nadNetwork?: boolean;
  /** Where progress goes. */
  log?: (line: string) => void;
}

/** What happened. */
export interface ClusterChaosReport {
  /** The options. */
  options: Omit<ClusterChaosOptions, "log">;
  /** The API: the stand-in or a real kube-apiserver. */
  api: "stand-in" | "kube-apiserver";
  /** Wall time of the churn, in ms. */
  durationMs: number;
  /** ADDs answered with a result; pods given up after ADD kept answering 11; other failures. */
  adds: { ok: number; givenUp: number; failed: number };
  /** DELs that needed more than one try. */
  delRetries: number;
  /** The faults injected, in order, each with when (ms since the churn started). */
  faults: { atMs: number; fault: string }[];
  /** Checks run during the churn and after. */
  checks: number;
  /** Addresses seen on two live pods' interfaces at once (the ground truth). */
  duplicates: string[];
  /** `ipam check` findings of duplicates and overlapping blocks during and after the churn. */
  integrityFindings: string[];
  /**
   * After the churn: pairs of standing pods (each node's to the next node's) checked for reach,
   * and those that never reached within the settling time.
   */
  reach: { pairs: number; failed: string[]; excluded: string[]; nodes: string[] };
  /** What was left once every pod was deleted and the nodes had settled. */
  leaked: { allocations: string[]; records: string[]; findings: string[] };
  /** Every rule broken, with where. */
  violations: string[];
  /** True when no address was on two pods, no block overlapped and nothing leaked. */
  ok: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const between = (lo: number, hi: number) => lo + Math.random() * (hi - lo);
const pick = <T>(list: T[]): T => list[Math.floor(Math.random() * list.length)];

/** The IPv4 address on a pod's `dev` now (undefined when it has none: its interface is gone). */
async function liveAddress(pod: SimPod, dev = "eth0"): Promise<string | undefined> {
  const out = await run("ip", "-n", pod.ns.name, "-4", "-o", "addr", "show", "dev", dev)
    .catch(() => "");
  return /inet (\S+)\//.exec(out)?.[1];
}

async function attachmentRecords(node: SimNode): Promise<string[]> {
  const dir = `${node.socket.replace("/run/ferry.sock", "/state")}/attachments`;
  try {
    return (await Array.fromAsync(Deno.readDir(dir))).map((e) => `${node.name}:${e.name}`)
      .filter((n) => !n.endsWith(".tmp"));
  } catch {
    return [];
  }
}

/**
 * Runs the churn with the faults on a simulated cluster, removes everything it made, and reports.
 *
 * @example
 * ```ts
 * const report = await runClusterChaos({ nodes: 4, pods: 60, concurrency: 8, blockSize: 28, kills: 2, apiOutageSeconds: 3 });
 * report.ok; // true
 * ```
 */
export function runClusterChaos(options: ClusterChaosOptions): Promise<ClusterChaosReport> {
  const log = options.log ?? (() => {});
  return withSimCluster({
    nodes: options.nodes,
    kubeconfig: options.kubeconfig,
    pool: { blockSize: { ipv4: options.blockSize } },
    config: {
      podWaitSeconds: 10,
      watch: { unhealthyAfterSeconds: 5, requestTimeoutSeconds: 5 },
      gc: { graceSeconds: 2, intervalSeconds: 2, reclaimIntervalSeconds: 2 },
      ipam: { blockReleaseSeconds: 5 },
      logLevel: "info",
      ...(options.nadNetwork ? { multiNetwork: { whereaboutsIpam: "native" } } : {}),
    },
  }, async (c) => {
    if (!options.nadNetwork) return await churn(c, options, log);
    await installNadCrd(c.client);
    await installNetworkBlockCrd(c.client);
    const token = crypto.randomUUID().slice(0, 6);
    const nad = { name: `cc-${token}`, space: `cc-${token}` };
    await c.client.create(NETWORK_ATTACHMENT_DEFINITIONS, {
      metadata: { name: nad.name, namespace: "default" },
      spec: {
        config: JSON.stringify({
          cniVersion: "1.0.0",
          type: "macvlan",
          master: "eth0",
          ipam: {
            type: "whereabouts",
            range: `192.168.${4 * Math.floor(Math.random() * 60)}.0/22`,
            network_name: nad.space,
          },
        }),
      },
    } as KubeObject);
    try {
      return await churn(c, options, log, nad);
    } finally {
      await c.client.delete(NETWORK_ATTACHMENT_DEFINITIONS, "default", nad.name).catch(() => {});
      for (const b of await nadBlocks(c, nad.space).catch(() => [])) {
        await c.client.delete(NETWORKBLOCKS, undefined, b.metadata!.name!).catch(() => {});
      }
    }
  });
}

/** The NetworkBlocks of `network_name` `space`. */
async function nadBlocks(c: SimCluster, space: string): Promise<NetworkBlockObject[]> {
  return (await c.client.listAll<NetworkBlockObject>(NETWORKBLOCKS, {})).items.filter((b) =>
    b.spec?.network.startsWith(`${space}/`)
  );
}

async function churn(
  c: SimCluster,
  options: ClusterChaosOptions,
  log: (line: string) => void,
  nad?: { name: string; space: string },
): Promise<ClusterChaosReport> {
  const report: ClusterChaosReport = {
    options: {
      nodes: options.nodes,
      pods: options.pods,
      concurrency: options.concurrency,
      blockSize: options.blockSize,
      kills: options.kills,
      apiOutageSeconds: options.apiOutageSeconds,
      nadNetwork: !!nad,
    },
    api: options.kubeconfig ? "kube-apiserver" : "stand-in",
    durationMs: 0,
    adds: { ok: 0, givenUp: 0, failed: 0 },
    delRetries: 0,
    faults: [],
    checks: 0,
    duplicates: [],
    integrityFindings: [],
    reach: { pairs: 0, failed: [], excluded: [], nodes: [] },
    leaked: { allocations: [], records: [], findings: [] },
    violations: [],
    ok: false,
  };
  const pool = c.pool!;
  const overlapPool = `${pool.name}-overlap`;
  const live = new Set<SimPod>();
  const started = performance.now();
  const at = () => Math.round(performance.now() - started);
  const fault = (text: string) => {
    report.faults.push({ atMs: at(), fault: text });
    log(`fault: ${text}`);
  };
  let next = 0;
  let done = false;
  let outageUntil = 0;

  /** Deletes a pod object, retried while the API is away (a runtime's pod is gone for good). */
  const deletePodObject = async (name: string) => {
    for (let attempt = 0; attempt < 200; attempt++) {
      try {
        await c.client.delete(PODS, "default", name, { gracePeriodSeconds: 0 });
        return;
      } catch (e) {
        if (String(e).includes("404") || String(e).includes("NotFound")) return;
        await sleep(250);
      }
    }
    report.violations.push(`pod ${name} could not be deleted`);
  };

  const cycle = async (n: number) => {
    const node = c.nodes[n % c.nodes.length];
    const name = `cc${n}`;
    // No new pod reaches a node while the API is away (nothing could schedule it).
    while (Date.now() < outageUntil) await sleep(200);
    let pod: SimPod | undefined;
    for (let attempt = 0; !pod; attempt++) {
      try {
        pod = await c.addPod(
          node,
          name,
          60_000,
          nad ? { annotations: { "k8s.v1.cni.cncf.io/networks": nad.name } } : undefined,
        );
      } catch (e) {
        const text = e instanceof Error ? e.message : String(e);
        // The pod object could not be created (the API is away): as for a runtime, no pod yet.
        if (text.includes("cannot reach") && attempt < 100) {
          await sleep(300);
          continue;
        }
        if (text.includes('"code":11')) report.adds.givenUp++;
        else {
          report.adds.failed++;
          report.violations.push(`${name} on ${node.name}: ${text.slice(0, 300)}`);
        }
        return;
      }
    }
    report.adds.ok++;
    live.add(pod);
    await sleep(between(0, 300));
    for (let attempt = 0;; attempt++) {
      const out = await c.removePod(pod);
      if (out.code === 0) break;
      report.delRetries++;
      if (attempt > 300) {
        report.violations.push(`${name}: DEL kept failing: ${out.stdout.trim()}`);
        break;
      }
      await sleep(between(100, 300));
    }
    live.delete(pod);
    await run("ip", "netns", "del", pod.ns.name).catch(() => {});
    await deletePodObject(pod.name);
  };

  /** The ground truth and ipam check: no address on two live pods, no overlapping blocks. */
  const check = async () => {
    report.checks++;
    for (const dev of nad ? ["eth0", "net1"] : ["eth0"]) {
      const seen = new Map<string, string>();
      for (const pod of [...live]) {
        const ip = await liveAddress(pod, dev);
        if (!ip || !live.has(pod)) continue;
        const other = seen.get(ip);
        if (other && other !== pod.name) {
          const text = `${ip} on ${other} and ${pod.name} (${dev}) at ${at()} ms`;
          if (!report.duplicates.includes(text)) report.duplicates.push(text);
        }
        seen.set(ip, pod.name);
      }
    }
    if (Date.now() < outageUntil) return;
    let findings: Finding[];
    try {
      findings = clusterFindings(await readClusterState(c.client));
    } catch {
      return; // the API is away (the outage, a restart of a real server)
    }
    const ours = (f: Finding) =>
      c.nodes.some((n) => f.message.includes(n.name)) || f.message.includes(pool.name);
    for (
      const f of findings.filter((f) => ours(f) && (f.kind === "duplicate" || f.kind === "overlap"))
    ) {
      const text = `${f.kind}: ${f.message}`;
      if (!report.integrityFindings.includes(text)) report.integrityFindings.push(text);
    }
    if (!nad) return;
    const state = await readClusterState(c.client).catch(() => undefined);
    if (!state) return;
    const mine = (state.networkBlocks ?? []).filter((b) =>
      b.spec?.network.startsWith(`${nad.space}/`)
    );
    for (
      const f of networkFindings({ ...state, networkBlocks: mine }).filter((f) =>
        f.kind === "duplicate" || f.kind === "overlap"
      )
    ) {
      const text = `${f.kind}: ${f.message}`;
      if (!report.integrityFindings.includes(text)) report.integrityFindings.push(text);
    }
  };
  const checker = (async () => {
    while (!done) {
      await check().catch((e) => log(`check failed: ${e}`));
      await sleep(3000);
    }
  })();

  /** Waits until `share` of the pods have started. */
  const progress = async (share: number) => {
    while (!done && next < Math.floor(options.pods * share)) await sleep(50);
  };
  const blocksOf = async () =>
    (await c.client.listAll<IpBlockObject>(IPBLOCKS, {})).items.filter((b) =>
      b.spec?.pool === pool.name || b.spec?.pool === overlapPool
    );
  /** A Node no daemon runs for, off the segment, owning a free block of the pool. */
  const unreachableNode = async () => {
    const taken = new Set((await blocksOf()).map((b) => b.spec!.cidr));
    const pool4 = parseCidr(pool.cidrs[0]);
    const size = 1n << BigInt(32 - options.blockSize);
    // From the pool's end: the daemons claim from their own seeds, rarely up there.
    let cidr = "";
    for (let k = (1n << BigInt(options.blockSize - pool4.prefix)) - 1n; k >= 0n && !cidr; k--) {
      const c4 = formatCidr({
        network: { family: 4, value: pool4.network.value + k * size },
        prefix: options.blockSize,
      });
      if (!taken.has(c4)) cidr = c4;
    }
    const address = `198.18.${Math.floor(Math.random() * 256)}.11`; // never routed
    const name = await c.addNodeObject("far", address);
    await c.client.create<IpBlockObject>(IPBLOCKS, {
      metadata: {
        name: blockName(parseCidr(cidr)),
        labels: { "ferry.dev/node": name, "ferry.dev/pool": pool.name },
      },
      spec: { pool: pool.name, cidr, node: name },
    });
    return { name, address, cidr };
  };
  const underlay = c.nodes[0].address.replace(/\.\d+$/, "");
  let spare = 200;
  const spareAddress = () => `${underlay}.${spare++}`;
  let far: { name: string; address: string; cidr: string } | undefined;
  /** Blocks deleted or re-pointed by hand: their pods are cut off by design. */
  const touched: string[] = [];
  /** One pod per node that stays through the churn, for the reach check after it. */
  const standing: SimPod[] = [];

  const faults = (async () => {
    for (let k = 0; k < options.kills; k++) {
      await progress((k + 1) / (options.kills + 6));
      const node = pick(c.nodes);
      await c.killAndRestart(node);
      fault(`SIGKILL to ${node.name}'s daemon, restarted`);
    }
    await progress(0.3);
    const own = (await blocksOf()).filter((b) => b.spec?.allocations?.length);
    if (own.length) {
      const b = pick(own);
      await c.client.delete(IPBLOCKS, undefined, b.metadata!.name!).catch(() => {});
      touched.push(b.spec!.cidr);
      fault(`block ${b.spec!.cidr} of ${b.spec!.node} deleted by hand`);
    }
    await progress(0.4);
    const owned = (await blocksOf()).filter((b) => b.spec?.allocations?.length);
    if (owned.length && c.nodes.length > 1) {
      const b = pick(owned);
      const to = pick(c.nodes.filter((n) => n.name !== b.spec!.node));
      await c.client.update(
        IPBLOCKS,
        { ...b, spec: { ...b.spec!, node: to.name } } as IpBlockObject,
      )
        .catch(() => {});
      touched.push(b.spec!.cidr);
      fault(`block ${b.spec!.cidr} of ${b.spec!.node} re-pointed by hand to ${to.name}`);
    }
    await progress(0.5);
    const victim = pick(c.nodes);
    await c.startImpostor(victim);
    fault(`a second daemon started with ${victim.name}'s name`);
    await progress(0.52);
    far = await unreachableNode();
    fault(`node ${far.name} at ${far.address}, off the segment, holding block ${far.cidr}`);
    await progress(0.54);
    // A node whose standing pod the reach check covers (not in a block changed by hand).
    const covered = reachable(standing, touched).map((p) => p.node);
    const moved = pick(covered.length ? covered : c.nodes);
    const from = moved.address;
    await c.readdressNode(moved, spareAddress());
    fault(`${moved.name} re-addressed from ${from} to ${moved.address}`);
    await progress(0.55);
    await c.client.create<IpPoolObject>(IPPOOLS, {
      metadata: { name: overlapPool },
      spec: { cidrs: pool.cidrs, blockSize: { ipv4: Math.min(30, options.blockSize + 2) } },
    });
    const mover = pick(c.nodes);
    await c.reconfigure(mover, { ipam: { mode: "pool", pools: [overlapPool, pool.name] } });
    fault(
      `IPPool ${overlapPool} overlapping ${pool.name} created; ${mover.name} draws from it first`,
    );
    if (options.apiOutageSeconds > 0) {
      await progress(0.65);
      fault(`the API gone for ${options.apiOutageSeconds} s`);
      outageUntil = Date.now() + options.apiOutageSeconds * 1000 + 5000;
      await c.apiOutage(options.apiOutageSeconds * 1000);
    }
  })();

  // One standing pod per node, for the reach check after the churn.
  for (const node of c.nodes) {
    standing.push(await c.addPod(node, `reach-${standing.length}`, 60_000));
  }
  const workers = Array.from({ length: options.concurrency }, async () => {
    while (next < options.pods) await cycle(next++);
  });
  await Promise.all(workers);
  await faults;
  report.durationMs = at();
  done = true;
  await checker;
  await check();
  await reachCheck(c, reachable(standing, touched), far, report, log);
  report.reach.excluded = standing.filter((p) => !reachable(standing, touched).includes(p))
    .map((p) => `${p.name} (${p.node.name}, ${p.ip}): its block was changed by hand`);
  for (const pod of standing) {
    await c.removePod(pod);
    await run("ip", "netns", "del", pod.ns.name).catch(() => {});
    await deletePodObject(pod.name);
  }
  // Settling: every pod is deleted; the nodes' loops release what DELs answered while a daemon
  // was down left, and adopted allocations of gone pods.
  const leaks = async () => {
    const blocks = await blocksOf().catch(() => [] as IpBlockObject[]);
    const findings = await readClusterState(c.client).then(clusterFindings, () => [] as Finding[]);
    const nadLeft = nad ? await nadBlocks(c, nad.space).catch(() => []) : [];
    return {
      allocations: [
        ...blocks.flatMap((b) =>
          (b.spec?.allocations ?? []).map((a) => `${a.ip} in ${b.spec!.cidr} (${b.spec!.node})`)
        ),
        ...nadLeft.flatMap((b) =>
          (b.spec?.allocations ?? []).map((a) =>
            `${a.ip} of ${a.namespace}/${a.name} in NAD block ${b.spec!.cidr} (${b.spec!.node})`
          )
        ),
      ],
      records: (await Promise.all(c.nodes.map(attachmentRecords))).flat(),
      findings: findings.filter((f) =>
        f.kind === "leak" || f.kind === "duplicate" || f.kind === "overlap"
      ).filter((f) => c.nodes.some((n) => f.message.includes(n.name))).map((f) =>
        `${f.kind}: ${f.message}`
      ),
    };
  };
  const settle = Date.now() + 90_000;
  report.leaked = await leaks();
  while (
    Date.now() < settle &&
    report.leaked.allocations.length + report.leaked.records.length +
          report.leaked.findings.length > 0
  ) {
    await sleep(1000);
    report.leaked = await leaks();
  }
  await c.client.delete(IPPOOLS, undefined, overlapPool).catch(() => {});
  for (const b of (await blocksOf().catch(() => [])).filter((b) => b.spec?.pool === overlapPool)) {
    await c.client.delete(IPBLOCKS, undefined, b.metadata!.name!).catch(() => {});
  }
  report.ok = report.duplicates.length === 0 && report.integrityFindings.length === 0 &&
    report.reach.failed.length === 0 &&
    report.violations.length === 0 && report.leaked.allocations.length === 0 &&
    report.leaked.records.length === 0 && report.leaked.findings.length === 0;
  return report;
}

/** The standing pods whose addresses lie in no block changed by hand. */
function reachable(standing: SimPod[], touched: string[]): SimPod[] {
  return standing.filter((p) =>
    !touched.some((cidr) => cidrContains(parseCidr(cidr), parseIp(p.ip)))
  );
}

/**
 * Every standing pod reaches the next node's (a ring: the re-addressed node's both ways), and
 * every node masquerades and reports the unreachable node's block unroutable, each within a
 * settling time (the re-addressing and the API's return reach the nodes' watches).
 */
async function reachCheck(
  c: SimCluster,
  standing: SimPod[],
  far: { name: string; cidr: string } | undefined,
  report: ClusterChaosReport,
  log: (line: string) => void,
): Promise<void> {
  const within = async (probe: () => Promise<boolean>, ms = 60_000) => {
    const deadline = Date.now() + ms;
    while (!(await probe().catch(() => false))) {
      if (Date.now() > deadline) return false;
      await sleep(500);
    }
    return true;
  };
  for (const [i, a] of standing.entries()) {
    const b = standing[(i + 1) % standing.length];
    if (a === b) continue;
    report.reach.pairs++;
    report.reach.nodes.push(a.node.name);
    if (!(await within(() => pingOnce(b.ip, a.ns)))) {
      report.reach.failed.push(`${a.name} (${a.node.name}) → ${b.name} (${b.node.name}, ${b.ip})`);
    }
  }
  if (!far) return;
  for (const node of c.nodes) {
    const stats = async () => {
      const r = await unixRequest(
        node.socket,
        "GET",
        STATS_PATH,
        undefined,
        AbortSignal.timeout(2000),
      );
      return (JSON.parse(r.body) as { cluster?: ClusterStats }).cluster;
    };
    const reported = await within(async () => {
      const s = await stats();
      return !!s?.masquerading &&
        s.unroutable.some((u) => u.node === far.name && u.dst === far.cidr && u.refused);
    });
    if (!reported) {
      const s = await stats().catch(() => undefined);
      report.violations.push(
        `${node.name} does not masquerade and report ${far.cidr} of ${far.name} unroutable: ${
          JSON.stringify(s)
        }`,
      );
    }
  }
  log(`reach: ${report.reach.pairs} pairs, ${report.reach.failed.length} failed`);
}

if (import.meta.main) {
  if (!IS_ROOT) {
    console.error("chaos:cluster: needs root (it plugs real network namespaces)");
    Deno.exit(2);
  }
  const flags = parseArgs(Deno.args, {
    string: [
      "nodes",
      "pods",
      "concurrency",
      "block-size",
      "kills",
      "api-outage",
      "kubeconfig",
      "out",
    ],
    boolean: ["nad"],
    negatable: ["nad"],
    default: {
      nad: true,
      nodes: "30",
      pods: "1500",
      concurrency: "30",
      "block-size": "28",
      kills: "10",
      "api-outage": "20",
      out: "bench/results/chaos_cluster.json",
    },
  });
  const report = await runClusterChaos({
    nodes: Number(flags.nodes),
    pods: Number(flags.pods),
    concurrency: Number(flags.concurrency),
    blockSize: Number(flags["block-size"]),
    kills: Number(flags.kills),
    apiOutageSeconds: Number(flags["api-outage"]),
    kubeconfig: flags.kubeconfig,
    nadNetwork: flags.nad,
    log: (line) => console.error(`chaos:cluster: ${line}`),
  });
  const text = JSON.stringify({ date: new Date().toISOString(), ...report }, null, 2);
  console.log(text);
  if (flags.out) await Deno.writeTextFile(flags.out, text + "\n");
  Deno.exit(report.ok ? 0 : 1);
}
