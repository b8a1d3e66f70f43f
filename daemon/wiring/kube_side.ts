/**
 * The daemon's Kubernetes side, built from its config: the API client, the watches feeding the
 * pod registry, node map, pools and NetworkPolicy, the NAD cache, Events on pods, and the pod
 * annotations written after each ADD.
 *
 * @module
 */
import { getLogger } from "@logtape/logtape";
import type { Node, Pod } from "kubernetes-types/core/v1.d.ts";
import type { AttachmentStore } from "../records/attachment_store.ts";
import type { PodSource } from "../service/cni_service.ts";
import {
  ATTACHMENTS_ANNOTATION,
  attachmentsAnnotation,
  PodRegistry,
  slimPod,
} from "../records/registry.ts";
import type { DaemonConfig } from "../config/config.ts";
import type { DaemonStats } from "../daemon.ts";
import { NftRunner } from "../cluster/masquerade.ts";
import { NodeMap, slimNode, type Vtep, VTEP_ANNOTATION } from "../cluster/nodes.ts";
import { PoolMap } from "../ipam/pool_map.ts";
import { NETWORK_STATUS_ANNOTATION } from "../multivif/selections.ts";
import { networkStatus } from "../multivif/network_status.ts";
import { NadCache, type NadObject } from "../multivif/nad_cache.ts";
import { policySide } from "../policy/policy_watches.ts";
import type { NflogSys } from "../policy/nflog.ts";
import type { NftSys } from "../policy/nft_netlink.ts";
import { Libc } from "../net/netlink/libc.ts";
import type { PolicyEnforcer } from "../policy/policy_enforcer.ts";
import type { MultiPolicyEnforcer } from "../policy/multi_policy_enforcer.ts";
import { AnnotationWriter } from "../k8s/annotation_writer.ts";
import { KubeClient } from "../k8s/client.ts";
import { Informer } from "../k8s/informer.ts";
import { inClusterConfig, loadKubeconfig } from "../k8s/kubeconfig.ts";
import { poolInformers } from "../ipam/pool_api.ts";
import { NETWORK_ATTACHMENT_DEFINITIONS, NODES, PODS } from "../k8s/resources.ts";
import { CountingTransport, HttpTransport } from "../k8s/transport.ts";
import { Watcher } from "../k8s/watcher.ts";

/**
 * The system calls of NETLINK_NETFILTER (libc; FFI must load): the denied-connection log reads
 * NFLOG with them, the policy table's ADD writes go through them.
 */
function netfilterSys(): NflogSys & NftSys {
  // Opened at the first call: a failure is the reader's to report, not the daemon's start.
  let opened: Libc | undefined;
  const libc = () => opened ??= Libc.open();
  return {
    netfilterSocket: (ms) => libc().netfilterSocket(ms),
    send: (fd, msg) => libc().send(fd, msg),
    recv: (fd, buf) => libc().recv(fd, buf),
    tryRecv: (fd, buf) => libc().tryRecv(fd, buf),
    recvOffThread: (fd, buf) => libc().recvOffThread(fd, buf),
    close: (fd) => libc().close(fd),
  };
}

/** What an Event is about. */
export interface EventSubject {
  /** Its kind (`Pod`, `IPPool`, …). */
  kind: string;
  /** Its API version. */
  apiVersion: string;
  /** Its namespace (none for cluster-scoped objects). */
  namespace?: string;
  /** Its name. */
  name: string;
  /** Its UID, when known. */
  uid?: string;
}

/** A pod as an Event's subject. */
export function podSubject(
  pod: { namespace: string; name: string; uid?: string },
): EventSubject {
  return { kind: "Pod", apiVersion: "v1", namespace: pod.namespace, name: pod.name, uid: pod.uid };
}

/** The Kubernetes side, wired: API client, pod informer feeding the registry, the annotation write. */
export interface KubeSide {
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
  /** MultiNetworkPolicy on this node's pods' additional interfaces (`policy.enabled`). */
  multiPolicy?: MultiPolicyEnforcer;
  /** The API, for the pool IPAM's block writes. */
  client: KubeClient;
  /**
   * Records an Event about `regarding` from this node's Ferry (`kubectl describe` shows it);
   * rejects when the API does.
   */
  event(
    regarding: EventSubject,
    type: "Normal" | "Warning",
    reason: string,
    message: string,
  ): Promise<void>;
  /** Its counters, as `GET /v1/stats` shows them. */
  stats(): Pick<
    DaemonStats,
    | "annotationWrites"
    | "apiRequests"
    | "podWatch"
    | "policy"
    | "multiPolicy"
    | "registry"
    | "nodes"
  >;
  /** Writes this node's VXLAN endpoint into its Node's annotations. */
  publishVtep(vtep: Vtep): Promise<void>;
  watcher: Watcher;
  transport: CountingTransport;
  annotations: AnnotationWriter;
  close(): Promise<void>;
}

/**
 * Connects to the API (the kubeconfig, or the pod's service account) and starts the watches this
 * daemon needs: its node's pods always; every node's when ranges or routes come from the cluster;
 * IP pools and blocks in pool (or auto) mode; NetworkPolicy when enabled; NADs once a pod selects
 * one.
 *
 * @example
 * ```ts
 * const kube = await connectKube(config, store, (method, ms) => metrics.apiRequest(method, ms));
 * await kube.close();
 * ```
 */
export async function connectKube(
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
  const netfilter = netfilterSys();
  const policies = config.policy.enabled
    ? policySide({
      kube,
      watcher,
      watchOptions,
      nodeName: config.nodeName,
      table: config.policy.table,
      nft: new NftRunner(),
      netfilter,
      store,
      labelsOf: (namespace, name) => registry.get(namespace, name)?.labels,
      netnsExists: (path) => Deno.stat(path).then(() => true, () => false),
      deniedLog: config.policy.logDenied
        ? {
          group: config.policy.logGroup,
          perSecond: config.policy.logPerSecond,
          sys: netfilter,
        }
        : undefined,
      logger: getLogger(["ferry", "policy"]),
      refused: (policy, message) => {
        kube.createEvent(policy, {
          type: "Warning",
          reason: "InvalidPolicy",
          message,
          component: "ferry",
          host: config.nodeName,
        }).catch(() => {});
      },
      limits: config.policy.limits,
    })
    : undefined;
  const policy = policies?.enforcer;
  watcher.start();
  policies?.start();
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
  const event: KubeSide["event"] = async (regarding, type, reason, message) => {
    await kube.createEvent(regarding, {
      type,
      reason,
      message,
      component: "ferry",
      host: config.nodeName,
    });
  };
  const pods: PodSource = {
    event(pod, type, reason, message) {
      event(podSubject(pod), type, reason, message).catch(() => {});
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
    multiPolicy: policies?.multi,
    client: kube,
    event,
    stats: () => ({
      annotationWrites: {
        sent: annotations.writes,
        failed: annotations.failures,
        pending: annotations.pending,
      },
      apiRequests: { ...transport.counts },
      podWatch: watcher.stats().pods,
      policy: policy?.stats(),
      multiPolicy: policies?.multi.stats(),
      registry: { pods: registry.size, waiting: registry.waiting },
      nodes: nodes?.size,
    }),
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
      await policies?.close();
      await watcher.stop();
      await nadInformer?.stop();
      http.close();
    },
  };
}
