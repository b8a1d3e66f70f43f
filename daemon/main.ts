/**
 * `deno task daemon`: the node daemon, wired in this one place. Everything else receives its
 * collaborators as parameters.
 *
 * Usage: `deno task daemon [--config FILE] [--socket PATH] [--node-name NAME] [--kubeconfig FILE] [--state-dir DIR] [--sysctl-dir DIR] [--staged-conflist FILE] [--standalone]`
 *
 * @module
 */
import { getLogger, type Logger } from "@logtape/logtape";
import { CNI_ERROR, CniError } from "../lib/cni/errors.ts";
import { parseArgs } from "deno-std/cli/parse_args.js";
import type { Node, Pod } from "kubernetes-types/core/v1.d.ts";
import { type Attachment, AttachmentStore } from "./attachment_store.ts";
import { CniService, type PodSource } from "./cni_service.ts";
import { KubeClient } from "./k8s/client.ts";
import { Informer, type InformerStats } from "./k8s/informer.ts";
import { Watcher } from "./k8s/watcher.ts";
import { AnnotationWriter } from "./k8s/annotation_writer.ts";
import { inClusterConfig, loadKubeconfig } from "./k8s/kubeconfig.ts";
import { NETWORK_ATTACHMENT_DEFINITIONS, NODES, PODS } from "./k8s/resources.ts";
import { CLAIM_LEASE, kubeBlockApi, poolInformers } from "./k8s/pool_api.ts";
import { BlockIpam, type BlockIpamStats } from "./ipam/block_ipam.ts";
import { PoolMap } from "./cluster/pool_map.ts";
import { PodGc, type PodGcStats } from "./gc/pod_gc.ts";
import { FerryMetrics } from "./metrics.ts";
import { IdleTrimmer, mallocTrim } from "./idle_trim.ts";
import { serveHttpPort } from "./http_port.ts";
import { ConflistPublisher } from "./conflist_publisher.ts";
import { policySide } from "./policy/policy_watches.ts";
import type { PolicyEnforcer, PolicyStats } from "./policy/policy_enforcer.ts";
import { NETWORK_STATUS_ANNOTATION } from "./multivif/selections.ts";
import { NadCache, type NadObject } from "./multivif/nad_cache.ts";
import { type MultiVifDriver, NoopDriver, NpwgDriver } from "./multivif/drivers.ts";
import { DeadNodeBlocks, type DeadNodeBlocksStats } from "./gc/dead_node_blocks.ts";
import { LeaderLease } from "./gc/leader_lease.ts";
import { NetnsSweep, type NetnsSweepStats } from "./gc/netns_sweep.ts";
import { NodeCheck, type NodeCheckStats } from "./ipam/node_check.ts";
import { NodeIdentity, nodeLeaseName } from "./cluster/node_identity.ts";
import { kubeLeaseApi } from "./k8s/lease_api.ts";
import { CountingTransport, HttpTransport } from "./k8s/transport.ts";
import { ATTACHMENTS_ANNOTATION, PodRegistry, slimPod } from "./registry.ts";
import { ConfigError, type ConfigOverrides, type DaemonConfig, loadConfig } from "./config.ts";
import { parseCidr } from "./ipam/cidr.ts";
import { defaultRange } from "./ipam/local_pool.ts";
import { DefaultNetwork, type NetworkRange } from "./default_network.ts";
import { ClusterController, type ClusterStats } from "./cluster/controller.ts";
import { NodeMap, slimNode, type Vtep, VTEP_ANNOTATION } from "./cluster/nodes.ts";
import { IpVxlanEntries, VxlanDevice } from "./cluster/vxlan.ts";
import { NetlinkVxlanEntries } from "./cluster/netlink_vxlan_entries.ts";
import { IpRouteTable } from "./cluster/route_table.ts";
import { NetlinkRouteTable } from "./cluster/netlink_route_table.ts";
import { NftRunner } from "./cluster/masquerade.ts";
import { setupLogging, teardownLogging } from "./log.ts";
import { DelegatedDriver } from "./drivers/delegated.ts";
import { stopRunningPlugins } from "./net/delegate.ts";
import { SublinkDriver } from "./drivers/sublink.ts";
import { NadBridgeDriver } from "./drivers/nad_bridge.ts";
import { IpPlumber } from "./net/ip_plumber.ts";
import { SpawningIpRunner } from "./net/ip_runner.ts";
import { Libc } from "./net/netlink/libc.ts";
import { applyNice, processThreads } from "./cpu_priority.ts";
import { NetlinkPlumber } from "./net/netlink/netlink_plumber.ts";
import type { Plumber } from "./net/plumber.ts";
import { NetnsGuard } from "./net/netns_guard.ts";
import { type AddPhase, PhaseStats, type PhaseSummary } from "./phase_stats.ts";
import { createRouter, protocolErrorReply } from "./router.ts";
import {
  claimSocketPath,
  serveOnSocket,
  type SocketServer,
  type SocketStatus,
} from "./socket_server.ts";

/**
 * How long the node identity Lease lasts without renewal: a daemon whose node's state was lost
 * waits this long after the last one stopped before it takes the node over.
 */
export const NODE_IDENTITY_LEASE_MS = 60_000;

