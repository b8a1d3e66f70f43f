/**
 * `kubectl ferry status`, the judgement: what a node's status holds ({@link NodeStatus}) and
 * {@link nodeStatus}, which finds every problem of one node from its facts. Pure; the facts are
 * gathered by `status_read.ts`, rendered by `status_render.ts`.
 *
 * @module
 */
import type { UnroutableRange } from "../daemon/cluster/unroutable.ts";
import type { Node, Pod } from "kubernetes-types/core/v1.d.ts";
import { cidrContains, parseCidr, parseIp } from "../daemon/ipam/cidr.ts";
import type { NodeReport } from "../daemon/tools/node_report.ts";
import { FERRY_CONTAINER } from "./ferry_pods.ts";

/** Addresses of one of the node's ranges (a podCIDR, or a block in pool mode). */
export interface RangeUse {
  /** The range. */
  cidr: string;
  /** Addresses of the node's running pods in it (from the API). */
  used: number;
  /** Addresses in the range. */
  size: number;
}

/** A Warning Event about the node, its Ferry pod or a pod Ferry reported on. */
export interface WarningEvent {
  /** `Kind namespace/name` of the object. */
  object: string;
  /** The reason. */
  reason: string;
  /** The message. */
  message: string;
  /** How many times. */
  count: number;
  /** When last (RFC 3339). */
  lastSeen?: string;
}

/** One node, as `status` shows it. */
export interface NodeStatus {
  /** Node name. */
  node: string;
  /** No problem found. */
  healthy: boolean;
  /** Why not, one sentence each. */
  problems: string[];
  /** Its Ferry pod. */
  pod?: {
    name: string;
    ready: boolean;
    image: string;
    restarts: number;
    /** Seconds since the container started. */
    uptimeSeconds?: number;
  };
  /** IPAM mode in use (`auto` resolved). */
  ipamMode?: string;
  /** Interfaces plugged (attachment records on the node). */
  podsPlugged?: number;
  /** Address use per range. */
  ranges: RangeUse[];
  /** Routes to the other nodes' pod ranges. */
  routes?: { inPlace: number; expected: number; unroutable: string[] };
  /** The NetworkPolicy table; its last write and last failed write as seconds ago. */
  policy?: {
    policies: number;
    isolatedPods: number;
    writes: number;
    failures: number;
    lastWriteSecondsAgo?: number;
    lastFailureSecondsAgo?: number;
  };
  /** Port security: on or off, ports under guard, frames dropped by kind (absent: not said). */
  portSecurity?: { enabled: boolean; guardedPorts?: number; dropped: Record<string, number> };
  /** The last error the daemon reports. */
  lastError?: string;
  /** Warning Events. */
  warnings: WarningEvent[];
}

/** The whole answer. */
export interface ClusterStatus {
  /** `routing.mode` from Ferry's ConfigMap (unknown when it cannot be read). */
  routing?: string;
  /** Every node, by name. */
  nodes: NodeStatus[];
  /** Names of unhealthy nodes. */
  unhealthy: string[];
}

/** What {@link nodeStatus} judges. */
export interface NodeFacts {
  /** The Node. */
  node: Node;
  /** Its Ferry pod, if any. */
  pod?: Pod;
  /** Its report, or why it could not be read. */
  report?: NodeReport | { error: string };
  /** Routing mode (`none`: no routes expected). */
  routing?: string;
  /** The other nodes' pod ranges this node should route to. */
  otherRanges: number;
  /** The node's pods' addresses (running, not hostNetwork). */
  podAddresses: string[];
  /** Warning Events for the node. */
  warnings: WarningEvent[];
  /** Now (ms since the epoch). */
  now: number;
}

/**
 * One range a node cannot route, as text: `node dst via hop: reason` (a daemon from before the
 * reasons gives text already).
 *
 * @example
 * ```ts
 * unroutableText({ node: "n4", dst: "10.244.4.0/24", via: "198.18.9.11", reason: "ENETUNREACH" });
 * // "n4 10.244.4.0/24 via 198.18.9.11: ENETUNREACH"
 * ```
 */
export function unroutableText(u: string | UnroutableRange): string {
  if (typeof u === "string") return u;
  return `${u.node ? `${u.node} ` : ""}${u.dst}${u.via ? ` via ${u.via}` : ""}: ${u.reason}`;
}

interface StatsView {
  policy?: {
    policies: number;
    isolatedPods: number;
    writes: number;
    failures: number;
    lastWriteAt?: string;
    lastFailureAt?: string;
  };
  portSecurity?: { enabled: boolean; guardedPorts?: number; dropped?: Record<string, number> };
  network?: { waitingFor?: string; ranges: string[] };
  cluster?: {
    routes: number;
    /** Objects from today's daemons (`UnroutableRange`), text from older ones. */
    unroutable: (string | UnroutableRange)[];
    lastError?: string;
    ipamMode?: string;
  };
  ipam?: { blocks: string[]; lost: string[] };
  ipamCheck?: { conflicts: number; leaked: number; findings: string[] };
  identity?: { held: boolean; reason?: string };
  podWatch?: { failures?: number };
  annotationWrites?: { failed: number };
}

function rangeUse(cidr: string, addresses: string[]): RangeUse {
  const range = parseCidr(cidr);
  const bits = range.network.family === 4 ? 32 : 128;
  const used = addresses.filter((a) => {
    try {
      return cidrContains(range, parseIp(a));
    } catch {
      return false;
    }
  }).length;
  return { cidr, used, size: 2 ** (bits - range.prefix) };
}

