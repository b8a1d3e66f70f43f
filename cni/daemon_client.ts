/**
 * Sends the shim's request to the daemon over its unix socket and maps transport failures to CNI
 * errors: nothing listening, or no answer in time, is code 11 (try again later) naming the socket.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../lib/cni/errors.ts";
import type { CniRequest } from "../lib/envelope.ts";
import { CNI_REQUEST_PATH } from "../lib/socket_api.ts";
import { SocketUnavailableError, unixRequest } from "../lib/unix_http.ts";
import type { SendToDaemon } from "./shim.ts";

/**
 * Returns a {@link SendToDaemon} bound to `socketPath`.
 *
 * @example
 * ```ts
 * const send = daemonSender("/run/ferry/ferry.sock");
 * ```
 */
export function daemonSender(socketPath: string): SendToDaemon {
  return async (request: CniRequest, signal: AbortSignal) => {
    let res;
    try {
      res = await unixRequest(
        socketPath,
        "POST",
        CNI_REQUEST_PATH,
        JSON.stringify(request),
        signal,
      );
    } catch (e) {
      if (e instanceof SocketUnavailableError) {
        throw new CniError(
          CNI_ERROR.TRY_AGAIN_LATER,
          `Ferry daemon is not listening on ${socketPath}`,
          "",
          { cause: e },
        );
      }
      if (signal.aborted) {
        throw new CniError(
          CNI_ERROR.TRY_AGAIN_LATER,
          `Ferry daemon did not answer in time on ${socketPath}`,
        );
      }
      throw new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        `Ferry daemon connection failed on ${socketPath}`,
        String(e),
      );
    }
    try {
      return JSON.parse(res.body);
    } catch {
      throw new CniError(
        CNI_ERROR.IO_FAILURE,
        `the Ferry daemon on ${socketPath} answered HTTP ${res.status} with a body that is not JSON`,
        res.body.slice(0, 200),
      );
    }
  };
}