/**
 * How often a standalone daemon looks for attachments whose network namespace is gone (also once
 * at start): a DEL sent while it was down is made good within this.
 */
export const STANDALONE_SWEEP_MS = 5_000;

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

/** The Kubernetes side, wired: API client, pod informer feeding the registry, the annotation write. */
interface KubeSide {
  pods: PodSource;
  /** The cluster's nodes, when a node watch runs (IPAM other than local, or routing). */
  nodes?: NodeMap;
  /** The IP pools and blocks, fed by their watches (`ipam.mode` pool or auto). */
  pools?: PoolMap;
  /**
   * The NetworkAttachmentDefinitions, from a watch of all namespaces started when a pod first
   * selects one (a cluster without the NAD CRD never needs it).
   */
  nads: { cache: NadCache; watch(): void };
  /** Starts and stops the pool watches (`ipam.mode` pool or auto). */
  poolWatch?: { start(): void; stop(): Promise<void> };
  /** NetworkPolicy on this node's pods (`policy.enabled`). */
  policy?: PolicyEnforcer;
  /** The API, for the pool IPAM's block writes. */
  client: KubeClient;
  /** Writes this node's VXLAN endpoint into its Node's annotations. */
  publishVtep(vtep: Vtep): Promise<void>;
  watcher: Watcher;
  transport: CountingTransport;
  annotations: AnnotationWriter;
  close(): Promise<void>;
}

async function connectKube(
  config: DaemonConfig,
  store: AttachmentStore,
  observeApi?: (method: string, ms: number) => void,
): Promise<KubeSide> {
  const conn = config.kubeconfig
    ? await loadKubeconfig(config.kubeconfig, { allowInsecureTls: config.allowInsecureTls })
    : await inClusterConfig();
  const http = new HttpTransport(conn, {
    requestTimeoutMs: config.apiRequestTimeoutSeconds * 1000,
  });
  const transport = new CountingTransport(http, observeApi);
  const kube = new KubeClient(transport);
  const registry = new PodRegistry();
  const watchOptions = {
    watchTimeoutSeconds: config.watch.timeoutSeconds,
    unhealthyAfterMs: config.watch.unhealthyAfterSeconds * 1000,
    resyncMs: config.watch.resyncSeconds * 1000,
    requestTimeoutMs: config.watch.requestTimeoutSeconds * 1000,
  };
  // The pod watch asks for metadata only (what the registry uses; a pod's spec and status, which
  // the kubelet rewrites several times as the pod starts, would only be decoded and dropped), and
  // keeps only what the registry reads of it. Its first list comes from the API server's watch
  // cache (every daemon of a large cluster starting at once must not each make etcd read all
  // pods); the IP reconcile loop asks the server before acting on a pod's absence.
  const informer = new Informer<Pod>(
    kube,
    PODS,
    { fieldSelector: `spec.nodeName=${config.nodeName}`, metadataOnly: true },
    { upsert: (p) => registry.upsert(p), remove: (p) => registry.remove(p) },
    getLogger(["ferry", "watch"]),
    { ...watchOptions, transform: slimPod, firstListFromCache: true },
  );
  const watcher = new Watcher();
  watcher.add("pods", informer);
  let nodes: NodeMap | undefined;
  if (config.ipam.mode !== "local" || config.routing.mode !== "none") {
    const map = nodes = new NodeMap();
    watcher.add(
      "nodes",
      new Informer<Node>(
        kube,
        NODES,
        {},
        { upsert: (n) => map.upsert(n), remove: (n) => map.remove(n) },
        getLogger(["ferry", "watch"]),
        // First list from the watch cache too: a node's absence is confirmed with the server
        // before its blocks are reclaimed, and routes follow the watch.
        { ...watchOptions, transform: slimNode, firstListFromCache: true },
      ),
    );
  }
  // Pool IPAM's watches: from the start in pool mode; in auto mode only once the node turns out
  // to have no podCIDRs (a cluster with podCIDRs need not have Ferry's CRDs at all).
  let pools: PoolMap | undefined;
  let poolWatch: KubeSide["poolWatch"];
  if (config.ipam.mode === "pool" || config.ipam.mode === "auto") {
    const map = pools = new PoolMap();
    poolWatch = {
      start() {
        if (watcher.has("ippools")) return;
        const { informers } = poolInformers(kube, getLogger(["ferry", "watch"]), watchOptions, map);
        watcher.add("ippools", informers[0]);
        watcher.add("ipblocks", informers[1]);
      },
      async stop() {
        await watcher.remove("ippools");
        await watcher.remove("ipblocks");
      },
    };
    if (config.ipam.mode === "pool") poolWatch.start();
  }
  const policy = config.policy.enabled
    ? policySide({
      kube,
      watcher,
      watchOptions,
      nodeName: config.nodeName,
      table: config.policy.table,
      nft: new NftRunner(),
      logger: getLogger(["ferry", "policy"]),
    })
    : undefined;
  watcher.start();
  policy?.start();
  // One merge patch per ADD carries both of Ferry's annotations (the value is their JSON).
  const annotations = new AnnotationWriter(
    (pod, value) =>
      kube.patchMerge(PODS, pod.namespace, pod.name, {
        // The UID makes the write a precondition on the pod's identity: the server refuses it
        // (422) when a new pod of the same name has replaced the one it was meant for.
        metadata: { ...(pod.uid ? { uid: pod.uid } : {}), annotations: JSON.parse(value) },
      }, { metadataOnly: true }).then(() => {}),
    getLogger(["ferry", "annotations"]),
    // A write is retried until it lands, unless the watch saw its pod deleted meanwhile (a retry
    // must not land on a new pod of the same name).
    { wanted: (pod) => registry.get(pod.namespace, pod.name)?.uid === pod.uid },
  );
  const nadCache = new NadCache();
  let nadInformer: Informer<NadObject> | undefined;
  const nads = {
    cache: nadCache,
    watch() {
      nadInformer ??= new Informer<NadObject>(
        kube,
        NETWORK_ATTACHMENT_DEFINITIONS,
        {},
        { upsert: (n) => nadCache.upsert(n), remove: (n) => nadCache.remove(n) },
        getLogger(["ferry", "watch"]),
        watchOptions,
      );
      nadInformer.start();
    },
  };
  const pods: PodSource = {
    event(pod, type, reason, message) {
      kube.createEvent(
        { kind: "Pod", apiVersion: "v1", namespace: pod.namespace, name: pod.name, uid: pod.uid },
        { type, reason, message, component: "ferry", host: config.nodeName },
      ).catch(() => {});
    },
    registry,
    waitMs: config.podWaitSeconds * 1000,
    annotate(pod, record) {
      annotations.schedule(pod, () => {
        const mine = store.ofContainer(record.containerId);
        return JSON.stringify({
          [ATTACHMENTS_ANNOTATION]: attachmentsAnnotation(record.containerId, mine),
          [NETWORK_STATUS_ANNOTATION]: networkStatus(record.containerId, mine),
        });
      });
    },
  };
  return {
    pods,
    nodes,
    pools,
    nads,
    poolWatch,
    policy,
    client: kube,
    async publishVtep(vtep) {
      await kube.patchMerge(NODES, undefined, config.nodeName, {
        metadata: { annotations: { [VTEP_ANNOTATION]: JSON.stringify(vtep) } },
      }, { metadataOnly: true });
    },
    watcher,
    transport,
    annotations,
    async close() {
      // What ADDs scheduled still reaches the API, unless it is unreachable for long.
      await annotations.flush(AbortSignal.timeout(5000));
      // No more retries; a write still in flight ends with the client below.
      void annotations.close();
      await policy?.close();
      await watcher.stop();
      await nadInformer?.stop();
      http.close();
    },
  };
}

