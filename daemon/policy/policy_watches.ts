/**
 * The watches NetworkPolicy needs, feeding a {@link PolicyEnforcer}: NetworkPolicies, Namespaces
 * (their labels) and the pods of the whole cluster, each stripped to what policies read as it
 * arrives, so a large cluster's pods cost little memory; and MultiNetworkPolicies, feeding a
 * {@link MultiPolicyEnforcer} that reads the same pods and namespaces and this node's additional
 * interfaces. The MultiNetworkPolicy watch is not the daemon's readiness: a cluster without its
 * CRD has none, and the watch lists again now and then in case it is installed. Built once by the
 * kube side.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { Namespace, Pod } from "kubernetes-types/core/v1.d.ts";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import type { KubeClient } from "../k8s/client.ts";
import { Informer, type InformerOptions } from "../k8s/informer.ts";
import { NAMESPACES, NETWORK_POLICIES, PODS } from "../k8s/resources.ts";
import type { Watcher } from "../k8s/watcher.ts";
import type { Nft } from "../cluster/masquerade.ts";
import { MULTI_NETWORK_POLICIES } from "../k8s/resources.ts";
import type { AttachmentStore } from "../records/attachment_store.ts";
import { PolicyEnforcer, type PolicyStats } from "./policy_enforcer.ts";
import type { RefusedPolicy } from "./policy_check.ts";
import { slimNamespace, slimPolicy, slimPolicyPod } from "./policy_objects.ts";
import {
  MultiPolicyEnforcer,
  type MultiPolicyStats,
  slimMultiPolicy,
} from "./multi_policy_enforcer.ts";
import type { LocalInterface, MultiPolicy } from "./multi_policy.ts";
import type { PolicyLimits } from "./limits.ts";
import type { Labels } from "./selector.ts";
import { DeniedLog, type NflogSys } from "./nflog.ts";
import { NftNetlink, type NftSys } from "./nft_netlink.ts";

/** What the policy side needs. */
export interface PolicySideDeps {
  /** The API. */
  kube: KubeClient;
  /** Where its informers join the daemon's (readiness waits for them). */
  watcher: Watcher;
  /** The informers' tuning. */
  watchOptions: InformerOptions;
  /** This node. */
  nodeName: string;
  /** The table. */
  table: string;
  /** Applies rulesets, on the node and inside pods' namespaces. */
  nft: Required<Pick<Nft, "apply" | "remove" | "applyIn">> & Nft;
  /** NETLINK_NETFILTER, for the ADDs' own writes of their pods' chains (else through `nft`). */
  netfilter?: NftSys;
  /** This node's attachment records (its pods' additional interfaces). */
  store: AttachmentStore;
  /** The labels of a pod of this node from its own watch (before the cluster-wide one has it). */
  labelsOf: (namespace: string, name: string) => Labels | undefined;
  /** Whether a network namespace path still exists. */
  netnsExists: (path: string) => Promise<boolean>;
  /** Denied connections logged (`policy.logDenied`): the NFLOG group, the rate, the system calls. */
  deniedLog?: { group: number; perSecond: number; sys: NflogSys };
  /** Where to log. */
  logger: Logger;
  /** Says on an invalid policy that it is not enforced as written (a Warning Event). */
  refused?: (policy: RefusedPolicy, message: string) => void;
  /** Policy size limits (`policy.limits`). */
  limits?: PolicyLimits;
}

/** The policy side: NetworkPolicy on the node, MultiNetworkPolicy in its pods. */
export interface PolicySide {
  /** NetworkPolicy (the default network). */
  enforcer: PolicyEnforcer;
  /** MultiNetworkPolicy (additional networks). */
  multi: MultiPolicyEnforcer;
  /** Starts both (the NetworkPolicy informers start with the daemon's watcher). */
  start(): void;
  /** Stops both. */
  close(): Promise<void>;
}

/**
 * Adds the three NetworkPolicy informers to the watcher (it starts them with the others), makes
 * the MultiNetworkPolicy informer, and returns the enforcers they feed.
 *
 * @example
 * ```ts
 * const policy = policySide({ kube, watcher, watchOptions, nodeName, table, nft, store, labelsOf, netnsExists, logger });
 * watcher.start();
 * policy.start();
 * ```
 */
