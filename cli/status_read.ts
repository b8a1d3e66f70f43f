/**
 * `kubectl ferry status`, the gathering: nodes, Ferry's pods, Warning Events, pods' addresses and
 * Ferry's ConfigMap from the API with the operator's credentials, and each node's report through
 * its Ferry pod with {@link PodExec}; each node is then judged by {@link nodeStatus}.
 *
 * @module
 */
import type { ConfigMap, Event, Node, Pod } from "kubernetes-types/core/v1.d.ts";
import type { KubeClient } from "../daemon/k8s/client.ts";
import { KubeApiError } from "../daemon/k8s/errors.ts";
import { CONFIGMAPS, EVENTS, IPBLOCKS, NODES, PODS } from "../daemon/k8s/resources.ts";
import type { IpBlockObject } from "../daemon/ipam/ip_pools.ts";
import { checkedPod } from "../daemon/tools/ipam_check.ts";
import type { NodeReport } from "../daemon/tools/node_report.ts";
import { FERRY_CONTAINER, FERRY_SELECTOR, nodeReportArgv } from "./ferry_pods.ts";
import { mapLimit, NODE_CONCURRENCY } from "./map_limit.ts";
import type { PodExec } from "./pod_exec.ts";
import { type ClusterStatus, nodeStatus, type WarningEvent } from "./status.ts";

/** What {@link readStatus} needs. */
export interface StatusDeps {
  /** The API, with the operator's credentials. */
  client: KubeClient;
  /** Runs commands in Ferry pods. */
  exec: PodExec;
  /** Ferry's namespace (`kube-system`). */
  namespace: string;
  /** How long one node's exec may take. */
  execTimeoutMs: number;
  /** Now, in ms. */
  now: () => number;
  /** Only these nodes (all when empty). */
  nodes?: string[];
}

async function optional<T>(read: () => Promise<T>, absent: T): Promise<T> {
  try {
    return await read();
  } catch (e) {
    if (e instanceof KubeApiError && (e.isNotFound || e.status === 403)) return absent;
    throw e;
  }
}

/** Reads a node's report through its Ferry pod. */
export async function execNodeReport(
  exec: PodExec,
  pod: Pod,
  timeoutMs: number,
): Promise<NodeReport | { error: string }> {
  const ref = {
    namespace: pod.metadata?.namespace ?? "",
    name: pod.metadata?.name ?? "",
    container: FERRY_CONTAINER,
  };
  try {
    const r = await exec.exec(ref, nodeReportArgv(), AbortSignal.timeout(timeoutMs));
    if (r.code !== 0) {
      return { error: (r.stderr.trim().split("\n").at(-1) ?? "") || `exit status ${r.code}` };
    }
    return JSON.parse(r.stdout) as NodeReport;
  } catch (e) {
    return { error: e instanceof Error ? e.message : String(e) };
  }
}

function warningOf(e: Event): WarningEvent {
  const o = e.involvedObject;
  return {
    object: `${o.kind} ${o.namespace ? `${o.namespace}/` : ""}${o.name}`,
    reason: e.reason ?? "",
    message: e.message ?? "",
    count: e.count ?? 1,
    lastSeen: e.lastTimestamp ?? e.eventTime ?? undefined,
  };
}

/** Ferry's Warning Events for `node`: on the node, on its Ferry pod, or reported by its daemon. */
function warningsFor(events: Event[], node: string, ferryPod?: string): WarningEvent[] {
  return events.filter((e) =>
    (e.involvedObject.kind === "Node" && e.involvedObject.name === node) ||
    (ferryPod && e.involvedObject.kind === "Pod" && e.involvedObject.name === ferryPod) ||
    (e.source?.component === "ferry" && e.source?.host === node) ||
    (e.reportingComponent === "ferry" && e.reportingInstance === node)
  ).map(warningOf);
}

/**
 * Reads the cluster's status: nodes, Ferry pods, Warning Events, pods' addresses and Ferry's
 * ConfigMap from the API, and every node's report through its Ferry pod, in parallel.
 *
 * @throws {KubeApiError} when the nodes or Ferry's pods cannot be listed.
 */
export async function readStatus(d: StatusDeps): Promise<ClusterStatus> {
  const [nodes, ferryPods, pods, events, config, blocks] = await Promise.all([
    d.client.listAll<Node>(NODES, {}),
    d.client.listAll<Pod>(PODS, { namespace: d.namespace, labelSelector: FERRY_SELECTOR }),
    d.client.listAll<Pod>(PODS, {}),
    optional(() => d.client.listAll<Event>(EVENTS, { fieldSelector: "type=Warning" }), {
      items: [],
      resourceVersion: "",
    }),
    optional(() => d.client.get<ConfigMap>(CONFIGMAPS, d.namespace, "ferry-config"), undefined),
    optional(() => d.client.listAll<IpBlockObject>(IPBLOCKS, {}), {
      items: [],
      resourceVersion: "",
    }),
  ]);
  let routing: string | undefined;
  try {
    routing = JSON.parse(config?.data?.["config.json"] ?? "{}").routing?.mode;
  } catch { /* an unreadable config leaves the mode unknown */ }
  const podOf = new Map(
    ferryPods.items.filter((p) => p.spec?.nodeName && !p.metadata?.deletionTimestamp)
      .map((p) => [p.spec!.nodeName!, p]),
  );
  const addressesOn = (node: string) =>
    pods.items.map(checkedPod).filter((p) => p.node === node && !p.hostNetwork && !p.terminated)
      .flatMap((p) => p.ips);
  const rangesOf = (node: Node) => {
    const name = node.metadata?.name;
    const owned = blocks.items.filter((b) => b.spec?.node === name).length;
    return owned || (node.spec?.podCIDRs?.length ?? (node.spec?.podCIDR ? 1 : 0));
  };
  const allRanges = nodes.items.reduce((n, node) => n + rangesOf(node), 0);
  const shown = nodes.items.filter((n) => !d.nodes?.length || d.nodes.includes(n.metadata!.name!));
  const missing = d.nodes?.filter((n) => !nodes.items.some((x) => x.metadata?.name === n)) ?? [];
  if (missing.length) throw new Error(`no such node: ${missing.join(", ")}`);
  const statuses = await mapLimit(shown, NODE_CONCURRENCY, async (node) => {
    const name = node.metadata?.name ?? "";
    const pod = podOf.get(name);
    const report = pod?.status?.phase === "Running"
      ? await execNodeReport(d.exec, pod, d.execTimeoutMs)
      : undefined;
    return nodeStatus({
      node,
      pod,
      report,
      routing,
      otherRanges: allRanges - rangesOf(node),
      podAddresses: addressesOn(name),
      warnings: warningsFor(events.items, name, pod?.metadata?.name),
      now: d.now(),
    });
  });
  statuses.sort((a, b) => a.node.localeCompare(b.node));
  return {
    routing,
    nodes: statuses,
    unhealthy: statuses.filter((s) => !s.healthy).map((s) => s.node),
  };
}