/**
 * The NPWG `network-status` of a container: the default network's interface first (`default:
 * true`), then every additional one in the order it was plugged; addresses without prefix, the
 * pod-side MAC, DNS when a plugin gave it.
 */
export function networkStatus(containerId: string, all: Attachment[]): string {
  const mine = all.filter((a) => a.containerId === containerId);
  const ordered = [
    ...mine.filter((a) => !a.parent),
    ...mine.filter((a) => a.parent).sort((a, b) => a.createdAt.localeCompare(b.createdAt)),
  ];
  return JSON.stringify(ordered.map((a) => {
    const entry: Record<string, unknown> = {
      name: a.network,
      interface: a.ifname,
      ips: a.result.ips?.map((ip) => ip.address.split("/")[0]) ?? [],
    };
    const mac = a.result.interfaces?.find((i) => i.name === a.ifname && i.sandbox)?.mac;
    if (mac) entry.mac = mac;
    if (!a.parent && ((a.driver ?? "bridge") === "bridge" || a.defaultNetwork)) {
      entry.default = true;
    }
    const dns = a.result.dns;
    if (dns && Object.keys(dns).length) entry.dns = dns;
    return entry;
  }));
}

/** The value of a pod's attachments annotation: its container and every interface plugged for it. */
export function attachmentsAnnotation(containerId: string, all: Attachment[]): string {
  const interfaces = all.filter((a) => a.containerId === containerId).map((a) => ({
    ifname: a.ifname,
    network: a.network,
    hostIfname: a.hostIfname,
    mac: a.result.interfaces?.find((i) => i.name === a.ifname)?.mac,
    ips: a.result.ips?.map((ip) => ip.address) ?? [],
  }));
  return JSON.stringify({ containerId, interfaces });
}

/**
 * Starts a daemon with `config`: opens its state, connects to Kubernetes (unless standalone),
 * claims the socket, serves.
 *
 * @example
 * ```ts
 * const daemon = await startDaemon(resolveConfig(undefined, { socket: "/tmp/ferry.sock", standalone: true }));
 * await daemon.stop();
 * ```
 */
