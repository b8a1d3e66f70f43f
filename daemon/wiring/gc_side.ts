/**
 * The daemon's garbage collection, built from its config: with Kubernetes, the IP reconcile loop
 * and sweep (addresses of pods whose DEL never came) and the reclaim of deleted nodes' blocks
 * (pool IPAM's, NAD networks'); standalone, the sweep of attachments whose network namespace is gone; after every
 * sweep, the node's own `ipam check` and the release of adopted allocations of gone pods.
 *
 * @module
 */
import { getLogger } from "@logtape/logtape";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import type { DaemonConfig } from "../config/config.ts";
import type { BlockIpam } from "../ipam/block_ipam.ts";
import { NodeCheck, type NodeCheckDeps, type NodeCheckStats } from "../ipam/node_check.ts";
import { type KubeSide, podSubject } from "./kube_side.ts";
import { kubeBlockApi } from "../ipam/pool_api.ts";
import { kubeNetworkBlockApi } from "../ipam/network_block_api.ts";
import { kubeLeaseApi } from "../k8s/lease_api.ts";
import { KubeApiError } from "../k8s/errors.ts";
import { NODES, PODS } from "../k8s/resources.ts";
import type { NetnsGuard } from "../net/netns_guard.ts";
import type { AttachmentStore } from "../records/attachment_store.ts";
import type { CniService } from "../service/cni_service.ts";
import type { DefaultNetwork } from "../service/default_network.ts";
import { DeadNodeBlocks, type DeadNodeBlocksStats } from "../gc/dead_node_blocks.ts";
import { LeaderLease } from "../k8s/leader_lease.ts";
import { NetnsSweep, type NetnsSweepStats } from "../gc/netns_sweep.ts";
import { PodGc, type PodGcStats } from "../gc/pod_gc.ts";

/**
 * How often a standalone daemon looks for attachments whose network namespace is gone (also once
 * at start): a DEL sent while it was down is made good within this.
 */
export const STANDALONE_SWEEP_MS = 5_000;

/** What garbage collection is built from. */
export interface GcSideDeps {
  /** The daemon's config. */
  config: DaemonConfig;
  /** The Kubernetes side (none standalone). */
  kube?: KubeSide;
  /** The attachment records. */
  store: AttachmentStore;
  /** The default network: its allocations and ranges. */
  network: DefaultNetwork;
  /** Releases what a gone pod held, and sweeps orphaned links. */
  service: CniService;
  /** Tells a gone network namespace from a live one. */
  netns: NetnsGuard;
  /** Pool IPAM, once open. */
  ipam: () => BlockIpam | undefined;
  /** NAD networks served natively, once open: their adopted allocations of gone pods go too. */
  nadIpam?: () => Promise<Pick<BlockIpam, "releaseAdoptedOfGonePods"> | undefined>;
  /** NAD networks served natively, for the node's self-check (see `NodeCheckDeps`). */
  nadCheck?: Pick<NodeCheckDeps, "networks" | "servedNatively">;
}

/** The running garbage collectors. */
export interface GcSide {
  /** The node's own `ipam check` after the last sweep. */
  nodeCheck: NodeCheck;
  /** Counters of the collectors that run (as `GET /v1/stats` shows them). */
  stats(): {
    gc?: PodGcStats & { deadNodeBlocks?: DeadNodeBlocksStats };
    netnsSweep?: NetnsSweepStats;
    ipamCheck: NodeCheckStats;
  };
  /** The loop's counters for metrics (zero standalone). */
  podGcStats(): Pick<PodGcStats, "released" | "failed" | "sweeps">;
  /** Stops every collector, waiting for work under way. */
  close(): Promise<void>;
}

/**
 * Builds and starts the collectors that fit the daemon's mode.
 *
 * @example
 * ```ts
 * const gc = gcSide({ config, kube, store, network, service, netns, ipam: () => pool?.current() });
 * await gc.close();
 * ```
 */
