/**
 * The schema of the daemon's configuration file, and its type. Only `deno task gen` evaluates the
 * schema (to render `lib/_generated/validateDaemonConfig.js`); the daemon imports the type alone,
 * so neither TypeBox nor ajv is loaded at run time.
 *
 * @module
 */
import { type Static, Type } from "@sinclair/typebox";

/** The schema of the daemon configuration file. */
export const DaemonConfigSchema = Type.Object({
  socket: Type.String({ pattern: "^/", description: "unix socket the shim talks to" }),
  nodeName: Type.String({ minLength: 1, description: "this node's name in Kubernetes" }),
  kubeconfig: Type.Optional(
    Type.String({ description: "kubeconfig file; in-cluster when absent" }),
  ),
  allowInsecureTls: Type.Boolean({
    description: "accept a kubeconfig with insecure-skip-tls-verify",
  }),
  standalone: Type.Boolean({
    description: "no Kubernetes: plug without pod lookup (local tests, plain CNI)",
  }),
  podWaitSeconds: Type.Number({
    exclusiveMinimum: 0,
    description: "how long ADD waits for its pod",
  }),
  apiRequestTimeoutSeconds: Type.Number({
    exclusiveMinimum: 0,
    description: "an API request still unanswered after this long fails (and is retried)",
  }),
  watch: Type.Object({
    timeoutSeconds: Type.Integer({ minimum: 1 }),
    unhealthyAfterSeconds: Type.Number({ exclusiveMinimum: 0 }),
    resyncSeconds: Type.Number({ minimum: 0 }),
    requestTimeoutSeconds: Type.Number({ exclusiveMinimum: 0 }),
  }, { additionalProperties: false }),
  stateDir: Type.String({
    pattern: "^/",
    description: "where attachments and allocations are kept",
  }),
  stagedConflist: Type.String({
    description:
      "a conflist staged by install-cni --stage-conflist, put into cniConfDir once the daemon is ready (the node's network is ready only then); empty: none",
  }),
  cniConfDir: Type.String({
    pattern: "^/",
    description: "the runtime's CNI config directory, where stagedConflist goes",
  }),
  sysctlDir: Type.String({
    pattern: "^/",
    description:
      "where the daemon writes sysctls (only net/ below it): /proc/sys, or a bind mount of the host's /proc/sys/net under DIR/net in a container without privilege",
  }),
  network: Type.Object({
    subnet: Type.String({ description: "node-local pod range, e.g. 10.244.0.0/24" }),
    rangeStart: Type.Optional(Type.String()),
    rangeEnd: Type.Optional(Type.String()),
    gateway: Type.Optional(Type.String()),
    subnet6: Type.Optional(Type.String({
      description: "second family for dual stack, e.g. fd00:10:244::/64 (gateway: first host)",
    })),
    bridge: Type.String({
      pattern: "^[^\\s/:]{1,15}$",
      description: "the node bridge pod veths join; it holds the gateways",
    }),
    forwarding: Type.Boolean({ description: "turn on IPv4/IPv6 forwarding on the node" }),
    plumbing: Type.Union([Type.Literal("netlink"), Type.Literal("iproute2")], {
      description: "plug pod veths with in-process netlink, or with iproute2 batches",
    }),
    mtu: Type.Integer({ minimum: 576, maximum: 65535 }),
  }, { additionalProperties: false }),
  ipam: Type.Object({
    mode: Type.Union(
      [
        Type.Literal("local"),
        Type.Literal("kubernetes"),
        Type.Literal("pool"),
        Type.Literal("auto"),
      ],
      {
        description: "local: network.subnet(6) on every node; kubernetes: the node's " +
          "spec.podCIDRs; pool: blocks of Ferry's IPPools; auto: kubernetes when the node has " +
          "podCIDRs, pool otherwise",
      },
    ),
    pools: Type.Array(Type.String({ pattern: "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$" }), {
      minItems: 1,
      description: "pool mode: the IPPools this node claims blocks from, in order of preference",
    }),
    reuseDelaySeconds: Type.Integer({
      minimum: 0,
      maximum: 3600,
      description: "a released address is not handed out again for this long (quarantine)",
    }),
    blockReleaseSeconds: Type.Integer({
      minimum: 0,
      maximum: 86400,
      description: "pool mode: how long a block stays empty before the node gives it back",
    }),
  }, { additionalProperties: false }),
  // Items typed as strings (an enum, not a union of literals), so that ajv checks uniqueness
  // without its deep-equality helper, which generated code would have to import.
  multiVifDrivers: Type.Array(
    Type.Unsafe<"npwg" | "noop">({ type: "string", enum: ["npwg", "noop"] }),
    {
      uniqueItems: true,
      description: "drivers asked for a pod's additional interfaces, in order; [] turns them off",
    },
  ),
  multiNetwork: Type.Object({
    allowCrossNamespace: Type.Boolean({
      description: "a pod may select a NetworkAttachmentDefinition of another namespace",
    }),
    interfacePrefix: Type.String({
      pattern: "^[a-zA-Z][a-zA-Z0-9_-]{0,10}$",
      description: "generated interface names: net → net1, net2, …",
    }),
    configDir: Type.String({
      description: "where a NetworkAttachmentDefinition without spec.config finds <name>.conflist",
    }),
    allowedTypes: Type.Array(Type.String({ pattern: "^(\\*|[A-Za-z0-9][A-Za-z0-9_.-]*)$" }), {
      description:
        "plugin and IPAM types a NetworkAttachmentDefinition may use; * allows every type",
    }),
  }, { additionalProperties: false }),
  gc: Type.Object({
    graceSeconds: Type.Integer({
      minimum: 0,
      maximum: 86400,
      description: "attachments younger than this are never released by the reconcile loop",
    }),
    intervalSeconds: Type.Integer({
      minimum: 0,
      maximum: 86400,
      description:
        "how often the sweep looks for attachments of gone pods and namespaces (0: never)",
    }),
    maxRetries: Type.Integer({
      minimum: 0,
      maximum: 100,
      description: "retries of a failed release before it is given up and reported",
    }),
    reclaimIntervalSeconds: Type.Integer({
      minimum: 1,
      maximum: 3600,
      description: "pool mode: how often the Lease holder looks for blocks of deleted nodes " +
        "(the Lease lasts three intervals)",
    }),
    leaseNamespace: Type.String({
      pattern: "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
      description: "where the Lease `ferry-ipam-reclaim` lives",
    }),
  }, { additionalProperties: false }),
  routing: Type.Object({
    mode: Type.Union([Type.Literal("none"), Type.Literal("host-gw"), Type.Literal("vxlan")], {
      description:
        "none: pods reach pods of this node only; host-gw: a route per other node; vxlan: an overlay",
    }),
    vxlan: Type.Object({
      vni: Type.Integer({ minimum: 1, maximum: 16777215, description: "VXLAN network identifier" }),
      port: Type.Integer({ minimum: 1, maximum: 65535, description: "UDP port of the overlay" }),
      device: Type.String({ pattern: "^[^\\s/:]{1,15}$", description: "the VXLAN device" }),
    }, { additionalProperties: false }),
  }, { additionalProperties: false }),
  masquerade: Type.Object({
    enabled: Type.Boolean({ description: "masquerade pod egress to non-pod addresses" }),
    nonMasqueradeCIDRs: Type.Array(Type.String(), {
      description: "destinations besides pod ranges that see pods' own addresses",
    }),
    table: Type.String({
      pattern: "^[a-zA-Z][a-zA-Z0-9_]{0,31}$",
      description: "the nftables table (family inet) Ferry owns",
    }),
  }, { additionalProperties: false }),
  pluginTimeoutSeconds: Type.Number({
    exclusiveMinimum: 0,
    description: "deadline of a delegated or IPAM plugin run",
  }),
  maxRequestBytes: Type.Integer({ minimum: 1024 }),
  server: Type.Object({
    readTimeoutSeconds: Type.Number({
      exclusiveMinimum: 0,
      description: "a request must arrive whole within this (slow or stalled clients are cut)",
    }),
    writeTimeoutSeconds: Type.Number({
      exclusiveMinimum: 0,
      description: "a response must be taken within this",
    }),
    maxConnections: Type.Integer({
      minimum: 1,
      description: "connections served at once; more get code 11 at once",
    }),
    httpHost: Type.String({
      description: "where /healthz, /readyz and /metrics are served (TCP, for probes and scrapes)",
    }),
    httpPort: Type.Integer({
      minimum: -1,
      maximum: 65535,
      description: "the port of /healthz, /readyz and /metrics (0: any free one; -1: none)",
    }),
    metricsHost: Type.String({
      description:
        "where a second listener serves the same for scrapers (0.0.0.0: the node's addresses, under hostNetwork)",
    }),
    metricsPort: Type.Integer({
      minimum: -1,
      maximum: 65535,
      description:
        "the scrapers' port, apart from the probes' so that its clients never delay them (0: any free one; -1: none)",
    }),
  }, { additionalProperties: false }),
  shutdownTimeoutSeconds: Type.Number({ minimum: 0 }),
  nice: Type.Integer({
    minimum: -20,
    maximum: 19,
    description: "the daemon's CPU priority (every thread's nice value, set at start; 0 leaves it)",
  }),
  logLevel: Type.Union([
    Type.Literal("trace"),
    Type.Literal("debug"),
    Type.Literal("info"),
    Type.Literal("warning"),
    Type.Literal("error"),
    Type.Literal("fatal"),
  ]),
  policy: Type.Object({
    enabled: Type.Boolean({
      description: "enforce Kubernetes NetworkPolicy on this node's pods (needs the API)",
    }),
    table: Type.String({
      pattern: "^[A-Za-z][A-Za-z0-9_-]*$",
      description: "the nftables table (family inet) the policies are written to",
    }),
  }, { additionalProperties: false }),
  logFormat: Type.Union([Type.Literal("json"), Type.Literal("text")], {
    description:
      "json: one JSON object per line (for log collectors); text: `time LEVEL logger: sentence` (for kubectl logs)",
  }),
}, { additionalProperties: false });

/** The daemon configuration. */
export type DaemonConfig = Static<typeof DaemonConfigSchema>;
