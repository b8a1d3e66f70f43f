/**
 * The daemon's HTTP routes on its unix socket, readable at a glance: `POST /v1/cni`,
 * `GET /healthz`, `GET /readyz`, `GET /v1/stats`. Handlers are plain functions from a
 * {@link SocketRequest} to a {@link SocketReply}; the body limit and envelope validation are
 * small steps before the service is called.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { STATUS_CODE } from "deno-std/http/status.js";
import { CNI_ERROR, CniError, toCniError } from "../../lib/cni/errors.ts";
import type { CniResult } from "../../lib/cni/schemas.ts";
import type { CniReply, CniRequest } from "../../lib/envelope.ts";
import { CNI_REQUEST_PATH, HEALTHZ_PATH, READYZ_PATH, STATS_PATH } from "../../lib/socket_api.ts";
import { decodeRequest } from "./request.ts";
import type { SocketHandler, SocketReply, SocketRequest } from "./http1.ts";
import type { Undelivered } from "../service/cni_service.ts";
import { Abandoned } from "../service/abandoned.ts";

/** What the routes need. */
export interface RouterDeps {
  /**
   * Runs a CNI request; resolves to the ADD result or undefined. `signal` aborts when the
   * requester has gone; `undelivered` registers work to undo if the answer cannot be delivered.
   */
  handle: (
    req: CniRequest,
    signal: AbortSignal,
    undelivered: Undelivered,
  ) => Promise<CniResult | undefined>;
  /** Liveness. */
  isHealthy: () => boolean;
  /** Readiness. */
  isReady: () => boolean;
  /** What `/healthz` adds after `ok` (e.g. that the socket had to be created again). */
  healthNote?: () => string | undefined;
  /** What `/readyz` adds after `ok` (e.g. `degraded: …`: some nodes' pods cannot be reached). */
  readyNote?: () => string | undefined;
  /** Counters for `GET /v1/stats`. */
  stats: () => unknown;
  /** The largest request body accepted, in bytes. */
  maxRequestBytes: number;
  /** Where to log. */
  logger: Logger;
}

/** The HTTP status that goes with a CNI error code (the body carries the CNI error itself). */
export function httpStatusOf(code: number): number {
  switch (code) {
    case CNI_ERROR.DECODE_FAILURE:
    case CNI_ERROR.INVALID_CONFIG:
    case CNI_ERROR.INVALID_ENV:
    case CNI_ERROR.INCOMPATIBLE_VERSION:
    case CNI_ERROR.UNSUPPORTED_FIELD:
      return STATUS_CODE.BadRequest;
    case CNI_ERROR.UNKNOWN_CONTAINER:
      return STATUS_CODE.NotFound;
    case CNI_ERROR.TRY_AGAIN_LATER:
    case CNI_ERROR.PLUGIN_NOT_AVAILABLE:
    case CNI_ERROR.LIMITED_CONNECTIVITY:
      return STATUS_CODE.ServiceUnavailable;
    case CNI_ERROR.CHECK_MISMATCH:
      return STATUS_CODE.Conflict;
    default:
      return STATUS_CODE.InternalServerError;
  }
}

function json(body: unknown, status: number = STATUS_CODE.OK): SocketReply {
  return { status, contentType: "application/json", body: JSON.stringify(body) };
}

function errorReply(err: CniError, status = httpStatusOf(err.code)): SocketReply {
  const reply: CniReply = {
    error: { code: err.code, msg: err.message, ...(err.details ? { details: err.details } : {}) },
  };
  return json(reply, status);
}

/**
 * The answer to a request that never reached a route (malformed HTTP, too large, too slow, or
 * over the connection limit), as a CNI reply so that the shim prints a proper error: the limit
 * (503) is code 11, try again later; a failure of the server itself (500) is 999; anything else
 * is code 6, the request could not be decoded.
 */
export function protocolErrorReply(status: number, message: string): SocketReply {
  const code = status === STATUS_CODE.ServiceUnavailable
    ? CNI_ERROR.TRY_AGAIN_LATER
    : status >= 500 && status !== STATUS_CODE.NotImplemented
    ? CNI_ERROR.INTERNAL
    : CNI_ERROR.DECODE_FAILURE;
  return errorReply(new CniError(code, message), status);
}

