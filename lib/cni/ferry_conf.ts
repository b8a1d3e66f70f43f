/**
 * The fields a Ferry network config carries beyond the CNI ones that the shim itself reads:
 * `timeoutSeconds`, how long the shim waits for the daemon. Both the shim and the daemon check it
 * the same way (the daemon because its socket is the trust boundary). No heavy imports.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "./errors.ts";

/** The time the shim waits for the daemon when the config names none. */
export const DEFAULT_TIMEOUT_SECONDS = 150;
/** The longest wait a config may ask for (an hour: far past any runtime's own CNI deadline). */
export const MAX_TIMEOUT_SECONDS = 3600;

/**
 * The config's `timeoutSeconds`, or the default when it names none.
 *
 * @throws {CniError} code 7 when it is not a number in (0, {@link MAX_TIMEOUT_SECONDS}].
 * @example
 * ```ts
 * timeoutSecondsOf({ timeoutSeconds: 30 }); // 30
 * timeoutSecondsOf({}); // 150
 * ```
 */
export function timeoutSecondsOf(config: Record<string, unknown>): number {
  const t = config.timeoutSeconds;
  if (t === undefined) return DEFAULT_TIMEOUT_SECONDS;
  if (typeof t !== "number" || !Number.isFinite(t) || t <= 0 || t > MAX_TIMEOUT_SECONDS) {
    throw new CniError(
      CNI_ERROR.INVALID_CONFIG,
      "invalid network config",
      `/timeoutSeconds: must be a number of seconds above 0 and at most ${MAX_TIMEOUT_SECONDS}, got ${
        JSON.stringify(t)
      }`,
    );
  }
  return t;
}