export function gcSide(deps: GcSideDeps): GcSide {
  const { config, kube, store, network, service, netns } = deps;
  const logger = getLogger(["ferry", "gc"]);
  const netnsGone = async (path: string) => (await netns.classify(path)) === "gone";
  const nodeCheck = new NodeCheck({
    records: () => store.list(),
    allocations: () => network.allocations(),
    ranges: () => network.subnets(),
    ...deps.nadCheck,
    event: kube
      ? (pod, reason, message) =>
        void kube.event(podSubject(pod), "Warning", reason, message).catch(() => {})
      : undefined,
    logger: getLogger(["ferry", "ipam"]),
  });
  const afterSweep = () => {
    nodeCheck.run();
    // Adopted allocations of pods gone from the server (asked of its storage, not the cache).
    if (!kube) return;
    const gone = async (pod: { uid: string; namespace: string; name: string }) => {
      const found = await kube.client.find<Pod>(PODS, pod.namespace, pod.name, {
        metadataOnly: true,
      });
      // Gone: no pod of that name, or another pod of it (a new UID).
      return !found || (!!pod.uid && found.metadata?.uid !== pod.uid);
    };
    const warn = (e: unknown) =>
      getLogger(["ferry", "daemon"]).warn("releasing adopted allocations failed: {error}", {
        error: String(e),
      });
    void deps.ipam()?.releaseAdoptedOfGonePods(gone).catch(warn);
    void deps.nadIpam?.().then((nad) => nad?.releaseAdoptedOfGonePods(gone)).catch(warn);
  };
  // The IP reconcile loop and sweep: only with Kubernetes (it needs the pod cache).
  const gc = kube
    ? new PodGc({
      store,
      registry: kube.pods.registry,
      synced: () => kube.watcher.synced && kube.watcher.healthy,
      release: (key, stale) => service.releaseStale(key, stale),
      sweepOrphans: (seen, graceMs) => service.sweepOrphans(seen, graceMs),
      netnsGone,
      // A read from the server's storage (no resourceVersion): the cache's first list may lag it.
      podUid: async (pod) =>
        (await kube.client.find<Pod>(PODS, pod.namespace, pod.name, { metadataOnly: true }))
          ?.metadata?.uid,
      event: (pod, type, reason, message) => kube.event(podSubject(pod), type, reason, message),
      afterSweep,
      graceMs: config.gc.graceSeconds * 1000,
      intervalMs: config.gc.intervalSeconds * 1000,
      maxRetries: config.gc.maxRetries,
      logger,
    })
    : undefined;
  if (gc && kube) {
    kube.pods.registry.onRemove((pod) => gc.podDeleted(pod));
    gc.start();
  }
  // Standalone: no pod cache, so the namespace alone tells an attachment is gone.
  const netnsSweep = kube ? undefined : new NetnsSweep({
    store,
    netnsGone,
    release: (key, stale) => service.releaseStale(key, stale),
    open: () => !!network.current,
    intervalMs: STANDALONE_SWEEP_MS,
    afterSweep,
    logger,
  });
  netnsSweep?.start();
  // Pool IPAM, NAD networks (the `ferry` type is served in every mode): one daemon at a time
  // (the Lease holder) reclaims the blocks of deleted nodes.
  const pools = kube?.pools;
  const nadNative = config.multiNetwork.whereaboutsIpam === "native";
  const reclaimer = kube
    ? new DeadNodeBlocks({
      lease: new LeaderLease(
        kubeLeaseApi(kube.client, config.gc.leaseNamespace, "ferry-ipam-reclaim"),
        config.nodeName,
        3 * config.gc.reclaimIntervalSeconds * 1000,
      ),
      pools,
      nodeKnown: (name) => !!kube.nodes?.get(name),
      nodesSynced: () => kube.watcher.synced,
      nodeExists: async (name) =>
        (await kube.client.find(NODES, undefined, name, { metadataOnly: true })) !== undefined,
      api: kubeBlockApi(kube.client),
      // NAD blocks of whereabouts configs (native) and of `ferry` pools (any mode): a cluster
      // without the NetworkBlock CRD has none.
      networks: nadNative ? kubeNetworkBlockApi(kube.client) : {
        list: (filter) =>
          kubeNetworkBlockApi(kube.client).list(filter).catch((e) => {
            if (e instanceof KubeApiError && e.isNotFound) return [];
            throw e;
          }),
        delete: (...a) => kubeNetworkBlockApi(kube.client).delete(...a),
      },
      intervalMs: config.gc.reclaimIntervalSeconds * 1000,
      logger,
    })
    : undefined;
  reclaimer?.start();
  return {
    nodeCheck,
    stats: () => ({
      gc: gc ? { ...gc.stats(), deadNodeBlocks: reclaimer?.stats() } : undefined,
      netnsSweep: netnsSweep?.stats(),
      ipamCheck: nodeCheck.stats(),
    }),
    podGcStats: () => gc?.stats() ?? { released: 0, failed: 0, sweeps: 0 },
    async close() {
      await gc?.close();
      await netnsSweep?.close();
      await reclaimer?.close();
    },
  };
}