const DECODER = new TextDecoder();

/**
 * The body as text; throws code 6 when it is over `limit` bytes. The socket's HTTP reader
 * ({@link import("./http1.ts")}) has already bounded it and hands it over whole.
 */
function bodyText(req: SocketRequest, limit: number): string {
  if (req.body.length > limit) {
    throw new CniError(CNI_ERROR.DECODE_FAILURE, `request body exceeds ${limit} bytes`);
  }
  return DECODER.decode(req.body);
}

/**
 * Creates the request handler.
 *
 * @example
 * ```ts
 * await serveOnSocket(path, createRouter(deps));
 * ```
 */
export function createRouter(deps: RouterDeps): SocketHandler {
  const routes: Record<string, (req: SocketRequest) => Promise<SocketReply> | SocketReply> = {
    [`POST ${CNI_REQUEST_PATH}`]: (req) => cni(deps, req),
    [`GET ${HEALTHZ_PATH}`]: () => probe(deps.isHealthy(), deps.healthNote?.()),
    [`GET ${READYZ_PATH}`]: () => {
      const ready = deps.isReady();
      return probe(ready, ready ? deps.readyNote?.() : undefined);
    },
    [`GET ${STATS_PATH}`]: () => json(deps.stats()),
  };
  return async (req) => {
    const { path } = req;
    const route = routes[`${req.method} ${path}`];
    if (route) return await route(req);
    const known = Object.keys(routes).some((r) => r.endsWith(` ${path}`));
    return json(
      { error: `no route ${req.method} ${path}` },
      known ? STATUS_CODE.MethodNotAllowed : STATUS_CODE.NotFound,
    );
  };
}

function probe(ok: boolean, note?: string): SocketReply {
  return {
    status: ok ? STATUS_CODE.OK : STATUS_CODE.ServiceUnavailable,
    body: (ok ? "ok\n" : "not ok\n") + (note ? `${note}\n` : ""),
  };
}

async function cni(deps: RouterDeps, req: SocketRequest): Promise<SocketReply> {
  const started = performance.now();
  let request: CniRequest | undefined;
  try {
    request = decodeRequest(bodyText(req, deps.maxRequestBytes));
    deps.logger.debug("{command} of pod {pod}, container {containerId}, {ifname}: received", {
      ...logFields(request),
    });
    const result = await deps.handle(request, req.signal, (fn) => req.whenUndelivered(fn));
    deps.logger.info("{command} of pod {pod}, container {containerId}, {ifname}: ok in {ms} ms", {
      ...logFields(request),
      ms: elapsed(started),
    });
    return json(result ? { result } : {});
  } catch (err) {
    if (err instanceof Abandoned) {
      // Not a failure: nobody waits for the answer any more (see abandoned.ts).
      deps.logger.info("{command} of pod {pod}, container {containerId}, {ifname}: {outcome}", {
        ...logFields(request),
        outcome: request?.command === "ADD"
          ? "abandoned by its requester, rolled back"
          : "abandoned by its requester",
        ms: elapsed(started),
      });
      return errorReply(err);
    }
    const e = toCniError(err);
    const level = e.code === CNI_ERROR.INTERNAL ? "error" : "warn";
    deps.logger[level](
      "{command} of pod {pod}, container {containerId}, {ifname}: failed with code {code}: {msg} {details}",
      {
        ...logFields(request),
        code: e.code,
        msg: e.message,
        details: e.details,
        ms: elapsed(started),
      },
    );
    return errorReply(e);
  }
}

function logFields(req: CniRequest | undefined): Record<string, unknown> {
  return {
    command: req?.command ?? "?",
    containerId: req?.containerId ?? "-",
    ifname: req?.ifname ?? "-",
    pod: req?.args.K8S_POD_NAME ? `${req.args.K8S_POD_NAMESPACE}/${req.args.K8S_POD_NAME}` : "-",
  };
}

function elapsed(started: number): number {
  return Math.round((performance.now() - started) * 10) / 10;
}
