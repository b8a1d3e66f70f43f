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
      "pool IPAM, NAD networks: a node missing from the watch is confirmed gone before its blocks are reclaimed",
  },
  {
    group: "coordination.k8s.io",
    resource: "leases",
    verbs: ["get", "create", "update"],
    why: "pool IPAM, NAD networks: one daemon at a time (the Lease holder) reclaims deleted " +
      "nodes' blocks; " +
      "block claims are serialized on a Lease (ferry-ipam-claims), the claims of NAD ranges' " +
      "owners on another (ferry-nad-owner-claims); one daemon per node name " +
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
    why: "the IP reconcile loop reports each release (or its failure) on the pod; a node's " +
      "range that cannot be routed is reported on its Node (FerryRouteFailed); an invalid " +
      "(Multi)NetworkPolicy, or a NetworkPolicy over the size limits, is said on it",
  },
  {
    group: "ferry.dev",
    resource: "ippools",
    verbs: ["list", "watch"],
    why: "ipam pool/auto: the pools this node claims blocks of; NADs of the `ferry` IPAM type: " +
      "the pool a NAD names, and the NAD guard: no other NAD's address inside a pool for networks",
  },
  {
    group: "ferry.dev",
    resource: "ipblocks",
    verbs: ["list", "watch"],
    why: "ipam pool/auto: every node's blocks (free ones to claim, routes to the others'), " +
      "and a list from storage when a claim is settled; any mode: the reclaimer of deleted " +
      "nodes' blocks lists them from storage where this node has no pool watch",
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
    why: "NAD networks (whereabouts IPAM served natively): list a space's blocks (from the " +
      "watch cache to pick a candidate, from storage to settle the claim), claim it, record its allocations, give an empty one back; the " +
      "reclaim Lease's holder deletes deleted nodes' blocks (in every IPAM mode)",
  },
  {
    group: "ferry.dev",
    resource: "networkowners",
    verbs: ["list", "get", "create", "delete"],
    why: "NAD networks (whereabouts IPAM served natively): a range of a space belongs to the " +
      "namespace that first used it; list a space's owners, claim a range for a namespace, " +
      "take back a claim that lost to an overlapping one",
  },
  {
    group: "whereabouts.cni.cncf.io",
    resource: "ippools",
    verbs: ["list"],
    why: "NAD networks served natively: the addresses whereabouts gave pods that still live are " +
      "never handed out (migration from whereabouts)",
  },
];

/** One kind of access of the operator's `kubectl ferry`, and where it applies. */
export interface OperatorApiUse extends ApiUse {
  /**
   * The whole cluster (ClusterRole `ferry-operator`), Ferry's namespace only (Role
   * `ferry-operator`), or what `connectivity-test` does in the namespace it creates (ClusterRole
   * `ferry-connectivity-test`: the namespace's name is chosen at run time).
   */
  scope: "cluster" | "ferry-namespace" | "connectivity-test";
}

/**
 * What `kubectl ferry` (`cli/`) does with the API, with the operator's credentials: the
 * ClusterRole and Role `ferry-operator` in `deploy/base/rbac.yaml` grant exactly this, for an
 * administrator to bind to the people who run it. Nothing is granted to tenants: what needs a node
 * is read through Ferry's pods with `exec`, in Ferry's namespace only.
 */
export const OPERATOR_API_USE: OperatorApiUse[] = [
  {
    group: "",
    resource: "nodes",
    verbs: ["list"],
    scope: "cluster",
    why: "status: every node, its podCIDRs; ipam check; sysdump",
  },
  {
    group: "",
    resource: "pods",
    verbs: ["list"],
    scope: "cluster",
    why: "status: the addresses pods use per node; ipam check; policy explain",
  },
  {
    group: "",
    resource: "events",
    verbs: ["list"],
    scope: "cluster",
    why: "status: Warning Events on nodes, Ferry's pods and the pods Ferry reported on; sysdump",
  },
  {
    group: "",
    resource: "namespaces",
    verbs: ["list"],
    scope: "cluster",
    why: "policy explain: namespace labels",
  },
  {
    group: "networking.k8s.io",
    resource: "networkpolicies",
    verbs: ["list"],
    scope: "cluster",
    why: "policy explain",
  },
  {
    group: "ferry.dev",
    resource: "ippools",
    verbs: ["list"],
    scope: "cluster",
    why: "ipam check; sysdump",
  },
  {
    group: "ferry.dev",
    resource: "ipblocks",
    verbs: ["list"],
    scope: "cluster",
    why: "status: blocks per node (pool IPAM); ipam check; sysdump",
  },
  {
    group: "",
    resource: "pods",
    verbs: ["get"],
    scope: "ferry-namespace",
    why: "kubectl exec reads the Ferry pod it runs in",
  },
  {
    group: "",
    resource: "pods/exec",
    // create: kubectl's SPDY exec (a POST); get: its WebSocket exec (a GET upgrade) on servers
    // before 1.35, which authorize that as get.
    verbs: ["create", "get"],
    scope: "ferry-namespace",
    why: "status and sysdump: each node's /v1/stats and state, read through its Ferry pod " +
      "(daemon/tools/node_report.ts, node_dump.ts)",
  },
  {
    group: "",
    resource: "configmaps",
    verbs: ["get"],
    scope: "ferry-namespace",
    why: "status: the routing mode in Ferry's config (ferry-config); sysdump",
  },
  {
    group: "",
    resource: "pods/log",
    verbs: ["get"],
    scope: "ferry-namespace",
    why: "sysdump: the daemons' logs (kubectl logs)",
  },
  {
    group: "apps",
    resource: "daemonsets",
    verbs: ["get"],
    scope: "ferry-namespace",
    why: "sysdump: Ferry's DaemonSet",
  },
  {
    group: "",
    resource: "namespaces",
    verbs: ["create", "delete"],
    scope: "connectivity-test",
    why: "connectivity-test: its own namespace, deleted at the end (with everything in it)",
  },
  {
    group: "",
    resource: "nodes",
    verbs: ["list"],
    scope: "connectivity-test",
    why: "connectivity-test: a test pod on every node",
  },
  {
    group: "",
    resource: "pods",
    verbs: ["create", "list"],
    scope: "connectivity-test",
    why: "connectivity-test: the test pods, and whether they run",
  },
  {
    group: "",
    resource: "pods/exec",
    verbs: ["create", "get"],
    scope: "connectivity-test",
    why: "connectivity-test: each check connects from a test pod",
  },
  {
    group: "",
    resource: "services",
    verbs: ["create", "get"],
    scope: "connectivity-test",
    why: "connectivity-test: the ClusterIP and NodePort Services, and their addresses",
  },
  {
    group: "networking.k8s.io",
    resource: "networkpolicies",
    verbs: ["create"],
    scope: "connectivity-test",
    why: "connectivity-test: the deny-all and allow policies",
  },
];
