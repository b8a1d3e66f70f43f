/**
 * Errors of the Kubernetes API as typed values: the HTTP status and the `Status` object's
 * `reason` (the two 409s, `Conflict` and `AlreadyExists`, mean different things).
 *
 * @module
 */

/** An error answer of the API server. */
export class KubeApiError extends Error {
  /** The HTTP status (or the `code` of an in-stream ERROR event). */
  readonly status: number;
  /** The Status reason, e.g. `Conflict`, `AlreadyExists`, `Expired`, `NotFound`. */
  readonly reason: string;

  /** Creates the error. */
  constructor(status: number, reason: string, message: string) {
    super(`${status} ${reason}: ${message}`);
    this.name = "KubeApiError";
    this.status = status;
    this.reason = reason;
  }

  /** 409 Conflict: an update with a stale resourceVersion. */
  get isConflict(): boolean {
    return this.status === 409 && this.reason === "Conflict";
  }
  /** 409 AlreadyExists: a create of a name that exists. */
  get isAlreadyExists(): boolean {
    return this.status === 409 && this.reason === "AlreadyExists";
  }
  /** 404. */
  get isNotFound(): boolean {
    return this.status === 404;
  }
  /**
   * 422 naming `metadata.uid`: a write that carried the UID of the object it meant (a
   * precondition on its identity) reached another object of the same name.
   */
  get isUidMismatch(): boolean {
    return this.status === 422 && this.message.includes("metadata.uid");
  }
  /** 410 Gone / Expired: the resourceVersion is too old; re-list. */
  get isGone(): boolean {
    return this.status === 410;
  }
}

/** A Kubernetes `Status` object. */
export interface KubeStatus {
  /** Always "Status". */
  kind?: string;
  /** "Failure" for errors. */
  status?: string;
  /** Human-readable. */
  message?: string;
  /** Machine-readable. */
  reason?: string;
  /** The HTTP code. */
  code?: number;
}

/** Builds the error from a Status body (or whatever the server sent). */
export function kubeErrorFrom(status: number, body: unknown): KubeApiError {
  const s = (body && typeof body === "object" ? body : {}) as KubeStatus;
  return new KubeApiError(
    s.code ?? status,
    s.reason ?? "Unknown",
    s.message ?? String(body).slice(0, 300),
  );
}

/** The API server could not be reached at all (connection refused, TLS failure, timeout). */
export class KubeUnreachableError extends Error {
  /** Creates the error. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "KubeUnreachableError";
  }
}
