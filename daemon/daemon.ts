/**
 * A running node daemon as its callers see it (the process entrypoint, tests, the demo and the
 * benchmarks): its state, its counters (`GET /v1/stats`) and how it stops. Built by
 * `startDaemon` in `wiring/main.ts`.
 *
 * @module
 */
import type { DaemonConfig } from "./config/config.ts";
import type { InformerStats } from "./k8s/informer.ts";
import type { PolicyStats } from "./policy/policy_enforcer.ts";
import type { MultiPolicyStats } from "./policy/multi_policy_enforcer.ts";
import type { PortSecurityStats } from "./portsec/port_guard.ts";
import type { AddPhase, PhaseSummary } from "./telemetry/phase_stats.ts";
import type { SocketStatus } from "./server/socket_server.ts";
import type { NodeCheckStats } from "./ipam/node_check.ts";
import type { NetnsSweepStats } from "./gc/netns_sweep.ts";
import type { ClusterStats } from "./cluster/controller.ts";
import type { BlockIpamStats } from "./ipam/block_ipam.ts";
import type { NadNetworkIpamStats } from "./ipam/nad_network_ipam.ts";
import type { PodGcStats } from "./gc/pod_gc.ts";
import type { DeadNodeBlocksStats } from "./gc/dead_node_blocks.ts";
import type { Plumber } from "./net/plumber.ts";

/** A running daemon. */
export interface Daemon {
  /** The configuration it runs with. */
  config: DaemonConfig;
  /** Counters, as `GET /v1/stats` shows them. */
  stats(): DaemonStats;
  /** True once it can serve ADD (socket up, first pod list delivered). */
  ready(): boolean;
  /** False while the pod watch cannot be re-established. */
  healthy(): boolean;
  /** `host:port` of `/healthz`, `/readyz` and `/metrics` (`server.httpPort`), when served. */
  httpAddress?: string;
  /** `host:port` of the scrapers' port (`server.metricsPort`), when served. */
  metricsAddress?: string;
  /** Stops it gracefully (in-flight requests finish up to the configured deadline). */
  stop(): Promise<void>;
  /**
   * Resolves once the work of DELs already answered has finished (the kernel confirmed the
   * link's removal, addresses and records released).
   */
  idle(): Promise<void>;
  /** Settles when the server has stopped. */
  finished: Promise<void>;
  /**
   * Resolves, with why, when the daemon must start anew (its node's podCIDRs changed under it);
   * the process stops and exits 1, and its supervisor (the kubelet) starts it again.
   */
  mustRestart: Promise<string>;
}

/** The daemon's counters. */
export interface DaemonStats {
  /** NetworkPolicy: policies known, this node's isolated pods, table writes and failures. */
  policy?: PolicyStats;
  /**
   * MultiNetworkPolicy: policies known, this node's isolated additional interfaces, pod
   * namespaces with a table, writes and failures.
   */
  multiPolicy?: MultiPolicyStats;
  /** Port security: whether it is on, the ports under guard and the frames dropped by kind. */
  portSecurity?: { enabled: boolean } & Partial<PortSecurityStats>;
  /** CNI requests served, by command. */
  cniRequests: Record<string, number>;
  /** The process's memory (`Deno.memoryUsage()`), in bytes. */
  memory: { rss: number; heapTotal: number; heapUsed: number; external: number };
  /** Times the C allocator's free memory was given back after a quiet spell (`idle_trim.ts`). */
  memoryTrims: number;
  /**
   * DELs in progress, including those already answered whose work goes on (the kernel removing
   * the link, then the addresses released: a few milliseconds each).
   */
  finishingDels: number;
  /** API round trips a CNI request waits for: none (the annotation write follows the answer). */
  apiCallsOnCniPath: number;
  /** Attachment annotation writes sent after ADDs' answers, failed after retries, and pending. */
  annotationWrites?: { sent: number; failed: number; pending: number };
  /** All API requests, by method. */
  apiRequests: Record<string, number>;
  /** The pod informer's counters. */
  podWatch?: InformerStats;
  /** Pods known, and ADDs waiting for theirs. */
  registry?: { pods: number; waiting: number };
  /**
   * Where ADDs' time went, per phase over the last 1024 (ms): waiting for the container's turn
   * (and the namespace check), for the pod to reach the watch, plugging, recording, in all.
   */
  addPhases?: Partial<Record<AddPhase, PhaseSummary>>;
  /**
   * Synchronous work inside pod namespaces (in-process netlink): calls and their total ms, time
   * during which the JS thread serves nothing else.
   */
  netnsSync?: { calls: number; ms: number };
  /** Time the JS thread spent in netlink send and recv (the kernel's work for those requests). */
  netlinkSync?: { calls: number; ms: number; maxMs: number };
  /** The socket: connections now, refused at the limit, times it was created again. */
  socket?: SocketStatus;
  /** The default network: its ranges, or why it is not open yet. */
  network?: { waitingFor?: string; ranges: string[] };
  /** The node's own `ipam check` after the last sweep. */
  ipamCheck?: NodeCheckStats;
  /** Standalone: the sweep of attachments whose network namespace is gone. */
  netnsSweep?: NetnsSweepStats;
  /** Whether this daemon holds its node's identity (Kubernetes IPAM modes), and why not. */
  identity?: { id: string; held: boolean; reason?: string };
  /** Routes to other nodes and masquerade. */
  cluster?: ClusterStats;
  /** Nodes known (when a node watch runs). */
  nodes?: number;
  /** Pool IPAM: this node's blocks, claims, writes (`ipam.mode` pool, or auto resolved to it). */
  ipam?: BlockIpamStats;
  /** NAD networks served natively: this node's NetworkBlocks, claims, writes (once open). */
  nadIpam?: NadNetworkIpamStats;
  /**
   * The IP reconcile loop and sweep: released, given up, sweeps run and skipped, queued; in pool
   * mode, whether this daemon holds the reclaim Lease and the dead nodes' blocks it reclaimed.
   */
  gc?: PodGcStats & { deadNodeBlocks?: DeadNodeBlocksStats };
}

/** Collaborators a caller (a test, the demo) may replace. */
export interface DaemonOverrides {
  /** The kernel side; defaults to iproute2 batches. */
  plumber?: Plumber;
  /** How long without a CNI request before memory is trimmed (`idle_trim.ts`'s default). */
  trimQuietMs?: number;
}

/** How long past `shutdownTimeoutSeconds` a stop may take before the process exits regardless. */
export const STOP_MARGIN_SECONDS = 5;

/**
 * What a stop that ran out of time leaves behind, for its last log line: connections still open,
 * DELs still finishing, writes not yet sent.
 */
export function abandonedWork(stats: DaemonStats): string {
  const parts = [
    [stats.socket?.connections ?? 0, "connection(s) still being served"],
    [stats.finishingDels, "DEL(s) still finishing"],
    [stats.annotationWrites?.pending ?? 0, "annotation write(s) not sent"],
    [stats.ipam?.pending ?? 0, "block(s) with allocations not written"],
  ] as const;
  const left = parts.filter(([n]) => n > 0).map(([n, what]) => `${n} ${what}`);
  return left.length ? left.join(", ") : "nothing counted (a step of the stop did not return)";
}
