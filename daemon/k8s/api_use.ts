/**
 * Every API access the daemon makes, in one list: the RBAC in `deploy/base/rbac.yaml` must grant these
 * and nothing else (a test asks a real API server both ways).
 *
 * @module
 */

/** One kind of access: verbs on a resource of an API group. */
export interface ApiUse {
  /** API group ("" for core). */
  group: string;
  /** Resource (plural). */
  resource: string;
  /** Verbs. */
  verbs: string[];
  /** Why the daemon needs it. */
  why: string;
}

/** What the daemon does with the API. */
export const DAEMON_API_USE: ApiUse[] = [
  {
    group: "",
    resource: "pods",
    verbs: ["list", "watch"],
    why:
      "the one watch of the node's pods (metadata only: PartialObjectMetadata; first list from the watch cache); NetworkPolicy: one watch of every pod (labels, addresses, named ports)",
  },
  {
    group: "",
    resource: "namespaces",
    verbs: ["list", "watch"],
    why: "NetworkPolicy: namespace labels, for namespaceSelector peers",
  },
  {
    group: "networking.k8s.io",
    resource: "networkpolicies",
    verbs: ["list", "watch"],
    why: "NetworkPolicy: the policies enforced on the node's pods",
  },
  {
    group: "",
    resource: "pods",
    verbs: ["get"],
    why: "the IP reconcile loop confirms a pod gone from the server before releasing its addresses",
  },
  {
    group: "",
    resource: "pods",
    verbs: ["patch"],
    why: "ADD records its attachment on the pod (answered with metadata only)",
  },
  {
    group: "",
    resource: "nodes",
    verbs: ["list", "watch"],
    why: "the one watch of nodes: this node's podCIDRs (ipam kubernetes), routes to the others",
  },
  {
    group: "",
    resource: "nodes",
    verbs: ["patch"],
    why: "routing vxlan: this node publishes its VXLAN endpoint in an annotation",
  },
  {
    group: "",
    resource: "nodes",
    verbs: ["get"],
    why:
      "pool IPAM: a node missing from the watch is confirmed gone before its blocks are reclaimed",
  },
  {
    group: "coordination.k8s.io",
    resource: "leases",
    verbs: ["get", "create", "update"],
    why: "pool IPAM: one daemon at a time (the Lease holder) reclaims deleted nodes' blocks; " +
      "block claims are serialized on a Lease (ferry-ipam-claims); one daemon per node name " +
      "holds the node's Lease (ferry-node-<node>)",
  },
  {
    group: "k8s.cni.cncf.io",
    resource: "network-attachment-definitions",
    verbs: ["list", "watch"],
    why: "multi-network: one watch of the NetworkAttachmentDefinitions pods select",
  },
  {
    group: "k8s.cni.cncf.io",
    resource: "multi-networkpolicies",
    verbs: ["list", "watch"],
    why: "MultiNetworkPolicy: the policies enforced on the node's pods' additional interfaces",
  },
  {
    group: "",
    resource: "events",
    verbs: ["create"],
    why: "the IP reconcile loop reports each release (or its failure) on the pod",
  },
  {
    group: "ferry.dev",
    resource: "ippools",
    verbs: ["list", "watch"],
    why: "ipam pool/auto: the pools this node claims blocks of",
  },
  {
    group: "ferry.dev",
    resource: "ipblocks",
    verbs: ["list", "watch"],
    why: "ipam pool/auto: every node's blocks (free ones to claim, routes to the others'), " +
      "and a list from storage when a claim is settled",
  },
  {
    group: "ferry.dev",
    resource: "ipblocks",
    verbs: ["get", "create", "update", "delete"],
    why: "ipam pool/auto: claim a block, record its allocations, give an empty one back",
  },
  {
    group: "ferry.dev",
    resource: "networkblocks",
    verbs: ["list", "get", "create", "update", "delete"],
    why: "NAD networks (whereabouts IPAM served natively): list a space's blocks from storage " +
      "to claim and settle one, claim it, record its allocations, give an empty one back",
  },
  {
    group: "whereabouts.cni.cncf.io",
    resource: "ippools",
    verbs: ["list"],
    why: "NAD networks served natively: the addresses whereabouts gave pods that still live are " +
      "never handed out (migration from whereabouts)",
  },
];
