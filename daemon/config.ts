/**
 * The daemon's configuration: one schema, defaults in one place, loaded from a JSON file and
 * overridden by command-line flags. Invalid configuration stops the daemon with a message naming
 * the field.
 *
 * @module
 */
import { type Static, Type } from "@sinclair/typebox";
import { Ajv } from "ajv";
import { describeIssues } from "../lib/validate.ts";
import { DEFAULT_SOCKET } from "../lib/socket_api.ts";

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
  multiVifDrivers: Type.Array(Type.Union([Type.Literal("npwg"), Type.Literal("noop")]), {
    uniqueItems: true,
    description: "drivers asked for a pod's additional interfaces, in order; [] turns them off",
  }),
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
  }, { additionalProperties: false }),
  shutdownTimeoutSeconds: Type.Number({ minimum: 0 }),
  logLevel: Type.Union([
    Type.Literal("trace"),
    Type.Literal("debug"),
    Type.Literal("info"),
    Type.Literal("warning"),
    Type.Literal("error"),
    Type.Literal("fatal"),
  ]),
}, { additionalProperties: false });

/** The daemon configuration. */
export type DaemonConfig = Static<typeof DaemonConfigSchema>;

/** Every default, in one place. */
export const DEFAULT_CONFIG: DaemonConfig = {
  socket: DEFAULT_SOCKET,
  nodeName: Deno.hostname(),
  allowInsecureTls: false,
  standalone: false,
  podWaitSeconds: 60,
  watch: {
    timeoutSeconds: 300,
    unhealthyAfterSeconds: 60,
    resyncSeconds: 300,
    requestTimeoutSeconds: 30,
  },
  stateDir: "/var/lib/ferry",
  network: {
    subnet: "10.244.0.0/24",
    bridge: "ferry0",
    forwarding: true,
    plumbing: "netlink",
    mtu: 1500,
  },
  ipam: { mode: "local", pools: ["default"], blockReleaseSeconds: 300, reuseDelaySeconds: 30 },
  multiVifDrivers: ["npwg"],
  multiNetwork: {
    allowCrossNamespace: false,
    interfacePrefix: "net",
    configDir: "/etc/cni/multus/net.d",
  },
  gc: {
    graceSeconds: 60,
    intervalSeconds: 300,
    maxRetries: 2,
    reclaimIntervalSeconds: 10,
    leaseNamespace: "kube-system",
  },
  routing: { mode: "none", vxlan: { vni: 1, port: 8472, device: "ferry.vxlan" } },
  masquerade: { enabled: true, nonMasqueradeCIDRs: [], table: "ferry" },
  pluginTimeoutSeconds: 60,
  maxRequestBytes: 1024 * 1024,
  server: {
    readTimeoutSeconds: 10,
    writeTimeoutSeconds: 10,
    maxConnections: 512,
    httpHost: "127.0.0.1",
    httpPort: 9667,
  },
  shutdownTimeoutSeconds: 10,
  logLevel: "info",
};

/** Flags that override the file. */
export interface ConfigOverrides {
  /** `--socket` */
  socket?: string;
  /** `--node-name` */
  nodeName?: string;
  /** `--kubeconfig` */
  kubeconfig?: string;
  /** `--state-dir` */
  stateDir?: string;
  /** `--standalone` */
  standalone?: boolean;
}

/** A configuration that cannot be used. */
export class ConfigError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/**
 * Merges defaults, the file's content and the overrides, then validates.
 *
 * @throws {ConfigError} naming each invalid field.
 * @example
 * ```ts
 * resolveConfig({ network: { subnet: "10.1.0.0/24" } }, { socket: "/tmp/f.sock" });
 * ```
 */
export function resolveConfig(file: unknown, overrides: ConfigOverrides = {}): DaemonConfig {
  if (file !== undefined && (file === null || typeof file !== "object" || Array.isArray(file))) {
    throw new ConfigError("the configuration must be a JSON object");
  }
  const given = (file ?? {}) as Partial<DaemonConfig>;
  const merged = {
    ...DEFAULT_CONFIG,
    ...given,
    network: { ...DEFAULT_CONFIG.network, ...(given.network ?? {}) },
    watch: { ...DEFAULT_CONFIG.watch, ...(given.watch ?? {}) },
    server: { ...DEFAULT_CONFIG.server, ...(given.server ?? {}) },
    ipam: { ...DEFAULT_CONFIG.ipam, ...(given.ipam ?? {}) },
    gc: { ...DEFAULT_CONFIG.gc, ...(given.gc ?? {}) },
    multiNetwork: { ...DEFAULT_CONFIG.multiNetwork, ...(given.multiNetwork ?? {}) },
    routing: {
      ...DEFAULT_CONFIG.routing,
      ...(given.routing ?? {}),
      vxlan: { ...DEFAULT_CONFIG.routing.vxlan, ...(given.routing?.vxlan ?? {}) },
    },
    masquerade: { ...DEFAULT_CONFIG.masquerade, ...(given.masquerade ?? {}) },
    ...Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)),
  };
  const validate = new Ajv({ allErrors: true }).compile(DaemonConfigSchema);
  if (!validate(merged)) {
    throw new ConfigError(`invalid configuration: ${describeIssues(validate.errors)}`);
  }
  const config = merged as DaemonConfig;
  if (config.standalone && config.ipam.mode !== "local") {
    throw new ConfigError(
      `invalid configuration: ipam.mode ${config.ipam.mode} needs Kubernetes (not standalone)`,
    );
  }
  if (config.standalone && config.routing.mode !== "none") {
    throw new ConfigError(
      "invalid configuration: routing needs Kubernetes to learn the other nodes",
    );
  }
  return config;
}

/** Reads a JSON config file (or none) and resolves it. */
export async function loadConfig(
  path: string | undefined,
  overrides: ConfigOverrides = {},
): Promise<DaemonConfig> {
  if (!path) return resolveConfig(undefined, overrides);
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (e) {
    throw new ConfigError(
      `cannot read configuration ${path}: ${e instanceof Error ? e.message : e}`,
    );
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw new ConfigError(
      `configuration ${path} is not valid JSON: ${e instanceof Error ? e.message : e}`,
    );
  }
  return resolveConfig(parsed, overrides);
}
