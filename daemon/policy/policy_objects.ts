/**
 * The cluster's objects as NetworkPolicy reads them, pure: pods, policies and namespaces stripped
 * to what policies read (the informers' transforms, so that a node keeps little of a large
 * cluster), and a pod as the compiler takes it: labels, canonical addresses (its own and, from its
 * `network-status` as far as it is to be believed, per additional network), named ports, node.
 *
 * @module
 */
import type { Namespace, Pod } from "kubernetes-types/core/v1.d.ts";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import type { NamedPort, Protocol } from "./compile.ts";
import type { NetworkedPod } from "./multi_policy.ts";
import { NETWORK_STATUS_ANNOTATION } from "../multivif/selections.ts";
import { type ReadNetworkStatus, readNetworkStatus } from "../multivif/network_status.ts";
import { canonicalIp } from "../ipam/cidr.ts";

/**
 * The key of a namespaced object (a pod, a policy) in the enforcers' maps: `namespace/name`, the
 * namespace `default` when none is set.
 *
 * @example
 * ```ts
 * objectKey("web", "api-0"); // "web/api-0"
 * ```
 */
export const objectKey = (ns: string | undefined, name: string | undefined): string =>
  `${ns ?? "default"}/${name ?? ""}`;

/** A pod stripped to what policies read (an informer's transform). */
export function slimPolicyPod(pod: Pod): Pod {
  const m = pod.metadata ?? {};
  return {
    metadata: {
      name: m.name,
      namespace: m.namespace,
      resourceVersion: m.resourceVersion,
      labels: m.labels,
      ...(m.annotations?.[NETWORK_STATUS_ANNOTATION]
        ? { annotations: { [NETWORK_STATUS_ANNOTATION]: m.annotations[NETWORK_STATUS_ANNOTATION] } }
        : {}),
    },
    spec: {
      nodeName: pod.spec?.nodeName,
      ...(pod.spec?.hostNetwork ? { hostNetwork: true } : {}),
      // Only containers that name ports, and only those ports: what a named port resolves to.
      containers: (pod.spec?.containers ?? []).filter((c) => c.ports?.some((p) => p.name)).map(
        (c) => ({
          name: "",
          ports: c.ports!.filter((p) => p.name).map((p) => ({
            name: p.name,
            containerPort: p.containerPort,
            protocol: p.protocol,
          })),
        }),
      ),
    },
    status: {
      phase: pod.status?.phase,
      podIPs: pod.status?.podIPs?.map((p) => ({ ip: p.ip })),
    },
  };
}

/** A NetworkPolicy stripped to its spec (and its UID: an Event names it). */
export function slimPolicy(p: NetworkPolicy): NetworkPolicy {
  const m = p.metadata ?? {};
  return {
    metadata: {
      name: m.name,
      namespace: m.namespace,
      uid: m.uid,
      resourceVersion: m.resourceVersion,
    },
    spec: p.spec,
  };
}

/** A Namespace stripped to its labels. */
export function slimNamespace(n: Namespace): Namespace {
  const m = n.metadata ?? {};
  return { metadata: { name: m.name, resourceVersion: m.resourceVersion, labels: m.labels } };
}

/**
 * A pod's addresses per additional network, from its `network-status` as
 * {@link readNetworkStatus} trusts it: entries for NetworkAttachmentDefinitions of the pod's own
 * namespace, addresses parsed and canonical; nothing at all for a pod no node runs (no
 * `spec.nodeName`: no CNI wrote its annotation, whoever did is not to be believed).
 */
export function networksOf(pod: Pod): Record<string, string[]> {
  return networkClaims(pod).networks;
}

/** {@link networksOf} with what was left out of it, and why. */
export function networkClaims(pod: Pod): ReadNetworkStatus {
  if (!pod.spec?.nodeName) return { networks: {}, dropped: [] };
  return readNetworkStatus(
    pod.metadata?.annotations?.[NETWORK_STATUS_ANNOTATION],
    pod.metadata?.namespace ?? "default",
  );
}

/** A pod as policies read it, with its node and its addresses on additional networks. */
export function policyPodOf(pod: Pod): NetworkedPod & { node?: string } {
  const ports: NamedPort[] = (pod.spec?.containers ?? []).flatMap((c) =>
    (c.ports ?? []).filter((p) => p.name).map((p) => ({
      name: p.name!,
      port: p.containerPort,
      protocol: (p.protocol ?? "TCP") as Protocol,
    }))
  );
  const phase = pod.status?.phase;
  const networks = networksOf(pod);
  const out: NetworkedPod & { node?: string } = {
    namespace: pod.metadata?.namespace ?? "default",
    name: pod.metadata?.name ?? "",
    labels: pod.metadata?.labels ?? NO_LABELS,
    ips: podAddresses(pod).ips,
    hostNetwork: !!pod.spec?.hostNetwork,
    done: phase === "Succeeded" || phase === "Failed",
    ports: ports.length ? ports : NO_PORTS,
    node: pod.spec?.nodeName,
  };
  // Most pods have no additional network: no object of their own for it.
  return Object.keys(networks).length ? { ...out, networks } : out;
}

/**
 * A pod's `status.podIPs`, parsed and canonical; what is no address (the API server validates
 * them: one that slipped through) is never a peer, never written, and listed in `dropped`.
 */
export function podAddresses(pod: Pod): { ips: string[]; dropped: string[] } {
  const ips: string[] = [];
  const dropped: string[] = [];
  for (const { ip } of pod.status?.podIPs ?? []) {
    if (!ip) continue;
    const canonical = canonicalIp(ip);
    if (canonical === undefined) dropped.push(ip);
    else ips.push(canonical);
  }
  return { ips, dropped };
}

/** Shared by every pod without labels, or without named ports (a cluster's pods are many). */
const NO_LABELS: Record<string, string> = Object.freeze({}) as Record<string, string>;
const NO_PORTS: NamedPort[] = Object.freeze([]) as unknown as NamedPort[];