export async function startDaemon(
  config: DaemonConfig,
  overrides: DaemonOverrides = {},
): Promise<Daemon> {
  const logger = getLogger(["ferry", "daemon"]);
  const local = config.ipam.mode === "local" ? localRanges(config) : undefined;
  const store = await AttachmentStore.open(`${config.stateDir}/attachments`);
  const ip = new SpawningIpRunner(config.sysctlDir);
  const libc = openLibc(config, logger);
  const iproute2 = new IpPlumber(ip, {
    forwarding: config.network.forwarding,
    sysctlDir: config.sysctlDir,
  });
  const plumber: Plumber = overrides.plumber ??
    (libc ? new NetlinkPlumber(libc, iproute2, config.sysctlDir) : iproute2);
  const netns = await NetnsGuard.forThisProcess();
  const network = new DefaultNetwork(
    {
      plumber,
      bridge: config.network.bridge,
      mtu: config.network.mtu,
      stateDir: config.stateDir,
      store,
      logger,
      reuseDelayMs: config.ipam.reuseDelaySeconds * 1000,
    },
    `node ${config.nodeName} has no spec.podCIDRs yet (ipam.mode kubernetes)`,
  );
  const closePlumber = () => {
    if (!overrides.plumber) plumber.close?.();
  };
  let kube: KubeSide | undefined;
  let cluster: ClusterController | undefined;
  let ipam: BlockIpam | undefined;
  let identity: NodeIdentity | undefined;
  /** Settles when the daemon cannot go on as it is (its node's ranges changed under it). */
  const fatal = Promise.withResolvers<string>();
  // Sources are read at scrape time, once everything below exists.
  const metrics = new FerryMetrics({
    pods: () => kube?.pods.registry.size ?? 0,
    watches: () => kube?.watcher.stats() ?? {},
    apiRequests: () => ({ ...(kube?.transport.outcomes ?? {}) }),
    addresses: () => network.usage(),
    attachments: () => {
      const by: Record<string, number> = {};
      for (const a of store.list()) by[a.network] = (by[a.network] ?? 0) + 1;
      return by;
    },
    gc: () => gc?.stats() ?? { released: 0, failed: 0, sweeps: 0 },
    ipamCheck: () => nodeCheck?.stats() ?? { conflicts: 0, leaked: 0 },
    policyRules: () => kube?.policy?.ruleCounts() ?? [],
  });
  try {
    // The socket first: a second daemon for the same node stops here, before it touches the
    // bridge or sweeps links that the running one may be plugging.
    await claimSocketPath(config.socket);
    if (local) await network.open(local);
    kube = config.standalone
      ? undefined
      : await connectKube(config, store, (method, ms) => metrics.apiRequest(method, ms));
    const k = kube;
    // Every mode that takes the node's ranges from the cluster: one daemon per node name.
    identity = kube && config.ipam.mode !== "local"
      ? await NodeIdentity.start({
        nodeName: config.nodeName,
        stateDir: config.stateDir,
        lease: kubeLeaseApi(kube.client, config.gc.leaseNamespace, nodeLeaseName(config.nodeName)),
        leaseName: `${config.gc.leaseNamespace}/${nodeLeaseName(config.nodeName)}`,
        durationMs: NODE_IDENTITY_LEASE_MS,
        onChange: (id) => {
          network.holdBack(id.reason, "identity");
          cluster?.kick();
        },
        logger: getLogger(["ferry", "daemon"]),
      })
      : undefined;
    cluster = new ClusterController({
      identity,
      nodesSynced: k ? () => k.watcher.synced : undefined,
      rangesChanged: (why) => fatal.resolve(why),
      poolEvent: k
        ? (pool, type, reason, message) =>
          void k.client.createEvent(
            {
              kind: "IPPool",
              apiVersion: "ferry.dev/v1",
              name: pool.metadata?.name ?? "",
              uid: pool.metadata?.uid,
            },
            { type, reason, message, component: "ferry", host: config.nodeName },
          ).catch(() => {})
        : undefined,
      config,
      network,
      nodes: kube?.nodes,
      pools: kube?.pools,
      poolWatch: kube?.poolWatch,
      openPool: k?.pools
        ? async (mtu) => {
          ipam = await BlockIpam.open({
            nodeName: config.nodeName,
            poolNames: config.ipam.pools,
            api: kubeBlockApi(k.client, {
              namespace: config.gc.leaseNamespace,
              name: CLAIM_LEASE.name,
            }),
            view: k.pools!,
            stateDir: config.stateDir,
            gateways: {
              add: (cidr) =>
                plumber.ensureBridge({ name: config.network.bridge, mtu, gateways: [cidr] }),
              remove: (cidr) => plumber.removeBridgeAddress(config.network.bridge, cidr),
            },
            podOf: (owner) => store.get(owner)?.pod,
            releaseAfterMs: config.ipam.blockReleaseSeconds * 1000,
            reuseDelayMs: config.ipam.reuseDelaySeconds * 1000,
            logger: getLogger(["ferry", "ipam"]),
          });
          return ipam.allocators();
        }
        : undefined,
      routes: libc ? new NetlinkRouteTable(libc) : new IpRouteTable(ip),
      nft: new NftRunner(),
      vxlan: config.routing.mode === "vxlan"
        ? new VxlanDevice(
          ip,
          config.routing.vxlan,
          libc ? new NetlinkVxlanEntries(libc) : new IpVxlanEntries(ip),
        )
        : undefined,
      publishVtep: kube?.publishVtep,
      logger: getLogger(["ferry", "cluster"]),
    });
    cluster.start();
  } catch (e) {
    identity?.stop();
    closePlumber();
    throw e;
  }
  const pluginTimeoutMs = config.pluginTimeoutSeconds * 1000;
  let serving = false;
  // Ready: the socket serves, the first pod list is in, and the pod watch is not failing past
  // its deadline (then new pods cannot be seen, so ADD cannot be served).
  const ready = () =>
    serving && !network.waitingFor && (kube ? kube.watcher.synced && kube.watcher.healthy : true);
  const healthy = () => kube?.watcher.healthy ?? true;
  const cniRequests: Record<string, number> = {};
  const trim = mallocTrim();
  const trimmer = trim ? new IdleTrimmer(trim, overrides.trimQuietMs) : undefined;
  const phases = new PhaseStats(1024, (phase, ms) => metrics.phase(phase, ms));
  const service = new CniService({
    phases,
    network,
    networkWaitMs: config.podWaitSeconds * 1000,
    drivers: {
      macvlan: new SublinkDriver("macvlan", plumber, pluginTimeoutMs),
      ipvlan: new SublinkDriver("ipvlan", plumber, pluginTimeoutMs),
      delegate: new DelegatedDriver(pluginTimeoutMs, plumber),
      "nad-bridge": new NadBridgeDriver(plumber, pluginTimeoutMs),
    },
    store,
    netns,
    isReady: ready,
    logger: getLogger(["ferry", "cni"]),
    pods: kube?.pods,
    policy: kube?.policy,
    multiVif: kube
      ? {
        ...multiVif(config, kube.nads, () => [
          ...network.subnets(),
          ...(kube!.pools?.poolCidrs() ?? []),
          ...(kube!.nodes?.list().flatMap((n) => n.podCIDRs) ?? []),
          ...(config.ipam.mode === "local"
            ? [config.network.subnet, ...(config.network.subnet6 ? [config.network.subnet6] : [])]
            : []),
        ]),
        // default-route: the pod's default route of that family, moved to `ifname`.
        setDefaultRoute: async (netns: string, ifname: string, gateway: string) => {
          const family = gateway.includes(":") ? 6 : 4;
          try {
            await ip.batch(["route flush exact default"], { netns, family });
            await ip.batch([`route add default via ${gateway} dev ${ifname}`], { netns, family });
          } catch (e) {
            throw new CniError(
              CNI_ERROR.IO_FAILURE,
              `cannot move the default route to ${ifname} via ${gateway}`,
              String(e),
            );
          }
        },
      }
      : undefined,
  });
  // The node's own `ipam check`, after every sweep of the loops below.
  const nodeCheck = new NodeCheck({
    records: () => store.list(),
    allocations: () => network.allocations(),
    ranges: () => network.subnets(),
    event: kube
      ? (pod, reason, message) =>
        void kube!.client.createEvent(
          { kind: "Pod", apiVersion: "v1", namespace: pod.namespace, name: pod.name, uid: pod.uid },
          { type: "Warning", reason, message, component: "ferry", host: config.nodeName },
        ).catch(() => {})
      : undefined,
    logger: getLogger(["ferry", "ipam"]),
  });
  const afterSweep = () => {
    nodeCheck.run();
    // Adopted allocations of pods gone from the server (asked of its storage, not the cache).
    const client = kube?.client;
    if (client && ipam) {
      void ipam.releaseAdoptedOfGonePods(async (pod) => {
        const found = await client.find<Pod>(PODS, pod.namespace, pod.name, {
          metadataOnly: true,
        });
        // Gone: no pod of that name, or another pod of it (a new UID).
        return !found || (!!pod.uid && found.metadata?.uid !== pod.uid);
      }).catch((e) =>
        logger.warn("releasing adopted allocations failed: {error}", { error: String(e) })
      );
    }
  };
  // The IP reconcile loop and sweep: only with Kubernetes (it needs the pod cache).
  const k = kube;
  const gc = k
    ? new PodGc({
      store,
      registry: k.pods.registry,
      synced: () => k.watcher.synced && k.watcher.healthy,
      release: (key, stale) => service.releaseStale(key, stale),
      sweepOrphans: (seen, graceMs) => service.sweepOrphans(seen, graceMs),
      netnsGone: async (path) => (await netns.classify(path)) === "gone",
      // A read from the server's storage (no resourceVersion): the cache's first list may lag it.
      podUid: async (pod) =>
        (await k.client.find<Pod>(PODS, pod.namespace, pod.name, { metadataOnly: true }))
          ?.metadata?.uid,
      event: async (pod, type, reason, message) => {
        await k.client.createEvent(
          { kind: "Pod", apiVersion: "v1", namespace: pod.namespace, name: pod.name, uid: pod.uid },
          { type, reason, message, component: "ferry", host: config.nodeName },
        );
      },
      afterSweep,
      graceMs: config.gc.graceSeconds * 1000,
      intervalMs: config.gc.intervalSeconds * 1000,
      maxRetries: config.gc.maxRetries,
      logger: getLogger(["ferry", "gc"]),
    })
    : undefined;
  if (gc && k) {
    k.pods.registry.onRemove((pod) => gc.podDeleted(pod));
    gc.start();
  }
  // Standalone: no pod cache, so the namespace alone tells an attachment is gone.
  const netnsSweep = k ? undefined : new NetnsSweep({
    store,
    netnsGone: async (path) => (await netns.classify(path)) === "gone",
    release: (key, stale) => service.releaseStale(key, stale),
    open: () => !!network.current,
    intervalMs: STANDALONE_SWEEP_MS,
    afterSweep,
    logger: getLogger(["ferry", "gc"]),
  });
  netnsSweep?.start();
  // Pool IPAM: one daemon at a time (the Lease holder) reclaims the blocks of deleted nodes.
  const pools = k?.pools;
  const reclaimer = k && pools
    ? new DeadNodeBlocks({
      lease: new LeaderLease(
        kubeLeaseApi(k.client, config.gc.leaseNamespace, "ferry-ipam-reclaim"),
        config.nodeName,
        3 * config.gc.reclaimIntervalSeconds * 1000,
      ),
      pools,
      nodeKnown: (name) => !!k.nodes?.get(name),
      nodesSynced: () => k.watcher.synced,
      nodeExists: async (name) =>
        (await k.client.find(NODES, undefined, name, { metadataOnly: true })) !== undefined,
      api: kubeBlockApi(k.client),
      intervalMs: config.gc.reclaimIntervalSeconds * 1000,
      logger: getLogger(["ferry", "gc"]),
    })
    : undefined;
  reclaimer?.start();
  let server: SocketServer | undefined;
  const stats = (): DaemonStats => ({
    cniRequests: { ...cniRequests },
    memory: Deno.memoryUsage(),
    memoryTrims: trimmer?.trims ?? 0,
    finishingDels: service.finishingDels,
    apiCallsOnCniPath: 0,
    annotationWrites: kube
      ? {
        sent: kube.annotations.writes,
        failed: kube.annotations.failures,
        pending: kube.annotations.pending,
      }
      : undefined,
    apiRequests: { ...(kube?.transport.counts ?? {}) },
    podWatch: kube?.watcher.stats().pods,
    gc: gc ? { ...gc.stats(), deadNodeBlocks: reclaimer?.stats() } : undefined,
    netnsSweep: netnsSweep?.stats(),
    policy: kube?.policy?.stats(),
    ipamCheck: nodeCheck.stats(),
    registry: kube
      ? { pods: kube.pods.registry.size, waiting: kube.pods.registry.waiting }
      : undefined,
    socket: server?.status(),
    addPhases: phases.summary(),
    netnsSync: libc
      ? { calls: libc.netnsTime.calls, ms: Math.round(libc.netnsTime.ms * 10) / 10 }
      : undefined,
    netlinkSync: libc
      ? {
        calls: libc.netlinkTime.calls,
        ms: Math.round(libc.netlinkTime.ms * 100) / 100,
        maxMs: Math.round(libc.netlinkTime.maxMs * 100) / 100,
      }
      : undefined,
    network: { waitingFor: network.waitingFor, ranges: network.subnets() },
    identity: identity
      ? { id: identity.id, held: identity.held, reason: identity.reason }
      : undefined,
    cluster: cluster?.stats(),
    nodes: kube?.nodes?.size,
    ipam: ipam?.stats(),
  });
  const router = createRouter({
    handle: async (req, signal, undelivered) => {
      cniRequests[req.command] = (cniRequests[req.command] ?? 0) + 1;
      const started = performance.now();
      try {
        const result = await service.handle(req, signal, undelivered);
        metrics.request(req.command, 0, performance.now() - started);
        return result;
      } catch (e) {
        const code = e instanceof CniError ? e.code : CNI_ERROR.INTERNAL;
        metrics.request(req.command, code, performance.now() - started);
        throw e;
      } finally {
        trimmer?.touch();
      }
    },
    isHealthy: healthy,
    isReady: ready,
    healthNote: () => {
      const s = server?.status();
      return s?.lastRecreated
        ? `socket created again ${s.recreated} time(s); last at ${s.lastRecreated.at}: found ${s.lastRecreated.found}`
        : undefined;
    },
    stats,
    maxRequestBytes: config.maxRequestBytes,
    logger: getLogger(["ferry", "http"]),
  });
  try {
    server = await serveOnSocket(config.socket, router, {
      readTimeoutMs: config.server.readTimeoutSeconds * 1000,
      writeTimeoutMs: config.server.writeTimeoutSeconds * 1000,
      maxConnections: config.server.maxConnections,
      maxBodyBytes: config.maxRequestBytes,
      maxHeaderBytes: 16 * 1024,
      reject: protocolErrorReply,
      logger: getLogger(["ferry", "http"]),
    });
  } catch (e) {
    cluster.stop();
    identity?.stop();
    await kube?.close();
    closePlumber();
    throw e;
  }
  serving = true;
  // The TCP ports are for probes and scrapes; the CNI socket serves whether or not they can be
  // bound. The scrapers' port is a listener of its own, so that clients of the node's address
  // filling its connections never delay the kubelet's probes on localhost.
  const openPort = (host: string, port: number, what: string) => {
    if (port < 0) return undefined;
    try {
      return serveHttpPort(host, port, {
        healthy,
        ready,
        metrics: () => Promise.resolve({ text: metrics.text(), contentType: metrics.contentType }),
      }, {
        readTimeoutMs: config.server.readTimeoutSeconds * 1000,
        writeTimeoutMs: config.server.writeTimeoutSeconds * 1000,
        maxConnections: config.server.maxConnections,
        logger: getLogger(["ferry", "http"]),
      });
    } catch (e) {
      logger.error("{what} are not served: {host}:{port}: {error}", {
        what,
        host,
        port,
        error: e instanceof Error ? e.message : String(e),
      });
    }
  };
  const httpPort = openPort(config.server.httpHost, config.server.httpPort, "probes and metrics");
  const metricsPort = openPort(
    config.server.metricsHost,
    config.server.metricsPort,
    "metrics for scrapers",
  );
  const conflist = config.stagedConflist
    ? new ConflistPublisher({
      staged: config.stagedConflist,
      confDir: config.cniConfDir,
      ready,
      logger,
    })
    : undefined;
  conflist?.start();
  logger.info("serving on {socket} for node {node}, ipam {ipam}, routing {routing}, {mode}", {
    socket: config.socket,
    node: config.nodeName,
    ipam: config.ipam.mode,
    routing: config.routing.mode,
    mode: kube ? "watching its pods" : "standalone",
  });
  if (network.waitingFor) logger.warn("not ready: {why}", { why: network.waitingFor });
  if (httpPort) {
    logger.info("probes and metrics on http://{address}", { address: httpPort.address });
  }
  if (metricsPort) {
    logger.info("metrics for scrapers on http://{address}/metrics", {
      address: metricsPort.address,
    });
  }
  return {
    config,
    finished: server.finished,
    stats,
    ready,
    healthy,
    httpAddress: httpPort?.address,
    metricsAddress: metricsPort?.address,
    idle: () => service.idle(),
    mustRestart: fatal.promise,
    async stop() {
      serving = false;
      logger.info("shutting down");
      await Promise.all([httpPort?.close(), metricsPort?.close(), conflist?.close()]);
      await server.shutdown(config.shutdownTimeoutSeconds * 1000);
      // Requests still in a plugin past the shutdown timeout are abandoned, and their plugins
      // ended (each runs in a session of its own: nothing else would end it).
      const plugins = stopRunningPlugins();
      if (plugins) {
        logger.warn(
          "stopped {n} plugin run(s) still going at shutdown; their requests are abandoned",
          {
            n: plugins,
          },
        );
      }
      await service.idle(); // DELs answered before the kernel finished removing their links
      cluster!.stop();
      // Given up, not left to expire: the node's next daemon holds it at once.
      await identity?.release();
      await gc?.close();
      await netnsSweep?.close();
      await reclaimer?.close();
      // Block allocations not yet written reach the API unless it is unreachable for long (the
      // next start would write them anyway: the node's files are the truth).
      await ipam?.flush(AbortSignal.timeout(5000));
      // Not awaited: a write still under way ends when the client below is closed (or the API
      // answers, or its request time limit passes); nothing is sent after it.
      ipam?.close();
      await kube?.close();
      closePlumber();
      trimmer?.stop();
    },
  };
}

