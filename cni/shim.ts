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
import { checkShape } from "../lib/validate.ts";
import { timeoutSecondsOf } from "../lib/cni/ferry_conf.ts";
import { validateCniReply } from "../lib/_generated/validateCniReply.js";
import { type CniEnv, parseInvocation, requestedVersion } from "./invocation.ts";

/** Sends a request to the daemon and returns its decoded JSON reply. */
export type SendToDaemon = (request: CniRequest, signal: AbortSignal) => Promise<unknown>;

/** What the shim prints and how it exits. */
export interface ShimOutcome {
  /** Stdout: a result, a VERSION answer, an error object, or nothing. */
  stdout: string;
  /** 0 on success, 1 on error. */
  exitCode: number;
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
  let version = requestedVersion(stdin);
  try {
    const inv = parseInvocation(env, stdin);
    version = inv.cniVersion;
    if (inv.command === "VERSION") {
      const info = { cniVersion: CURRENT_VERSION, supportedVersions: [...SUPPORTED_VERSIONS] };
      return { stdout: JSON.stringify(info), exitCode: 0 };
    }
    const timeout = timeoutSecondsOf(inv.request.config);
    const reply = checkShape<CniReply>(
      validateCniReply,
      await send(inv.request, AbortSignal.timeout(timeout * 1000)),
      CNI_ERROR.IO_FAILURE,
      "reply from the Ferry daemon",
    );
    if (reply.error) throw cniErrorFromWire(reply.error);
    if (inv.command !== "ADD") return { stdout: "", exitCode: 0 };
    if (!reply.result) {
      throw new CniError(CNI_ERROR.IO_FAILURE, "the Ferry daemon sent no result for ADD");
    }
    return { stdout: JSON.stringify(convertResult(reply.result, version)), exitCode: 0 };
  } catch (err) {
    return { stdout: JSON.stringify(cniErrorToWire(err, version)), exitCode: 1 };
  }
}