export function policySide(d: PolicySideDeps): PolicySide {
  const multiInformer = new Informer<MultiPolicy & { metadata?: { name?: string } }>(
    d.kube,
    MULTI_NETWORK_POLICIES,
    {},
    { upsert: (p) => multi.policyUpserted(p), remove: (p) => multi.policyRemoved(p) },
    d.logger,
    { ...d.watchOptions, transform: slimMultiPolicy, missingIsEmpty: true },
  );
  const multi: MultiPolicyEnforcer = new MultiPolicyEnforcer({
    table: d.table,
    nft: d.nft,
    interfaces: () => localInterfaces(d, enforcer),
    cluster: { pods: () => enforcer.clusterPods(), namespaces: () => enforcer.namespaceLabels() },
    synced: () => d.watcher.synced && multiInformer.isSynced,
    netnsExists: d.netnsExists,
    logger: d.logger,
    nodeName: d.nodeName,
    refused: d.refused,
  });
  const writer = d.netfilter && new NftNetlink(d.netfilter);
  const enforcer: PolicyEnforcer = new PolicyEnforcer({
    nodeName: d.nodeName,
    table: d.table,
    nft: d.nft,
    writer,
    counter: writer,
    synced: () => d.watcher.synced,
    logger: d.logger,
    changed: () => multi.changed(),
    invalid: d.refused,
    log: d.deniedLog && { group: d.deniedLog.group, perSecond: d.deniedLog.perSecond },
    limits: d.limits,
    refused: (p, reason) => void refusedEvent(d, p, reason),
  });
  const denied = d.deniedLog &&
    new DeniedLog({
      sys: d.deniedLog.sys,
      group: d.deniedLog.group,
      perSecond: d.deniedLog.perSecond,
      describe: (packet) => enforcer.describe(packet),
      logger: d.logger,
    });
  d.watcher.add(
    "networkpolicies",
    new Informer<NetworkPolicy>(
      d.kube,
      NETWORK_POLICIES,
      {},
      { upsert: (p) => enforcer.policyUpserted(p), remove: (p) => enforcer.policyRemoved(p) },
      d.logger,
      { ...d.watchOptions, transform: slimPolicy, firstListFromCache: true },
    ),
  );
  d.watcher.add(
    "namespaces",
    new Informer<Namespace>(
      d.kube,
      NAMESPACES,
      {},
      { upsert: (n) => enforcer.namespaceUpserted(n), remove: (n) => enforcer.namespaceRemoved(n) },
      d.logger,
      { ...d.watchOptions, transform: slimNamespace, firstListFromCache: true },
    ),
  );
  d.watcher.add(
    "policy-pods",
    new Informer<Pod>(
      d.kube,
      PODS,
      {},
      { upsert: (p) => enforcer.podUpserted(p), remove: (p) => enforcer.podRemoved(p) },
      d.logger,
      // The enforcer keeps its own view of every pod: the informer keeps no second one.
      {
        ...d.watchOptions,
        transform: slimPolicyPod,
        firstListFromCache: true,
        keepObjects: false,
      },
    ),
  );
  return {
    enforcer,
    multi,
    start() {
      try {
        denied?.start();
      } catch (e) {
        d.logger.error("network policy: denied connections are not logged: {error}", {
          error: e instanceof Error ? e.message : String(e),
        });
      }
      enforcer.start();
      multiInformer.start();
      multi.start();
    },
    async close() {
      // Whatever nft still runs (a slow pass, a counter read) is killed: none outlives the daemon.
      d.nft.close?.();
      await denied?.close();
      await enforcer.close();
      writer?.close();
      await multi.close();
      await multiInformer.stop();
    },
  };
}

/** A Warning Event on a policy the size limits refuse (`kubectl describe networkpolicy` shows it). */
async function refusedEvent(d: PolicySideDeps, p: NetworkPolicy, reason: string): Promise<void> {
  const m = p.metadata ?? {};
  try {
    await d.kube.createEvent(
      {
        kind: "NetworkPolicy",
        apiVersion: "networking.k8s.io/v1",
        namespace: m.namespace ?? "default",
        name: m.name ?? "",
        ...(m.uid ? { uid: m.uid } : {}),
      },
      {
        type: "Warning",
        reason: "PolicyTooLarge",
        message:
          `refused on node ${d.nodeName}: ${reason}; the pods it selects are isolated without what it allows`,
        component: "ferry",
        host: d.nodeName,
      },
    );
  } catch (e) {
    d.logger.warn("network policy: no Event on {policy}: {error}", {
      policy: `${m.namespace}/${m.name}`,
      error: e instanceof Error ? e.message : String(e),
    });
  }
}

/** This node's additional interfaces (records with a parent), with their pods as policies see them. */
function localInterfaces(d: PolicySideDeps, enforcer: PolicyEnforcer): LocalInterface[] {
  const out: LocalInterface[] = [];
  for (const r of d.store.list()) {
    if (!r.parent || !r.pod) continue;
    const { namespace, name } = r.pod;
    const known = enforcer.pod(namespace, name);
    out.push({
      pod: known ?? {
        namespace,
        name,
        labels: d.labelsOf(namespace, name) ?? {},
        ips: [],
        hostNetwork: false,
        done: false,
        ports: [],
      },
      netns: r.netns,
      ifname: r.ifname,
      network: r.network,
      ips: (r.result.ips ?? []).map((ip) => ip.address.split("/")[0]),
    });
  }
  return out;
}

/**
 * What both enforcers refused or failed, as metric series (`ferry_policy_problems`): invalid
 * policies known now, failed passes and dropped `network-status` entries so far.
 *
 * @example
 * ```ts
 * policyProblems(side.enforcer.stats(), side.multi.stats());
 * // [{ kind: "NetworkPolicy", problem: "invalid_policies", count: 0 }, …]
 * ```
 */
export function policyProblems(
  np?: PolicyStats,
  mnp?: MultiPolicyStats,
): { kind: string; problem: string; count: number }[] {
  return [
    ...(np
      ? [
        { kind: "NetworkPolicy", problem: "invalid_policies", count: np.invalidPolicies },
        { kind: "NetworkPolicy", problem: "failed_passes", count: np.failedPasses },
        { kind: "MultiNetworkPolicy", problem: "dropped_addresses", count: np.droppedAddresses },
      ]
      : []),
    ...(mnp
      ? [
        { kind: "MultiNetworkPolicy", problem: "invalid_policies", count: mnp.invalidPolicies },
        { kind: "MultiNetworkPolicy", problem: "failed_passes", count: mnp.failedPasses },
      ]
      : []),
  ];
}
