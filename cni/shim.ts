/**
 * The shim's protocol logic: one invocation in, one stdout text and exit code out. VERSION is
 * answered here; every other command goes to the daemon through the `send` collaborator, and its
 * reply is printed in the cniVersion the config asked for. Effects (env, stdin, socket) are
 * handed in by `cni/main.ts`, so tests drive this with fakes.
 *
 * @module
 */
import { CNI_ERROR, CniError, cniErrorFromWire, cniErrorToWire } from "../lib/cni/errors.ts";
import { convertResult, CURRENT_VERSION, SUPPORTED_VERSIONS } from "../lib/cni/versions.ts";
import type { CniReply, CniRequest } from "../lib/envelope.ts";
import { timeoutSecondsOf } from "../lib/cni/ferry_conf.ts";
import { type CniEnv, parseInvocation, requestedVersion } from "./invocation.ts";
import { SocketUnavailableError } from "../lib/unix_http.ts";

/** Sends a request to the daemon and returns its decoded JSON reply. */
export type SendToDaemon = (request: CniRequest, signal: AbortSignal) => Promise<unknown>;

/** What the shim prints and how it exits. */
export interface ShimOutcome {
  /** Stdout: a result, a VERSION answer, an error object, or nothing. */
  stdout: string;
  /** 0 on success, 1 on error. */
  exitCode: number;
  /** A line for stderr (the runtime logs it), when there is something to say besides stdout. */
  note?: string;
}

/**
 * Runs one CNI invocation.
 *
 * @example
 * ```ts
 * const out = await runShim({ CNI_COMMAND: "VERSION" }, "{}", send);
 * out.stdout; // {"cniVersion":"1.1.0","supportedVersions":[...]}
 * ```
 */
export async function runShim(
  env: CniEnv,
  stdin: string,
  send: SendToDaemon,
): Promise<ShimOutcome> {
  // The version an error is labelled with: the config's once it parsed, else a best guess
  // (worked out only on that path: stdin is parsed once when all is well).
  let version: string | undefined;
  try {
    const inv = parseInvocation(env, stdin);
    version = inv.cniVersion;
    if (inv.command === "VERSION") {
      const info = { cniVersion: CURRENT_VERSION, supportedVersions: [...SUPPORTED_VERSIONS] };
      return { stdout: JSON.stringify(info), exitCode: 0 };
    }
    const asIpam = ipamCallOf(inv.request.config);
    if (asIpam) {
      // Exec'ed as an IPAM plugin: nothing was ever allocated this way, so DEL has nothing to do.
      if (inv.command === "DEL") return { stdout: "", exitCode: 0, note: `ferry: ${asIpam}` };
      throw new CniError(CNI_ERROR.INVALID_CONFIG, asIpam);
    }
    const timeout = timeoutSecondsOf(inv.request.config);
    let raw: unknown;
    try {
      raw = await send(inv.request, AbortSignal.timeout(timeout * 1000));
    } catch (e) {
      // DEL with no daemon at all (socket missing or refusing): succeed rather than leave the pod
      // Terminating for as long as the daemon is away. Nothing leaks: the daemon's reconcile loop
      // releases what that DEL would have, right after it is back (pod gone or namespace gone).
      if (
        inv.command === "DEL" && e instanceof CniError && e.cause instanceof SocketUnavailableError
      ) {
        return {
          stdout: "",
          exitCode: 0,
          note: `ferry: ${e.message}; DEL of ${inv.request.containerId}/${inv.request.ifname} ` +
            "answered success; the daemon releases it when it is back",
        };
      }
      throw e;
    }
    const reply = decodeReply(raw);
    if (reply.error) throw cniErrorFromWire(reply.error);
    if (inv.command !== "ADD") return { stdout: "", exitCode: 0 };
    if (!reply.result) {
      throw new CniError(CNI_ERROR.IO_FAILURE, "the Ferry daemon sent no result for ADD");
    }
    let printed: string;
    try {
      printed = JSON.stringify(convertResult(reply.result, version));
    } catch (e) {
      if (e instanceof CniError) throw e;
      throw unreadable(String(e));
    }
    return { stdout: printed, exitCode: 0 };
  } catch (err) {
    return {
      stdout: JSON.stringify(cniErrorToWire(err, version ?? requestedVersion(stdin))),
      exitCode: 1,
    };
  }
}

/**
 * Why the shim was exec'ed as an IPAM plugin (a network of another type whose `ipam.type` is
 * `ferry`: a plugin Ferry does not plug itself, run by the runtime or a meta-plugin, looked for
 * the IPAM binary of that name and found this one), or undefined for a call of Ferry's own
 * network. Ferry's IPAM type is served inside the daemon, while it plugs the NAD.
 */
export function ipamCallOf(config: { type?: unknown; name?: unknown; ipam?: unknown }) {
  if (config.type === "ferry" || !isObject(config.ipam) || config.ipam.type !== "ferry") {
    return undefined;
  }
  return `network ${String(config.name)}: ipam.type: the ${
    JSON.stringify(config.type)
  } plugin runs the IPAM type "ferry" as a binary; Ferry serves it inside its daemon only for the ` +
    "macvlan, ipvlan and bridge NADs it plugs itself (see docs/ipam.md)";
}

function unreadable(details: string): CniError {
  return new CniError(CNI_ERROR.IO_FAILURE, "invalid reply from the Ferry daemon", details);
}

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);

/**
 * Decodes the daemon's reply cheaply: an error with an integer code and a message, or a result
 * whose lists are lists of objects and whose addresses are strings. Anything else is code 5.
 */
export function decodeReply(raw: unknown): CniReply {
  if (!isObject(raw)) throw unreadable("the reply is not an object");
  const { error, result } = raw;
  if (error !== undefined) {
    if (
      !isObject(error) || !Number.isInteger(error.code) || (error.code as number) < 1 ||
      typeof error.msg !== "string" ||
      (error.details !== undefined && typeof error.details !== "string")
    ) {
      throw unreadable("/error: not a CNI error");
    }
  }
  if (result !== undefined) {
    if (!isObject(result) || typeof result.cniVersion !== "string") {
      throw unreadable("/result: not a CNI result");
    }
    for (const list of ["interfaces", "ips", "routes"] as const) {
      const items = result[list];
      if (items === undefined) continue;
      if (!Array.isArray(items) || !items.every(isObject)) {
        throw unreadable(`/result/${list}: not a list of objects`);
      }
    }
    const ips = (result.ips ?? []) as Record<string, unknown>[];
    const routes = (result.routes ?? []) as Record<string, unknown>[];
    if (!ips.every((ip) => typeof ip.address === "string")) {
      throw unreadable("/result/ips: an entry without an address");
    }
    if (!routes.every((r) => typeof r.dst === "string")) {
      throw unreadable("/result/routes: an entry without a destination");
    }
    if (result.dns !== undefined && !isObject(result.dns)) {
      throw unreadable("/result/dns: not an object");
    }
  }
  return raw as CniReply;
}
