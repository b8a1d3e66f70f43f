/**
 * CNI errors as typed values. Both the shim and the daemon raise {@link CniError}; it carries the
 * spec's error code and becomes wire JSON in exactly one place, {@link cniErrorToWire}.
 *
 * @module
 */

/**
 * The error codes of the CNI specification (1-99 are reserved by the spec) and Ferry's own codes
 * (100 and up, as the spec allows for plugin-specific errors).
 *
 * @example
 * ```ts
 * throw new CniError(CNI_ERROR.INVALID_CONFIG, "network name is missing");
 * ```
 */
export const CNI_ERROR = {
  /** The plugin does not support the cniVersion of the config. */
  INCOMPATIBLE_VERSION: 1,
  /** The config contains a field the plugin does not support. */
  UNSUPPORTED_FIELD: 2,
  /** The container is unknown or does not exist. */
  UNKNOWN_CONTAINER: 3,
  /** A required CNI_* environment variable is missing or invalid. */
  INVALID_ENV: 4,
  /** An I/O failure, e.g. a netlink operation that failed. */
  IO_FAILURE: 5,
  /** Stdin (or a message) could not be decoded. */
  DECODE_FAILURE: 6,
  /** The network config is invalid. */
  INVALID_CONFIG: 7,
  /** A transient failure: the runtime should retry later. */
  TRY_AGAIN_LATER: 11,
  /** STATUS: the plugin cannot serve ADD requests. */
  PLUGIN_NOT_AVAILABLE: 50,
  /** STATUS: not available, and existing containers may have limited connectivity. */
  LIMITED_CONNECTIVITY: 51,
  /** Ferry: CHECK found the live interface state different from the recorded result. */
  CHECK_MISMATCH: 100,
  /** Ferry: the address pool of the network has no free address. */
  ADDRESSES_EXHAUSTED: 101,
  /** Ferry: an unexpected internal failure (a bug); details carry the cause. */
  INTERNAL: 999,
} as const;

/** One of the numeric codes in {@link CNI_ERROR}. */
export type CniErrorCode = (typeof CNI_ERROR)[keyof typeof CNI_ERROR];

/** The spec's error object, as printed on stdout. */
export interface CniErrorWire {
  /** The cniVersion of the request the error answers. */
  cniVersion: string;
  /** The error code. */
  code: number;
  /** A short message. */
  msg: string;
  /** Longer details, possibly empty. */
  details?: string;
}

/**
 * An error with a CNI error code.
 *
 * @example
 * ```ts
 * const err = new CniError(CNI_ERROR.TRY_AGAIN_LATER, "daemon not answering", "socket /run/ferry.sock");
 * err.code; // 11
 * ```
 */
export class CniError extends Error {
  /** The CNI error code. */
  readonly code: number;
  /** Longer details for the runtime's logs. */
  readonly details: string;

  /** Creates an error with `code`, a short message and optional details. */
  constructor(code: number, msg: string, details = "", options?: ErrorOptions) {
    super(msg, options);
    this.name = "CniError";
    this.code = code;
    this.details = details;
  }
}

/**
 * Turns anything thrown into a {@link CniError}: a CniError stays as it is, anything else becomes
 * {@link CNI_ERROR.INTERNAL} with the original message in the details.
 */
export function toCniError(err: unknown, fallbackCode: number = CNI_ERROR.INTERNAL): CniError {
  if (err instanceof CniError) return err;
  const text = err instanceof Error ? err.message : String(err);
  return new CniError(fallbackCode, "internal error", text, { cause: err });
}

/**
 * The one place where an error becomes its wire form.
 *
 * @example
 * ```ts
 * cniErrorToWire(new CniError(7, "bad config"), "1.1.0");
 * // { cniVersion: "1.1.0", code: 7, msg: "bad config" }
 * ```
 */
export function cniErrorToWire(err: unknown, cniVersion: string): CniErrorWire {
  const e = toCniError(err);
  const wire: CniErrorWire = { cniVersion, code: e.code, msg: e.message };
  if (e.details) wire.details = e.details;
  return wire;
}

/** Turns a wire error (from the daemon) back into a {@link CniError}. */
export function cniErrorFromWire(wire: Pick<CniErrorWire, "code" | "msg" | "details">): CniError {
  return new CniError(wire.code, wire.msg, wire.details ?? "");
}
