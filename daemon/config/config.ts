/**
 * The daemon's configuration: one schema, defaults in one place, loaded from a JSON file and
 * overridden by command-line flags. Invalid configuration stops the daemon with a message naming
 * the field.
 *
 * @module
 */
import type { DaemonConfig } from "./schema.ts";
import { validateDaemonConfig } from "../../lib/_generated/validateDaemonConfig.js";
import type { ValidateFunction, ValidationIssue } from "../../lib/validate.ts";
import { parseCidr, parseIp } from "../ipam/cidr.ts";
import { DEFAULT_SOCKET } from "../../lib/socket_api.ts";

/** The daemon configuration. */
export type { DaemonConfig } from "./schema.ts";

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
  sysctlDir: "/proc/sys",
  stagedConflist: "",
  cniConfDir: "/etc/cni/net.d",
  network: {
    subnet: "10.244.0.0/24",
    bridge: "ferry0",
    forwarding: true,
    plumbing: "netlink",
    mtu: 1500,
  },
  ipam: { mode: "local", pools: ["default"], blockReleaseSeconds: 300, reuseDelaySeconds: 5 },
  multiVifDrivers: ["npwg"],
  multiNetwork: {
    allowCrossNamespace: false,
    interfacePrefix: "net",
    configDir: "/etc/cni/multus/net.d",
    allowedTypes: ["*"],
    passthruParents: [],
    anyMacParents: [],
    whereaboutsIpam: "delegate",
    sharedWhereaboutsSpaces: [],
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
    metricsHost: "0.0.0.0",
    metricsPort: -1,
    metricsDetailTokenFile: "",
  },
  shutdownTimeoutSeconds: 10,
  nice: -10,
  logLevel: "info",
  logFormat: "json",
  policy: {
    enabled: true,
    table: "ferry-policy",
    logDenied: false,
    logGroup: 31742,
    logPerSecond: 10,
    limits: { policyEntries: 1000, namespaceEntries: 10_000 },
  },
  portSecurity: { enabled: true, table: "ferry-portsec", allowSourcePrefixesAnnotation: false },
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
  /** `--sysctl-dir` */
  sysctlDir?: string;
  /** `--staged-conflist` */
  stagedConflist?: string;
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
  const given = (file ?? {}) as Record<string, unknown>;
  // Every section of the file goes over its defaults (a section given in part keeps the rest),
  // and so do the nested sections (routing.vxlan, policy.limits).
  const merged: Record<string, unknown> = { ...DEFAULT_CONFIG, ...given };
  for (const [key, defaults] of Object.entries(DEFAULT_CONFIG)) {
    if (isObject(defaults)) merged[key] = section(given[key], defaults);
  }
  const routing = merged.routing;
  if (isObject(routing)) {
    merged.routing = { ...routing, vxlan: section(routing.vxlan, DEFAULT_CONFIG.routing.vxlan) };
  }
  const policy = merged.policy;
  if (isObject(policy)) {
    merged.policy = { ...policy, limits: section(policy.limits, DEFAULT_CONFIG.policy.limits) };
  }
  Object.assign(
    merged,
    Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)),
  );
  const validate: ValidateFunction = validateDaemonConfig;
  if (!validate(merged)) {
    throw new ConfigError(
      `invalid configuration: ${describeConfigIssues(validate.errors, merged)}`,
    );
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
  const wrong = addressProblems(config);
  if (wrong.length) throw new ConfigError(`invalid configuration: ${wrong.join("; ")}`);
  return config;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * A section of the file over its defaults. A value that is not an object is kept as given, so that
 * validation refuses it by name (`"masquerade": false` is not `{"enabled": false}`).
 */
function section<T extends object>(given: unknown, defaults: T): unknown {
  if (given === undefined) return defaults;
  return isObject(given) ? { ...defaults, ...given } : given;
}

/** The keys a section takes, for messages about a section given as something else. */
function keysAt(path: string): string[] | undefined {
  let at: unknown = DEFAULT_CONFIG;
  for (const part of path.split("/").filter(Boolean)) {
    at = isObject(at) ? at[part] : undefined;
  }
  return isObject(at) ? Object.keys(at) : undefined;
}

/**
 * Validation issues as a person reads them: one message per problem and key, the allowed values
 * of an enumeration listed, a section given as something else named with the keys it takes.
 */
export function describeConfigIssues(
  issues: ValidationIssue[] | null | undefined,
  data?: unknown,
): string {
  if (!issues?.length) return "does not match its schema";
  const byPath = new Map<string, ValidationIssue[]>();
  for (const i of issues) {
    const path = i.instancePath || "/";
    byPath.set(path, [...(byPath.get(path) ?? []), i]);
  }
  const out: string[] = [];
  for (const [path, list] of byPath) {
    const key = path.slice(1).replaceAll("/", ".") || "the configuration";
    const allowed = list.filter((i) => i.params && "allowedValue" in i.params)
      .map((i) => JSON.stringify(i.params!.allowedValue));
    const enumValues = list.flatMap((i) =>
      Array.isArray(i.params?.allowedValues)
        ? i.params.allowedValues.map((v) => JSON.stringify(v))
        : []
    );
    const choices = [...allowed, ...enumValues];
    if (choices.length) {
      out.push(`${key} must be one of ${choices.join(", ")}`);
      continue;
    }
    const typeIssue = list.find((i) => i.params && "type" in i.params);
    if (typeIssue?.params?.type === "object") {
      const keys = keysAt(path);
      out.push(
        `${key} must be an object` +
          (keys
            ? ` (with keys ${keys.join(", ")}), e.g. ${example(path, valueAt(data, path))}`
            : ""),
      );
      continue;
    }
    if (typeIssue) {
      out.push(`${key} ${typeIssue.message ?? "has the wrong type"}`);
      continue;
    }
    const messages = [...new Set(list.map((i) => extra(i) ?? i.message ?? "is invalid"))];
    out.push(`${key} ${messages.join(", ")}`);
  }
  return out.join("; ");
}

function extra(i: ValidationIssue): string | undefined {
  const name = i.params?.additionalProperty;
  return typeof name === "string" ? `has an unknown key ${JSON.stringify(name)}` : undefined;
}

function valueAt(data: unknown, path: string): unknown {
  let at = data;
  for (const part of path.split("/").filter(Boolean)) at = isObject(at) ? at[part] : undefined;
  return at;
}

/**
 * An example of a section given right: its first key with the value given for the section when
 * that is a scalar (`"routing": "host-gw"` → `{"mode":"host-gw"}`), else with its default.
 */
function example(path: string, given: unknown): string {
  const keys = keysAt(path) ?? [];
  const at = valueAt(DEFAULT_CONFIG, path);
  const first = keys[0];
  if (!first || !isObject(at)) return "{}";
  const scalar = typeof given === "string" || typeof given === "boolean";
  return JSON.stringify({
    [first]: scalar && typeof at[first] === typeof given ? given : at[first],
  });
}

/**
 * CIDRs and addresses, checked before anything (an nft script, the bridge) sees them: each wrong
 * one named by its key, and a pod range too small to hold a gateway and a pod said as such.
 */
function addressProblems(config: DaemonConfig): string[] {
  const problems: string[] = [];
  const cidr = (key: string, text: string | undefined) => {
    if (text === undefined) return undefined;
    try {
      return parseCidr(text);
    } catch {
      problems.push(`${key} ${JSON.stringify(text)} is not a CIDR (such as 10.244.0.0/24)`);
      return undefined;
    }
  };
  const address = (key: string, text: string | undefined) => {
    if (text === undefined) return;
    try {
      parseIp(text);
    } catch {
      problems.push(`${key} ${JSON.stringify(text)} is not an IP address`);
    }
  };
  const wanted = { "network.subnet": 4, "network.subnet6": 6 } as const;
  for (
    const [key, text] of [
      ["network.subnet", config.network.subnet],
      ["network.subnet6", config.network.subnet6],
    ] as const
  ) {
    const c = cidr(key, text);
    if (!c) continue;
    if (config.network.subnet6 && c.network.family !== wanted[key]) {
      problems.push("network.subnet must be IPv4 and subnet6 IPv6 for dual stack");
      continue;
    }
    const bits = c.network.family === 4 ? 32 : 128;
    if (bits - c.prefix < 2) {
      problems.push(
        `${key} ${text} is too small for pods: a /${c.prefix} has no room for a gateway and a ` +
          `pod; use a /${bits - 2} or larger (such as ${
            c.network.family === 4 ? "10.244.0.0/24" : "fd00:10:244::/64"
          })`,
      );
    }
  }
  address("network.rangeStart", config.network.rangeStart);
  address("network.rangeEnd", config.network.rangeEnd);
  address("network.gateway", config.network.gateway);
  config.masquerade.nonMasqueradeCIDRs.forEach((text, i) =>
    cidr(`masquerade.nonMasqueradeCIDRs[${i}]`, text)
  );
  return problems;
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