/** The enabled multi-VIF drivers (`multiVifDrivers`), built from the table of known ones. */
function multiVif(
  config: DaemonConfig,
  nads: KubeSide["nads"],
  podRanges: () => string[],
): { drivers: MultiVifDriver[]; waitMs: number } {
  const table: Record<DaemonConfig["multiVifDrivers"][number], () => MultiVifDriver> = {
    npwg: () =>
      new NpwgDriver({
        nads: {
          waitFor(namespace: string, name: string, signal: AbortSignal) {
            nads.watch();
            return nads.cache.waitFor(namespace, name, signal);
          },
        },
        allowCrossNamespace: config.multiNetwork.allowCrossNamespace,
        interfacePrefix: config.multiNetwork.interfacePrefix,
        configDir: config.multiNetwork.configDir,
        guard: {
          allowedTypes: config.multiNetwork.allowedTypes,
          devices: [config.network.bridge, config.routing.vxlan.device],
          ranges: podRanges,
          stateDir: config.stateDir,
        },
        readFile: (path) =>
          Deno.readTextFile(path).catch((e) => {
            if (e instanceof Deno.errors.NotFound) return undefined;
            throw e;
          }),
      }),
    noop: () => new NoopDriver(),
  };
  return {
    drivers: config.multiVifDrivers.map((name) => table[name]()),
    waitMs: config.podWaitSeconds * 1000,
  };
}