function podSummary(pod: Pod, now: number): NonNullable<NodeStatus["pod"]> {
  const cs = pod.status?.containerStatuses?.find((c) => c.name === FERRY_CONTAINER);
  const spec = pod.spec?.containers.find((c) => c.name === FERRY_CONTAINER);
  const started = cs?.state?.running?.startedAt;
  return {
    name: pod.metadata?.name ?? "",
    ready: pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ??
      false,
    image: cs?.image ?? spec?.image ?? "",
    restarts: cs?.restartCount ?? 0,
    uptimeSeconds: started
      ? Math.max(0, Math.round((now - Date.parse(started)) / 1000))
      : undefined,
  };
}

/**
 * The policy table's problem, if any: its last write failed (a failure followed by a successful
 * write is over). A daemon from before the write times gives only the counts: then any failure
 * is one.
 *
 * @example
 * ```ts
 * policyWriteProblem({ failures: 1, lastFailureAt: "…:00Z", lastWriteAt: "…:05Z" }); // undefined
 * ```
 */
export function policyWriteProblem(
  p: { failures: number; lastWriteAt?: string; lastFailureAt?: string },
): string | undefined {
  if (!p.failures) return undefined;
  if (p.lastFailureAt === undefined) return `${p.failures} NetworkPolicy table writes failed`;
  const failed = Date.parse(p.lastFailureAt);
  const written = p.lastWriteAt === undefined ? -Infinity : Date.parse(p.lastWriteAt);
  if (written >= failed) return undefined;
  return `the last NetworkPolicy table write failed (at ${p.lastFailureAt}; ` +
    `${p.failures} failed in all)`;
}

/**
 * Judges one node: every problem found, in words an operator can act on.
 *
 * @example
 * ```ts
 * const s = nodeStatus({ node, pod, report, routing: "host-gw", otherRanges: 2, podAddresses: [], warnings: [], now: Date.now() });
 * if (!s.healthy) console.log(s.problems.join("; "));
 * ```
 */
export function nodeStatus(f: NodeFacts): NodeStatus {
  const name = f.node.metadata?.name ?? "";
  const problems: string[] = [];
  const out: NodeStatus = { node: name, healthy: true, problems, ranges: [], warnings: f.warnings };
  if (!f.pod) {
    problems.push("no Ferry pod on this node");
  } else {
    out.pod = podSummary(f.pod, f.now);
    if (!out.pod.ready) problems.push(`Ferry pod ${out.pod.name} is not ready`);
  }
  if (f.report && "error" in f.report) {
    problems.push(`cannot read the daemon's /v1/stats: ${f.report.error}`);
  } else if (f.report) {
    const stats = f.report.stats as StatsView;
    out.podsPlugged = f.report.attachments;
    out.ipamMode = stats.cluster?.ipamMode;
    const ranges = stats.ipam?.blocks?.length ? stats.ipam.blocks : stats.network?.ranges ?? [];
    out.ranges = ranges.map((r) => rangeUse(r, f.podAddresses));
    if (stats.network?.waitingFor) {
      problems.push(`the default network is not open: ${stats.network.waitingFor}`);
    }
    if (stats.cluster) {
      const expected = f.routing === "none" ? 0 : f.otherRanges;
      const unroutable = stats.cluster.unroutable ?? [];
      out.routes = {
        inPlace: stats.cluster.routes,
        expected,
        unroutable: unroutable.map(unroutableText),
      };
      if (stats.cluster.lastError) out.lastError = stats.cluster.lastError;
      if (stats.cluster.routes < expected - unroutable.length) {
        problems.push(
          `${stats.cluster.routes} of ${expected} routes to other nodes' pods in place`,
        );
      }
      // Refused by the kernel (or said by an older daemon, as text) is a problem; what cannot be
      // routed by design (an IPv6 range over the overlay, an endpoint not published yet) is not.
      const refused = unroutable.filter((u) => typeof u === "string" || u.refused);
      if (refused.length) {
        problems.push(`ranges it cannot route to: ${refused.map(unroutableText).join(", ")}`);
      }
      if (stats.cluster.lastError) {
        problems.push(`routes and masquerade: ${stats.cluster.lastError}`);
      }
    }
    if (stats.policy) {
      const { policies, isolatedPods, writes, failures, lastWriteAt, lastFailureAt } = stats.policy;
      const ago = (at?: string) =>
        at && Number.isFinite(Date.parse(at))
          ? Math.max(0, Math.round((f.now - Date.parse(at)) / 1000))
          : undefined;
      out.policy = {
        policies,
        isolatedPods,
        writes,
        failures,
        lastWriteSecondsAgo: ago(lastWriteAt),
        lastFailureSecondsAgo: ago(lastFailureAt),
      };
      const problem = policyWriteProblem(stats.policy);
      if (problem) problems.push(problem);
    }
    if (stats.portSecurity) {
      out.portSecurity = {
        enabled: stats.portSecurity.enabled,
        guardedPorts: stats.portSecurity.guardedPorts,
        dropped: { ...stats.portSecurity.dropped },
      };
    }
    if (stats.identity && !stats.identity.held) {
      problems.push(`does not hold its node's identity: ${stats.identity.reason ?? "unknown"}`);
    }
    if (stats.ipamCheck && (stats.ipamCheck.conflicts || stats.ipamCheck.leaked)) {
      problems.push(`ipam check: ${stats.ipamCheck.findings.slice(0, 3).join("; ")}`);
    }
    if (stats.ipam?.lost?.length) {
      problems.push(`holds addresses in blocks another node owns: ${stats.ipam.lost.join(", ")}`);
    }
  }
  out.healthy = problems.length === 0;
  return out;
}
