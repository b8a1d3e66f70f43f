/**
 * CNI spec versions: which ones Ferry speaks, what each allows, and how a result is converted
 * between them. Pure functions, no I/O; the shim and the daemon share them.
 *
 * @module
 */
import type { CniResult, IpConfig, Route } from "./schemas.ts";
import { CNI_ERROR, CniError } from "./errors.ts";

/** The spec versions Ferry supports, oldest first. */
export const SUPPORTED_VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] as const;

/** The newest supported version: the daemon's internal result form. */
export const CURRENT_VERSION = "1.1.0";

/** A supported spec version. */
export type SupportedVersion = (typeof SUPPORTED_VERSIONS)[number];

/** The CNI commands. */
export type CniCommand = "ADD" | "DEL" | "CHECK" | "STATUS" | "GC" | "VERSION";

/** Compares two dotted versions numerically: negative, zero or positive. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split(".").map(Number);
  const pb = b.split(".").map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** True when `version` is one Ferry supports. */
export function isSupportedVersion(version: unknown): version is SupportedVersion {
  return typeof version === "string" && (SUPPORTED_VERSIONS as readonly string[]).includes(version);
}

/**
 * Checks that `version` may carry `command`: CHECK needs 0.4.0, STATUS and GC need 1.1.0.
 *
 * @throws {CniError} code 1 (incompatible version) otherwise.
 */
export function assertCommandAllowed(command: CniCommand, version: string): void {
  const needs: Partial<Record<CniCommand, string>> = {
    CHECK: "0.4.0",
    STATUS: "1.1.0",
    GC: "1.1.0",
  };
  const min = needs[command];
  if (min && compareVersions(version, min) < 0) {
    throw new CniError(
      CNI_ERROR.INCOMPATIBLE_VERSION,
      `config version ${version} does not allow ${command}`,
      `${command} needs cniVersion ${min} or later`,
    );
  }
}

/**
 * Converts a result in any supported version to the current (1.1.0) form: drops the 0.3/0.4
 * `version` of each IP.
 */
export function upgradeResult(result: CniResult): CniResult {
  const ips = result.ips?.map(({ version: _v, ...ip }) => ip);
  return { ...result, cniVersion: CURRENT_VERSION, ...(ips ? { ips } : {}) };
}

/**
 * Converts a current (1.1.0) result to `target`: 0.3.x/0.4.0 get `version` "4"/"6" on each IP;
 * versions before 1.1.0 lose the fields 1.1.0 added (route mtu, advmss, priority, table, scope;
 * interface mtu, socketPath, pciID).
 *
 * @example
 * ```ts
 * convertResult({ cniVersion: "1.1.0", ips: [{ address: "10.0.0.2/24" }] }, "0.4.0").ips;
 * // [{ version: "4", address: "10.0.0.2/24" }]
 * ```
 */
export function convertResult(result: CniResult, target: string): CniResult {
  if (!isSupportedVersion(target)) {
    throw new CniError(CNI_ERROR.INCOMPATIBLE_VERSION, `unsupported cniVersion ${target}`);
  }
  const legacy = compareVersions(target, "1.0.0") < 0;
  const pre11 = compareVersions(target, "1.1.0") < 0;
  const out: CniResult = { cniVersion: target };
  if (result.interfaces) {
    out.interfaces = result.interfaces.map(({ mtu, socketPath, pciID, ...i }) =>
      pre11 ? i : { ...i, ...defined({ mtu, socketPath, pciID }) }
    );
  }
  if (result.ips) out.ips = result.ips.map((ip) => convertIp(ip, legacy));
  if (result.routes) out.routes = result.routes.map((r) => convertRoute(r, pre11));
  if (result.dns) out.dns = { ...result.dns };
  return out;
}

function defined<T extends Record<string, unknown>>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

function convertIp(ip: IpConfig, legacy: boolean): IpConfig {
  const { version: _v, ...rest } = ip;
  if (!legacy) return rest;
  return { version: rest.address.includes(":") ? "6" : "4", ...rest };
}

function convertRoute(route: Route, pre11: boolean): Route {
  if (!pre11) return { ...route };
  return route.gw === undefined ? { dst: route.dst } : { dst: route.dst, gw: route.gw };
}
