/**
 * `kubectl ferry sysdump`: one `.tar.gz` with what a maintainer needs. From every node, through
 * its Ferry pod: the daemon's log (and its previous run's after a restart), and what
 * `daemon/tools/node_dump.ts` collects there. From the API: Nodes, Ferry's pods, DaemonSet and
 * ConfigMap, the Events of Ferry's namespace and Ferry's Warning Events elsewhere, IPPools and
 * IPBlocks. Nothing secret: no Secrets, kubeconfigs or tokens are read, and every part, node's
 * and API's, logs included, is redacted by key (`daemon/tools/redact.ts`: passwords, tokens, API
 * keys, credentials, private keys, also inside JSON strings such as a NAD's config). `manifest.json` lists what was collected and what failed.
 *
 * @module
 */
import type { ConfigMap, Event, Node, Pod } from "kubernetes-types/core/v1.d.ts";
import type { KubeClient } from "../daemon/k8s/client.ts";
import { KubeApiError } from "../daemon/k8s/errors.ts";
import {
  CONFIGMAPS,
  DAEMONSETS,
  EVENTS,
  IPBLOCKS,
  IPPOOLS,
  NODES,
  PODS,
} from "../daemon/k8s/resources.ts";
import type { NodeDump } from "../daemon/tools/node_dump.ts";
import { redact, redactText } from "../daemon/tools/redact.ts";
import { FERRY_CONTAINER, FERRY_DAEMONSET, FERRY_SELECTOR, nodeDumpArgv } from "./ferry_pods.ts";
import type { PodExec, PodRef } from "./pod_exec.ts";
import { mapLimit, NODE_CONCURRENCY } from "./map_limit.ts";

/** What {@link collectSysdump} needs. */
export interface SysdumpDeps {
  /** The API, with the operator's credentials. */
  client: KubeClient;
  /** Exec and logs of Ferry's pods. */
  exec: PodExec;
  /** Ferry's namespace. */
  namespace: string;
  /** How long one node's collection may take. */
  execTimeoutMs: number;
  /** Progress lines. */
  progress(line: string): void;
  /** Only these nodes' parts (all when empty). */
  nodes?: string[];
}

/** The manifest of one sysdump. */
export interface SysdumpManifest {
  /** The nodes whose Ferry pod was asked. */
  nodes: string[];
  /** Files collected (paths in the archive, below its top directory). */
  collected: string[];
  /** What could not be collected, and why. */
  failed: { part: string; why: string }[];
  /** What the cluster does not have (a CRD not installed, no DaemonSet of that name). */
  absent: string[];
}

/** A sysdump: its files (path → text) and its manifest. */
export interface Sysdump {
  /** Files by path. */
  files: Map<string, string>;
  /** The manifest. */
  manifest: SysdumpManifest;
}

const json = (v: unknown) => JSON.stringify(redact(v), null, 2) + "\n";

/** An object without its managed fields (noise to a reader). */
function slim<T extends { metadata?: { managedFields?: unknown } }>(o: T): T {
  return o.metadata ? { ...o, metadata: { ...o.metadata, managedFields: undefined } } : o;
}

async function nodePart(d: SysdumpDeps, pod: Pod, dump: Sysdump): Promise<void> {
  const node = pod.spec?.nodeName ?? "";
  const ref: PodRef = {
    namespace: pod.metadata?.namespace ?? "",
    name: pod.metadata?.name ?? "",
    container: FERRY_CONTAINER,
  };
  const dir = `nodes/${node}`;
  const fail = (part: string, why: string) =>
    dump.manifest.failed.push({ part: `${dir}/${part}`, why });
  const restarts = pod.status?.containerStatuses?.find((c) => c.name === FERRY_CONTAINER)
    ?.restartCount ?? 0;
  for (const previous of restarts ? [false, true] : [false]) {
    const name = previous ? "ferry.previous.log" : "ferry.log";
    try {
      const r = await d.exec.logs(ref, previous, AbortSignal.timeout(d.execTimeoutMs));
      if (r.code === 0) dump.files.set(`${dir}/${name}`, redactText(r.stdout));
      else fail(name, r.stderr.trim() || `exit status ${r.code}`);
    } catch (e) {
      fail(name, e instanceof Error ? e.message : String(e));
    }
  }
  try {
    const r = await d.exec.exec(ref, nodeDumpArgv(), AbortSignal.timeout(d.execTimeoutMs));
    if (r.code !== 0) throw new Error(r.stderr.trim().split("\n").at(-1) || `exit ${r.code}`);
    const part = JSON.parse(r.stdout) as NodeDump;
    // Redacted here again, whatever the node's tool did (an older one copied records verbatim).
    for (const [name, text] of Object.entries(part.files)) {
      dump.files.set(`${dir}/${name}`, redactText(text));
    }
    for (const [name, why] of Object.entries(part.failed)) fail(name, why);
  } catch (e) {
    fail("node_dump", e instanceof Error ? e.message : String(e));
  }
}

