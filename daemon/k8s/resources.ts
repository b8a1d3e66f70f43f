/**
 * The API resources Ferry uses, and how their URLs are formed. Pure.
 *
 * @module
 */

/** A resource type of the API. */
export interface ResourceType {
  /** API group; "" for core. */
  group: string;
  /** Version, e.g. `v1`. */
  version: string;
  /** Plural name in URLs. */
  plural: string;
  /** Kind of its objects. */
  kind: string;
  /** Whether objects live in namespaces. */
  namespaced: boolean;
}

/** Pods. */
export const PODS: ResourceType = {
  group: "",
  version: "v1",
  plural: "pods",
  kind: "Pod",
  namespaced: true,
};
/** Nodes. */
export const NODES: ResourceType = {
  group: "",
  version: "v1",
  plural: "nodes",
  kind: "Node",
  namespaced: false,
};
/** Namespaces. */
export const NAMESPACES: ResourceType = {
  group: "",
  version: "v1",
  plural: "namespaces",
  kind: "Namespace",
  namespaced: false,
};
/** NetworkPolicies. */
export const NETWORK_POLICIES: ResourceType = {
  group: "networking.k8s.io",
  version: "v1",
  plural: "networkpolicies",
  kind: "NetworkPolicy",
  namespaced: true,
};
/** core/v1 Events. */
export const EVENTS: ResourceType = {
  group: "",
  version: "v1",
  plural: "events",
  kind: "Event",
  namespaced: true,
};
/** Multus NetworkAttachmentDefinitions. */
export const NETWORK_ATTACHMENT_DEFINITIONS: ResourceType = {
  group: "k8s.cni.cncf.io",
  version: "v1",
  plural: "network-attachment-definitions",
  kind: "NetworkAttachmentDefinition",
  namespaced: true,
};
/** The Network Plumbing Working Group's MultiNetworkPolicies (`deploy/base/crds/multi-networkpolicies.yaml`). */
export const MULTI_NETWORK_POLICIES: ResourceType = {
  group: "k8s.cni.cncf.io",
  version: "v1beta1",
  plural: "multi-networkpolicies",
  kind: "MultiNetworkPolicy",
  namespaced: true,
};
/** Ferry's cluster IP pools (`deploy/base/crds/ippools.yaml`). */
export const IPPOOLS: ResourceType = {
  group: "ferry.dev",
  version: "v1",
  plural: "ippools",
  kind: "IPPool",
  namespaced: false,
};
/** The blocks of Ferry's pools, each owned by one node (`deploy/base/crds/ipblocks.yaml`). */
export const IPBLOCKS: ResourceType = {
  group: "ferry.dev",
  version: "v1",
  plural: "ipblocks",
  kind: "IPBlock",
  namespaced: false,
};
/** The blocks of NAD networks' address spaces (`deploy/base/crds/networkblocks.yaml`). */
export const NETWORKBLOCKS: ResourceType = {
  group: "ferry.dev",
  version: "v1",
  plural: "networkblocks",
  kind: "NetworkBlock",
  namespaced: false,
};
/** The owners of NAD networks' ranges (`deploy/base/crds/networkowners.yaml`). */
export const NETWORKOWNERS: ResourceType = {
  group: "ferry.dev",
  version: "v1",
  plural: "networkowners",
  kind: "NetworkOwner",
  namespaced: false,
};
/** whereabouts' own IP pools (read for the migration to Ferry's NAD IPAM). */
export const WHEREABOUTS_IPPOOLS: ResourceType = {
  group: "whereabouts.cni.cncf.io",
  version: "v1alpha1",
  plural: "ippools",
  kind: "IPPool",
  namespaced: true,
};
/** coordination.k8s.io Leases (one daemon at a time reclaims dead nodes' blocks). */
export const LEASES: ResourceType = {
  group: "coordination.k8s.io",
  version: "v1",
  plural: "leases",
  kind: "Lease",
  namespaced: true,
};
/** CustomResourceDefinitions. */
export const CRDS: ResourceType = {
  group: "apiextensions.k8s.io",
  version: "v1",
  plural: "customresourcedefinitions",
  kind: "CustomResourceDefinition",
  namespaced: false,
};

/** ConfigMaps (Ferry's config, `ferry-config`, read by `kubectl ferry`). */
export const CONFIGMAPS: ResourceType = {
  group: "",
  version: "v1",
  plural: "configmaps",
  kind: "ConfigMap",
  namespaced: true,
};
/** apps/v1 DaemonSets (Ferry's own, read by `kubectl ferry`). */
export const DAEMONSETS: ResourceType = {
  group: "apps",
  version: "v1",
  plural: "daemonsets",
  kind: "DaemonSet",
  namespaced: true,
};

/** Services (`kubectl ferry connectivity-test`'s ClusterIP and NodePort). */
export const SERVICES: ResourceType = {
  group: "",
  version: "v1",
  plural: "services",
  kind: "Service",
  namespaced: true,
};

/** The `apiVersion` of a resource type's objects. */
export function apiVersionOf(rt: ResourceType): string {
  return rt.group ? `${rt.group}/${rt.version}` : rt.version;
}

/**
 * The URL path of a collection (no name) or an object.
 *
 * @example
 * ```ts
 * resourcePath(PODS, "default", "web-0"); // "/api/v1/namespaces/default/pods/web-0"
 * resourcePath(PODS);                     // "/api/v1/pods" (all namespaces)
 * ```
 */
export function resourcePath(rt: ResourceType, namespace?: string, name?: string): string {
  const base = rt.group ? `/apis/${rt.group}/${rt.version}` : `/api/${rt.version}`;
  const ns = rt.namespaced && namespace ? `/namespaces/${encodeURIComponent(namespace)}` : "";
  return `${base}${ns}/${rt.plural}${name ? `/${encodeURIComponent(name)}` : ""}`;
}
