/**
 * Decodes one CNI request that arrived on the daemon's socket and checks it fully, whatever sent
 * it: the socket is the trust boundary, not the shim. The same rules and codes as the shim's:
 * undecodable → 6; nested deeper than the config's bound (`lib/json_bounds.ts`) → 7; an unsupported `cniVersion`, or a command that version lacks → 1; a config (or
 * its `prevResult`) that breaks the schema → 7; a bad command or CNI variable → 4. Pure.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import { timeoutSecondsOf } from "../../lib/cni/ferry_conf.ts";
import { jsonBoundsProblem, MAX_CONFIG_DEPTH } from "../../lib/json_bounds.ts";
import type { CniResult } from "../../lib/cni/schemas.ts";
import {
  assertCommandAllowed,
  isSupportedVersion,
  SUPPORTED_VERSIONS,
} from "../../lib/cni/versions.ts";
import type { CniRequest } from "../../lib/envelope.ts";
import { describeIssues, type ValidateFunction, type ValidationIssue } from "../../lib/validate.ts";
import { validateCniRequest as generated } from "../../lib/_generated/validateCniRequest.js";

const validateCniRequest = generated as ValidateFunction;

const COMMANDS = new Set(["ADD", "DEL", "CHECK", "STATUS", "GC"]);

/**
 * Decodes and checks a request body.
 *
 * @throws {CniError} with the code of the first problem found.
 * @example
 * ```ts
 * const req = decodeRequest('{"command":"DEL","containerId":"c1","ifname":"eth0","args":{},"path":[],"config":{…}}');
 * ```
 */
export function decodeRequest(body: string): CniRequest {
  let raw: unknown;
  try {
    raw = JSON.parse(body);
  } catch (e) {
    throw new CniError(CNI_ERROR.DECODE_FAILURE, "request body is not JSON", String(e));
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    throw new CniError(CNI_ERROR.DECODE_FAILURE, "request body is not a JSON object");
  }
  // Bounded before anything walks it (JSON.parse itself does not recurse); the request wraps
  // the config in one more level.
  const unbounded = jsonBoundsProblem(body, { maxDepth: MAX_CONFIG_DEPTH + 1 });
  if (unbounded) {
    throw new CniError(CNI_ERROR.INVALID_CONFIG, `the request's network config: ${unbounded}`);
  }
  const { command, config } = raw as { command?: unknown; config?: unknown };
  if (typeof command !== "string" || !COMMANDS.has(command)) {
    throw new CniError(CNI_ERROR.INVALID_ENV, `unknown CNI command ${JSON.stringify(command)}`);
  }
  if (config === null || typeof config !== "object" || Array.isArray(config)) {
    throw new CniError(CNI_ERROR.DECODE_FAILURE, "the request carries no network config object");
  }
  checkVersion(command as CniRequest["command"], (config as { cniVersion?: unknown }).cniVersion);
  if (!validateCniRequest(raw)) throw shapeError(validateCniRequest.errors);
  const request = raw as CniRequest;
  const relative = request.path.find((dir) => !dir.startsWith("/"));
  if (relative !== undefined) {
    throw new CniError(
      CNI_ERROR.INVALID_ENV,
      `invalid CNI_PATH: ${JSON.stringify(relative)} is not an absolute directory`,
    );
  }
  if (request.config.prevResult) checkPrevResult(request.config.prevResult);
  timeoutSecondsOf(request.config);
  return request;
}

function checkVersion(command: CniRequest["command"], version: unknown): void {
  if (!isSupportedVersion(version)) {
    throw new CniError(
      CNI_ERROR.INCOMPATIBLE_VERSION,
      `incompatible CNI versions: config is ${JSON.stringify(version ?? "0.1.0")}`,
      `supported versions: ${SUPPORTED_VERSIONS.join(", ")}`,
    );
  }
  assertCommandAllowed(command, version);
}

/** Issues in the config are a bad config (7); anywhere else, a bad CNI variable (4). */
function shapeError(issues: ValidationIssue[] | null | undefined): CniError {
  const all = issues ?? [];
  const inConfig = all.length > 0 &&
    all.every((i) => i.instancePath.startsWith("/config"));
  return inConfig
    ? new CniError(CNI_ERROR.INVALID_CONFIG, "invalid network config", describeIssues(all))
    : new CniError(CNI_ERROR.INVALID_ENV, "invalid CNI request", describeIssues(all));
}

/**
 * A chained `prevResult` must be a result Ferry can read: a supported version, and every IP's
 * `interface` an index into its `interfaces`.
 *
 * @throws {CniError} code 1 for its version, code 7 for a dangling index.
 */
export function checkPrevResult(prev: CniResult): void {
  if (!isSupportedVersion(prev.cniVersion)) {
    throw new CniError(
      CNI_ERROR.INCOMPATIBLE_VERSION,
      `incompatible CNI versions: prevResult is ${JSON.stringify(prev.cniVersion)}`,
      `supported versions: ${SUPPORTED_VERSIONS.join(", ")}`,
    );
  }
  const count = prev.interfaces?.length ?? 0;
  for (const [n, ip] of (prev.ips ?? []).entries()) {
    if (ip.interface !== undefined && ip.interface >= count) {
      throw new CniError(
        CNI_ERROR.INVALID_CONFIG,
        "invalid network config",
        `/prevResult/ips/${n}/interface: ${ip.interface} names no interface (prevResult has ${count})`,
      );
    }
  }
}
