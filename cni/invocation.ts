/**
 * The CNI protocol's inputs, parsed: the CNI_* environment and the network config on stdin become
 * one typed {@link CniRequest}, or a {@link CniError} with the spec's code. Pure: the environment
 * and stdin arrive as plain values.
 *
 * The shim checks only what it needs to answer on its own: the command, the variables, that
 * stdin is a JSON object of a supported version allowing the command, and `timeoutSeconds`. The
 * config's schema is the daemon's to check (it checks every request in full, with the same code
 * 7): validating it here too cost every pod a compiled validator at the shim's start.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../lib/cni/errors.ts";
import { parseCniArgs } from "../lib/cni/args.ts";
import type { NetConf } from "../lib/cni/schemas.ts";
import {
  assertCommandAllowed,
  type CniCommand,
  CURRENT_VERSION,
  isSupportedVersion,
} from "../lib/cni/versions.ts";
import type { CniRequest } from "../lib/envelope.ts";
import { jsonBoundsProblem, MAX_CONFIG_DEPTH } from "../lib/json_bounds.ts";
import { containerIdProblem, netnsProblem } from "../lib/cni/names.ts";

/** The environment variables the CNI protocol defines; the shim may read no others. */
export const CNI_ENV_VARS = [
  "CNI_COMMAND",
  "CNI_CONTAINERID",
  "CNI_NETNS",
  "CNI_IFNAME",
  "CNI_ARGS",
  "CNI_PATH",
] as const;

/** The CNI environment as a plain record. */
export type CniEnv = Partial<Record<(typeof CNI_ENV_VARS)[number], string>>;

const COMMANDS: readonly CniCommand[] = ["ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION"];

/** Which variables each command requires (as libcni's skel does). */
const REQUIRED: Record<Exclude<CniCommand, "VERSION">, (keyof CniEnv)[]> = {
  ADD: ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
  CHECK: ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
  DEL: ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"],
  STATUS: ["CNI_PATH"],
  GC: ["CNI_PATH"],
};

/** A parsed invocation: either VERSION (answered locally) or a request for the daemon. */
export type Invocation =
  | { command: "VERSION"; cniVersion: string }
  | { command: Exclude<CniCommand, "VERSION">; cniVersion: string; request: CniRequest };

/**
 * Best effort: the cniVersion stdin asks for, used to label an error before the config is known
 * to be valid. Falls back to the current version.
 */
export function requestedVersion(stdin: string): string {
  try {
    const v = JSON.parse(stdin)?.cniVersion;
    return isSupportedVersion(v) ? v : CURRENT_VERSION;
  } catch {
    return CURRENT_VERSION;
  }
}

/**
 * Parses the command. An absent or unknown command is code 4.
 *
 * @example
 * ```ts
 * parseCommand({ CNI_COMMAND: "ADD" }); // "ADD"
 * ```
 */
export function parseCommand(env: CniEnv): CniCommand {
  const command = env.CNI_COMMAND;
  if (!command) {
    throw new CniError(CNI_ERROR.INVALID_ENV, "required env variable CNI_COMMAND is missing");
  }
  if (!(COMMANDS as readonly string[]).includes(command)) {
    throw new CniError(CNI_ERROR.INVALID_ENV, `unknown CNI_COMMAND: ${command}`);
  }
  return command as CniCommand;
}

/**
 * Parses stdin as a network config: undecodable or not an object → 6, nested deeper than
 * {@link MAX_CONFIG_DEPTH} → 7, unsupported cniVersion → 1, command not allowed by that version → 1. The rest of the schema is left to the daemon.
 */
export function parseNetConf(stdin: string, command: CniCommand): NetConf {
  let raw: unknown;
  try {
    raw = JSON.parse(stdin);
  } catch (e) {
    throw new CniError(
      CNI_ERROR.DECODE_FAILURE,
      "failed to decode the network config on stdin",
      String(e),
    );
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    throw new CniError(
      CNI_ERROR.DECODE_FAILURE,
      "the network config on stdin is not a JSON object",
    );
  }
  // Bounded before anything walks it (every walk recurses once per level); JSON.parse itself
  // does not recurse, so text that is not JSON stays a decoding error (6).
  const unbounded = jsonBoundsProblem(stdin, { maxDepth: MAX_CONFIG_DEPTH });
  if (unbounded) {
    throw new CniError(CNI_ERROR.INVALID_CONFIG, `the network config on stdin: ${unbounded}`);
  }
  const version = (raw as { cniVersion?: unknown }).cniVersion;
  if (!isSupportedVersion(version)) {
    throw new CniError(
      CNI_ERROR.INCOMPATIBLE_VERSION,
      `incompatible CNI versions: config is ${JSON.stringify(version ?? "0.1.0")}`,
      "supported versions: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0",
    );
  }
  assertCommandAllowed(command, version);
  return raw as NetConf;
}

/** Validates an interface name as the kernel and skel do. */
function checkIfname(name: string): void {
  const bytes = new TextEncoder().encode(name).length;
  if (bytes > 15 || name === "." || name === ".." || /[\s/:]/.test(name)) {
    throw new CniError(CNI_ERROR.INVALID_ENV, `invalid CNI_IFNAME ${JSON.stringify(name)}`);
  }
}

/**
 * Parses the whole invocation: command, environment and stdin.
 *
 * @throws {CniError} with the spec's code for the first problem found.
 */
export function parseInvocation(env: CniEnv, stdin: string): Invocation {
  const command = parseCommand(env);
  if (command === "VERSION") return { command, cniVersion: requestedVersion(stdin) };
  const config = parseNetConf(stdin, command);
  for (const name of REQUIRED[command]) {
    if (!env[name]) {
      throw new CniError(CNI_ERROR.INVALID_ENV, `required env variable ${name} is missing`);
    }
  }
  const request: CniRequest = {
    command,
    args: parseCniArgs(env.CNI_ARGS),
    path: (env.CNI_PATH ?? "").split(":").filter((p) => p !== ""),
    config,
  };
  if (env.CNI_CONTAINERID) {
    const problem = containerIdProblem(env.CNI_CONTAINERID);
    if (problem) {
      throw new CniError(
        CNI_ERROR.INVALID_ENV,
        `invalid CNI_CONTAINERID: it ${problem}`,
        JSON.stringify(env.CNI_CONTAINERID.slice(0, 256)),
      );
    }
    request.containerId = env.CNI_CONTAINERID;
  }
  if (env.CNI_IFNAME) {
    checkIfname(env.CNI_IFNAME);
    request.ifname = env.CNI_IFNAME;
  }
  if (env.CNI_NETNS) {
    const problem = netnsProblem(env.CNI_NETNS);
    if (problem) {
      throw new CniError(
        CNI_ERROR.INVALID_ENV,
        `invalid CNI_NETNS: it ${problem}`,
        JSON.stringify(env.CNI_NETNS.slice(0, 256)),
      );
    }
    request.netns = env.CNI_NETNS;
  }
  return { command, cniVersion: config.cniVersion, request };
}