/**
 * Libc for in-process netlink, when the config asks for it (`plumbing: netlink`) and FFI can be
 * loaded; otherwise undefined, and everything falls back to iproute2 (said once, here).
 */
function openLibc(config: DaemonConfig, logger: Logger): Libc | undefined {
  if (config.network.plumbing !== "netlink") return undefined;
  try {
    return Libc.open();
  } catch (e) {
    logger.warn("in-process netlink unavailable ({error}); plugging and routing with iproute2", {
      error: e instanceof Error ? e.message : String(e),
    });
    return undefined;
  }
}

/**
 * Gives the daemon's threads the configured nice value (see `cpu_priority.ts`); a refusal or a
 * missing FFI leaves the daemon at its start priority, with a warning. Before anything else
 * starts: threads started later inherit it.
 */
function takeCpuPriority(nice: number, logger: Logger): void {
  if (nice === 0) return;
  let reason: string;
  try {
    const libc = Libc.open();
    const { threads, refused } = applyNice(nice, {
      threads: processThreads,
      setNice: (tid, n) => libc.setNice(tid, n),
    });
    if (!refused) {
      logger.info("CPU priority: nice {nice} on {threads} threads", { nice, threads });
      return;
    }
    reason = refused;
  } catch (e) {
    reason = e instanceof Error ? e.message : String(e);
  }
  logger.warn("CPU priority nice {nice} not taken ({reason}); running at the start priority", {
    nice,
    reason,
  });
}

