/**
 * The daemon's configuration: one schema, defaults in one place, loaded from a JSON file and
 * overridden by command-line flags. Invalid configuration stops the daemon with a message naming
 * the field.
 *
 * @module
 */
import type { DaemonConfig } from "./config_schema.ts";
import { validateDaemonConfig } from "../lib/_generated/validateDaemonConfig.js";
import { describeIssues, type ValidateFunction } from "../lib/validate.ts";
import { DEFAULT_SOCKET } from "../lib/socket_api.ts";

/** The daemon configuration. */
export type { DaemonConfig } from "./config_schema.ts";

/** Every default, in one place. */
export const DEFAULT_CONFIG: DaemonConfig = {
  socket: DEFAULT_SOCKET,
  nodeName: Deno.hostname(),
  allowInsecureTls: false,
  standalone: false,
  podWaitSeconds: 60,
  apiRequestTimeoutSeconds: 30,
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
  nice: -10,
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
  const validate: ValidateFunction = validateDaemonConfig;
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
