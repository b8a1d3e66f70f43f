/**
 * The watches NetworkPolicy needs, feeding a {@link PolicyEnforcer}: NetworkPolicies, Namespaces
 * (their labels) and the pods of the whole cluster, each stripped to what policies read as it
 * arrives, so a large cluster's pods cost little memory. Built once by the composition root.
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
import { PolicyEnforcer, slimNamespace, slimPolicy, slimPolicyPod } from "./policy_enforcer.ts";

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
  /** Applies rulesets. */
  nft: Nft;
  /** Where to log. */
  logger: Logger;
}

/**
 * Adds the three informers to the watcher and returns the enforcer they feed (the watcher
 * starts them with the others).
 */
export function policySide(d: PolicySideDeps): PolicyEnforcer {
  const enforcer = new PolicyEnforcer({
    nodeName: d.nodeName,
    table: d.table,
    nft: d.nft,
    synced: () => d.watcher.synced,
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
      { ...d.watchOptions, transform: slimPolicyPod, firstListFromCache: true },
    ),
  );
  return enforcer;
}