/**
 * Collects a sysdump: the API's part, then every node's through its Ferry pod (in parallel).
 * A part that cannot be read is named in the manifest; the rest is still collected.
 *
 * @throws {KubeApiError} when not even Ferry's pods can be listed.
 */
export async function collectSysdump(d: SysdumpDeps): Promise<Sysdump> {
  const dump: Sysdump = {
    files: new Map(),
    manifest: { nodes: [], collected: [], failed: [], absent: [] },
  };
  const ns = d.namespace;
  const pods = await d.client.listAll<Pod>(PODS, { namespace: ns, labelSelector: FERRY_SELECTOR });
  dump.files.set("api/ferry-pods.json", json(pods.items.map(slim)));
  const api: [string, () => Promise<unknown>][] = [
    ["api/nodes.json", async () => (await d.client.listAll<Node>(NODES, {})).items.map(slim)],
    ["api/daemonset.json", async () => slim(await d.client.get(DAEMONSETS, ns, FERRY_DAEMONSET))],
    [
      "api/configmap-ferry-config.json",
      () => d.client.get<ConfigMap>(CONFIGMAPS, ns, "ferry-config"),
    ],
    [
      `api/events-${ns}.json`,
      async () => (await d.client.listAll<Event>(EVENTS, { namespace: ns })).items,
    ],
    [
      "api/events-ferry-warnings.json",
      async () =>
        (await d.client.listAll<Event>(EVENTS, { fieldSelector: "type=Warning" })).items.filter((
          e,
        ) => e.source?.component === "ferry" || e.reportingComponent === "ferry"),
    ],
    ["api/ippools.json", async () => (await d.client.listAll(IPPOOLS, {})).items],
    ["api/ipblocks.json", async () => (await d.client.listAll(IPBLOCKS, {})).items],
  ];
  await Promise.all(api.map(async ([path, read]) => {
    try {
      dump.files.set(path, json(await read()));
    } catch (e) {
      if (e instanceof KubeApiError && e.isNotFound) dump.manifest.absent.push(path);
      else {dump.manifest.failed.push({
          part: path,
          why: e instanceof Error ? e.message : String(e),
        });}
    }
  }));
  const wanted = pods.items.filter((p) => !d.nodes?.length || d.nodes.includes(p.spec?.nodeName!));
  const running = wanted.filter((p) => p.spec?.nodeName && p.status?.phase === "Running");
  for (const p of wanted.filter((p) => !running.includes(p))) {
    dump.manifest.failed.push({
      part: `nodes/${p.spec?.nodeName ?? "?"}`,
      why: `Ferry pod ${p.metadata?.name} is ${p.status?.phase ?? "not scheduled"}`,
    });
  }
  dump.manifest.nodes = running.map((p) => p.spec!.nodeName!).sort();
  await mapLimit(running, NODE_CONCURRENCY, async (p) => {
    d.progress(`sysdump: ${p.spec!.nodeName} (${p.metadata?.name}) …`);
    await nodePart(d, p, dump);
    d.progress(`sysdump: ${p.spec!.nodeName} done`);
  });
  dump.manifest.collected = [...dump.files.keys()].sort();
  dump.manifest.failed.sort((a, b) => a.part.localeCompare(b.part));
  dump.manifest.absent.sort();
  return dump;
}

/** The archive's top directory for a dump taken at `ms`: `ferry-sysdump-20260101-120000`. */
export function sysdumpName(ms: number): string {
  const t = new Date(ms).toISOString().replace(/[-:]/g, "").replace("T", "-").slice(0, 15);
  return `ferry-sysdump-${t}`;
}
