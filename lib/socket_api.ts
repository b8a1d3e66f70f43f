/**
 * The daemon's HTTP API on its unix socket: the paths, in one place for the daemon's router, the
 * shim and the tests. Plain constants, so the shim can import them without pulling in schemas.
 *
 * @module
 */

/** Where the daemon listens and the shim connects unless told otherwise. */
export const DEFAULT_SOCKET = "/run/ferry/ferry.sock";

/** `POST`: a CNI invocation (a {@link import("./envelope.ts").CniRequest}). */
export const CNI_REQUEST_PATH = "/v1/cni";
/** `GET`: liveness: 200 while the daemon works, 503 when it is stuck (e.g. lost its API watch). */
export const HEALTHZ_PATH = "/healthz";
/** `GET`: readiness: 200 once the daemon can serve ADD. */
export const READYZ_PATH = "/readyz";
/** `GET`: counters (CNI requests, API round trips on the CNI path, watch and registry state). */
export const STATS_PATH = "/v1/stats";
