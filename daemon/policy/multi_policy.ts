/**
 * MultiNetworkPolicy semantics, pure. A MultiNetworkPolicy (`k8s.cni.cncf.io`) has the spec of a
 * NetworkPolicy and applies to the networks its `k8s.v1.cni.cncf.io/policy-for` annotation names
 * (NetworkAttachmentDefinitions, `namespace/name` or `name` in the policy's namespace, separated
 * by commas): it isolates a selected pod's interface on such a network, and its peers are the
 * addresses pods have on that same network (from their `network-status`), never their default
 * addresses. Everything else (types, selectors, ipBlock, named ports, additivity) is
 * {@link compilePolicies}'s, applied network by network.
 *
 * @module
 */
import type { NetworkPolicy, NetworkPolicySpec } from "kubernetes-types/networking/v1.d.ts";
import {
  type AllowRule,
  type BlockTest,
  compilePolicies,
  type PolicyPod,
  policySelects,
} from "./compile.ts";
import type { Labels } from "./selector.ts";

/** The annotation naming the networks a MultiNetworkPolicy applies to. */
export const POLICY_FOR_ANNOTATION = "k8s.v1.cni.cncf.io/policy-for";

/** A MultiNetworkPolicy as the node reads it. */
export interface MultiPolicy {
  /** Name, namespace, and the policy-for annotation. */
  metadata?: {
    name?: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    annotations?: Record<string, string>;
  };
  /** The NetworkPolicy spec. */
  spec?: NetworkPolicySpec;
}

/**
 * A pod of the cluster with its addresses per additional network (`namespace/name` → ips, as
 * `networksOf` trusts its `network-status`) and its node.
 */
export type NetworkedPod = PolicyPod & { networks?: Record<string, string[]>; node?: string };

/** One additional interface of a pod of this node. */
export interface LocalInterface {
  /** The pod (its default addresses in `ips`, unused here). */
  pod: PolicyPod;
  /** The pod's network namespace (its path). */
  netns: string;
  /** The interface in the pod. */
  ifname: string;
  /** The network: `namespace/name` of its NetworkAttachmentDefinition. */
  network: string;
  /** The interface's addresses. */
  ips: string[];
}

/** What one additional interface may receive and send; `undefined`: not isolated that way. */
export interface InterfaceVerdict {
  /** The pod's network namespace. */
  netns: string;
  /** The interface. */
  ifname: string;
  /** Its network. */
  network: string;
  /** The pod, with the interface's addresses. */
  pod: PolicyPod;
  /** Ingress rules when isolated for ingress. */
  ingress?: AllowRule[];
  /** Egress rules when isolated for egress. */
  egress?: AllowRule[];
}

/**
 * The networks a MultiNetworkPolicy applies to, as `namespace/name` (a bare name is the
 * policy's namespace's).
 *
 * @example
 * ```ts
 * policyFor({ metadata: { namespace: "a", annotations: { [POLICY_FOR_ANNOTATION]: "net1, b/net2" } } });
 * // ["a/net1", "b/net2"]
 * ```
 */
export function policyFor(p: MultiPolicy): string[] {
  const ns = p.metadata?.namespace ?? "default";
  return (p.metadata?.annotations?.[POLICY_FOR_ANNOTATION] ?? "").split(",")
    .map((n) => n.trim()).filter(Boolean).map((n) => n.includes("/") ? n : `${ns}/${n}`);
}

/** A MultiNetworkPolicy as the NetworkPolicy the compiler reads. */
function asNetworkPolicy(p: MultiPolicy): NetworkPolicy {
  return { metadata: { name: p.metadata?.name, namespace: p.metadata?.namespace }, spec: p.spec };
}

const podKey = (p: { namespace: string; name: string }) => `${p.namespace}/${p.name}`;

/** Whether some MultiNetworkPolicy selects `pod` on one of `networks`. */
export function multiPolicySelects(
  policies: MultiPolicy[],
  pod: PolicyPod,
  networks: string[],
): boolean {
  return policies.some((p) =>
    policyFor(p).some((n) => networks.includes(n)) && policySelects(asNetworkPolicy(p), pod)
  );
}

/**
 * The verdicts of this node's additional interfaces: for each interface some MultiNetworkPolicy
 * of its network isolates, the rules that let traffic in or out of it. An interface's own
 * addresses come from its record (the pod's `network-status` follows its ADD), and so do those of
 * every pod of this node (`view.node`): a pod of this node without a record on the network has no
 * address there, whatever its annotation says. Every other pod's address on the network comes
 * from its `network-status` as `networksOf` trusts it.
 *
 * @example
 * ```ts
 * const verdicts = compileMultiPolicies({ policies, namespaces, pods }, interfaces, ipInBlock);
 * ```
 */
export function compileMultiPolicies(
  view: {
    policies: MultiPolicy[];
    namespaces: Map<string, Labels>;
    pods: NetworkedPod[];
    node?: string;
  },
  local: LocalInterface[],
  inBlock: BlockTest,
): InterfaceVerdict[] {
  const out: InterfaceVerdict[] = [];
  const byNetwork = Map.groupBy(local, (i) => i.network);
  for (const [network, interfaces] of byNetwork) {
    const policies = view.policies.filter((p) => policyFor(p).includes(network));
    if (!policies.length) continue;
    const own = new Map(interfaces.map((i) => [podKey(i.pod), i]));
    const pods: PolicyPod[] = view.pods.map((p) => ({
      ...p,
      ips: own.get(podKey(p))?.ips ??
        (view.node !== undefined && p.node === view.node ? [] : p.networks?.[network] ?? []),
    }));
    const listed = new Set(view.pods.map(podKey));
    for (const i of interfaces) {
      if (!listed.has(podKey(i.pod))) pods.push({ ...i.pod, ips: i.ips });
    }
    const networkView = {
      policies: policies.map(asNetworkPolicy),
      namespaces: view.namespaces,
      pods,
    };
    for (const i of interfaces) {
      const self = { ...i.pod, ips: i.ips };
      const [verdict] = compilePolicies(networkView, [self], inBlock);
      if (!verdict) continue;
      out.push({
        netns: i.netns,
        ifname: i.ifname,
        network,
        pod: self,
        ingress: verdict.ingress,
        egress: verdict.egress,
      });
    }
  }
  return out;
}
