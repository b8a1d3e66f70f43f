/**
 * A request abandoned by its requester: the shim timed out (the API unreachable, the pod not yet
 * in the watch, a slow kernel) and closed its connection, so nobody reads the answer. Whatever
 * the request ended with then — the abort itself, or an ADD finished and rolled back — is not a
 * failure of the daemon: it is said as what it is, counted apart, and never as an internal error
 * (999, a bug).
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";

/**
 * The outcome of a request whose requester went away; what it had done is rolled back. Code 11
 * (try again later), should anyone still read it: the runtime's retry is served normally.
 *
 * @example
 * ```ts
 * throw new Abandoned("ADD", "c1", "eth0");
 * ```
 */
export class Abandoned extends CniError {
  /** The command abandoned. */
  readonly command: string;

  /** The outcome of `command` for `containerId`/`ifname`. */
  constructor(command: string, containerId = "-", ifname = "-", options?: ErrorOptions) {
    super(
      CNI_ERROR.TRY_AGAIN_LATER,
      `${command} of ${containerId}/${ifname} was abandoned by its requester` +
        (command === "ADD" ? " and rolled back" : ""),
      "",
      options,
    );
    this.name = "Abandoned";
    this.command = command;
  }
}

/**
 * `err` as an {@link Abandoned} when it is how a request whose requester went away ended (the
 * abort of `signal` itself, or an Abandoned already); otherwise `err` unchanged (a failure of its
 * own that happened to follow the hang-up stays what it is).
 *
 * @example
 * ```ts
 * await service.add(req, signal).catch((e) => { throw asAbandoned(e, signal, req); });
 * ```
 */
export function asAbandoned(
  err: unknown,
  signal: AbortSignal | undefined,
  req: { command: string; containerId?: string; ifname?: string },
): unknown {
  if (err instanceof Abandoned) return err;
  if (!signal?.aborted || err !== signal.reason) return err;
  return new Abandoned(req.command, req.containerId, req.ifname, { cause: err });
}