/** The default network's ranges in `local` IPAM mode: `subnet`, and `subnet6` for dual stack. */
function localRanges(config: DaemonConfig): NetworkRange[] {
  const { network } = config;
  let ranges: NetworkRange[];
  try {
    ranges = [
      {
        subnet: network.subnet,
        range: defaultRange(parseCidr(network.subnet), {
          start: network.rangeStart,
          end: network.rangeEnd,
          gateway: network.gateway,
        }),
      },
    ];
    if (network.subnet6) {
      ranges.push({ subnet: network.subnet6, range: defaultRange(parseCidr(network.subnet6)) });
    }
  } catch (e) {
    throw new ConfigError(`invalid network: ${e instanceof Error ? e.message : e}`);
  }
  if (ranges.length === 2) {
    const [a, b] = ranges.map((r) => r.range.subnet.network.family);
    if (a !== 4 || b !== 6) {
      throw new ConfigError("invalid network: subnet must be IPv4 and subnet6 IPv6 for dual stack");
    }
  }
  return ranges;
}

/** Parses the daemon's command line. */
export function parseDaemonArgs(
  args: string[],
): { configFile?: string; overrides: ConfigOverrides } {
  const flags = parseArgs(args, {
    string: [
      "config",
      "socket",
      "node-name",
      "kubeconfig",
      "state-dir",
      "sysctl-dir",
      "staged-conflist",
    ],
    boolean: ["standalone"],
    unknown: (arg: string) => {
      throw new ConfigError(`unknown argument ${arg}`);
    },
  });
  return {
    configFile: flags.config,
    overrides: {
      socket: flags.socket,
      nodeName: flags["node-name"],
      kubeconfig: flags.kubeconfig,
      stateDir: flags["state-dir"],
      sysctlDir: flags["sysctl-dir"],
      stagedConflist: flags["staged-conflist"],
      standalone: flags.standalone ? true : undefined,
    },
  };
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

if (import.meta.main) {
  let daemon: Daemon | undefined;
  let stopping = false;
  const stop = async (code = 0) => {
    if (stopping) return;
    stopping = true;
    if (!daemon) Deno.exit(0);
    const logger = getLogger(["ferry", "daemon"]);
    // Whatever is in flight, the stop ends within its documented bound.
    const boundSeconds = daemon.config.shutdownTimeoutSeconds + STOP_MARGIN_SECONDS;
    const running = daemon;
    const timer = setTimeout(async () => {
      logger.error("stop did not finish within {seconds} s; exiting with {abandoned}", {
        seconds: boundSeconds,
        abandoned: abandonedWork(running.stats()),
      });
      await Promise.race([teardownLogging(), new Promise((r) => setTimeout(r, 500))]);
      Deno.exit(1);
    }, boundSeconds * 1000);
    await daemon.stop();
    clearTimeout(timer);
    await teardownLogging();
    Deno.exit(code);
  };
  // Before anything is served: Deno sets its signal handling up on the first listener, which
  // must not come while clients hold every file descriptor.
  Deno.addSignalListener("SIGTERM", () => stop());
  Deno.addSignalListener("SIGINT", () => stop());
  try {
    const { configFile, overrides } = parseDaemonArgs(Deno.args);
    const config = await loadConfig(configFile, overrides);
    await setupLogging(config.logLevel, config.logFormat);
    takeCpuPriority(config.nice, getLogger(["ferry", "daemon"]));
    daemon = await startDaemon(config);
  } catch (e) {
    console.error(`ferry daemon: ${e instanceof Error ? e.message : e}`);
    Deno.exit(1);
  }
  // SIGHUP re-reads the config and applies its log level (everything else needs a restart).
  Deno.addSignalListener("SIGHUP", async () => {
    try {
      const { configFile, overrides } = parseDaemonArgs(Deno.args);
      const fresh = await loadConfig(configFile, overrides);
      await setupLogging(fresh.logLevel, fresh.logFormat);
      getLogger(["ferry", "daemon"]).info("SIGHUP: log level now {level}", {
        level: fresh.logLevel,
      });
    } catch (e) {
      getLogger(["ferry", "daemon"]).error("SIGHUP: the config could not be re-read: {error}", {
        error: e instanceof Error ? e.message : String(e),
      });
    }
  });
  const restart = await Promise.race([daemon.finished.then(() => undefined), daemon.mustRestart]);
  if (restart) {
    getLogger(["ferry", "daemon"]).error("stopping to start anew: {why}", { why: restart });
    await stop(1);
  }
}
