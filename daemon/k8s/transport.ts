/**
 * The one way API traffic leaves the daemon: {@link KubeTransport}, a `request` that returns JSON
 * or a byte stream. {@link HttpTransport} implements it on `fetch`, with TLS settings in a
 * `Deno.HttpClient`, a bearer token that is asked for on every request (so a rotated token is
 * picked up), and a time limit on every request (a server that accepts and never answers, or a
 * connection into a network partition, must not hold its caller for the kernel's TCP timeouts).
 *
 * @module
 */
import { KubeApiError, kubeErrorFrom, KubeUnreachableError } from "./errors.ts";

/** One API request. */
export interface KubeRequest {
  /** HTTP method. */
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  /** Path below the server URL, e.g. `/api/v1/namespaces/default/pods`. */
  path: string;
  /** Query parameters; undefined values are left out. */
  query?: Record<string, string | number | boolean | undefined>;
  /** A JSON body. */
  body?: unknown;
  /** Content type of the body (default `application/json`). */
  contentType?: string;
  /** What the answer may be (default `application/json`). */
  accept?: string;
  /** Aborts the request (and a stream). */
  signal?: AbortSignal;
}

/** Sends API requests. Fakes and counting decorators implement the same interface. */
export interface KubeTransport {
  /** Sends a request and decodes the JSON answer; non-2xx throws {@link import("./errors.ts").KubeApiError}. */
  json<T>(req: KubeRequest): Promise<T>;
  /** Sends a request and returns the answer's body as a stream (for watches). */
  stream(req: KubeRequest): Promise<ReadableStream<Uint8Array>>;
}

/** How to reach and authenticate to an API server. */
export interface ConnectionConfig {
  /** `https://host:port` (or `http://` for a loopback stand-in). */
  server: string;
  /** PEM CA bundle to trust. */
  caCert?: string;
  /** PEM client certificate. */
  clientCert?: string;
  /** PEM client key. */
  clientKey?: string;
  /** Returns the bearer token to send, if any (called per request). */
  token?: () => Promise<string | undefined>;
  /** A unix socket every request goes through, `server` being then `http://localhost` (kubectl proxy). */
  unixSocket?: string;
}

function queryString(query: KubeRequest["query"]): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) params.set(k, String(v));
  const s = params.toString();
  return s ? `?${s}` : "";
}

/** Options of {@link HttpTransport}. */
export interface HttpTransportOptions {
  /**
   * How long a request may take, from sending it to the end of its answer (for a stream, to its
   * headers: a watch then lives as long as its own `timeoutSeconds`); default 30 000. A request
   * that takes longer is aborted and fails with {@link KubeUnreachableError}, which callers retry
   * as they retry any unreachable server.
   */
  requestTimeoutMs?: number;
}

/**
 * The fetch-based transport.
 *
 * @example
 * ```ts
 * const t = new HttpTransport({ server: "https://127.0.0.1:6443", caCert, token: () => Promise.resolve(tok) });
 * const pods = await t.json({ method: "GET", path: "/api/v1/pods" });
 * ```
 */
export class HttpTransport implements KubeTransport {
  readonly #config: ConnectionConfig;
  readonly #client: Deno.HttpClient;
  readonly #timeoutMs: number;

  /** Creates the transport and its HTTP client. */
  constructor(config: ConnectionConfig, limits: HttpTransportOptions = {}) {
    this.#config = config;
    this.#timeoutMs = limits.requestTimeoutMs ?? 30_000;
    // Over HTTP/2 (a kube-apiserver with TLS) every request shares one connection; over HTTP/1.1
    // a burst opens one per request in flight, and only a few are kept idle afterwards, so the
    // daemon's descriptors do not stay at the size of its largest burst.
    const options: Deno.CreateHttpClientOptions = { poolMaxIdlePerHost: 4 };
    if (config.caCert) options.caCerts = [config.caCert];
    if (config.unixSocket) options.proxy = { transport: "unix", path: config.unixSocket };
    this.#client = config.clientCert && config.clientKey
      ? Deno.createHttpClient({ ...options, cert: config.clientCert, key: config.clientKey })
      : Deno.createHttpClient(options);
  }

  /**
   * Sends `req` and hands its answer to `read` (an error answer throws), all within the request
   * time limit. The timer is cleared once `read` settles, so what `read` returns (a stream) is
   * then bounded only by the caller's signal.
   */
  async #exchange<T>(req: KubeRequest, read: (res: Response) => Promise<T>): Promise<T> {
    const headers: Record<string, string> = { accept: req.accept ?? "application/json" };
    const token = await this.#config.token?.();
    if (token) headers.authorization = `Bearer ${token}`;
    if (req.body !== undefined) headers["content-type"] = req.contentType ?? "application/json";
    const url = `${this.#config.server.replace(/\/$/, "")}${req.path}${queryString(req.query)}`;
    const limit = new AbortController();
    const timer = setTimeout(() => limit.abort(), this.#timeoutMs);
    const signal = req.signal ? AbortSignal.any([req.signal, limit.signal]) : limit.signal;
    // What went wrong, as the caller should see it: its own abort as its reason, the time limit
    // and a failed connection as an unreachable server; anything else (an error answer, a body
    // that is not JSON) as it is.
    let sent = false;
    const failure = (e: unknown) => {
      if (req.signal?.aborted) return req.signal.reason ?? e;
      if (!limit.signal.aborted && (sent || e instanceof KubeUnreachableError)) return e;
      const why = limit.signal.aborted
        ? `no answer within ${this.#timeoutMs / 1000} s`
        : e instanceof Error
        ? e.message
        : String(e);
      return new KubeUnreachableError(`cannot reach ${this.#config.server}: ${why}`, { cause: e });
    };
    try {
      const res = await fetch(url, {
        method: req.method,
        headers,
        body: req.body === undefined ? undefined : JSON.stringify(req.body),
        signal,
        client: this.#client,
      });
      sent = true;
      if (!res.ok) {
        const text = await res.text();
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch { /* not JSON */ }
        throw kubeErrorFrom(res.status, body);
      }
      return await read(res);
    } catch (e) {
      throw failure(e);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Sends a request and decodes its JSON answer. */
  json<T>(req: KubeRequest): Promise<T> {
    return this.#exchange(req, (res) => res.json() as Promise<T>);
  }

  /** Sends a request and returns its body stream (the time limit ends with the headers). */
  stream(req: KubeRequest): Promise<ReadableStream<Uint8Array>> {
    return this.#exchange(req, (res) => {
      if (!res.body) throw new KubeUnreachableError("watch answered without a body");
      return Promise.resolve(res.body);
    });
  }

  /** Closes the HTTP client. */
  close(): void {
    this.#client.close();
  }
}

/**
 * Wraps a transport and counts its requests, so the daemon can show how many API round trips
 * the CNI request path makes.
 */
export class CountingTransport implements KubeTransport {
  readonly #inner: KubeTransport;
  /** Requests sent so far, by method. */
  readonly counts: Record<string, number> = {};
  /**
   * Requests answered so far, by method and outcome: `ok`, the HTTP status of an error answer, or
   * `unreachable` (keys `METHOD outcome`).
   */
  readonly outcomes: Record<string, number> = {};

  readonly #observe?: (method: string, ms: number) => void;

  /**
   * Wraps `inner`; `observe` hears how long each answered request (not watch streams, which stay
   * open) took, by method.
   */
  constructor(inner: KubeTransport, observe?: (method: string, ms: number) => void) {
    this.#inner = inner;
    this.#observe = observe;
  }

  #count(req: KubeRequest): void {
    this.counts[req.method] = (this.counts[req.method] ?? 0) + 1;
  }

  #outcome<T>(req: KubeRequest, answer: Promise<T>): Promise<T> {
    const note = (outcome: string) => {
      const key = `${req.method} ${outcome}`;
      this.outcomes[key] = (this.outcomes[key] ?? 0) + 1;
    };
    return answer.then((v) => {
      note("ok");
      return v;
    }, (e) => {
      note(e instanceof KubeApiError ? String(e.status) : "unreachable");
      throw e;
    });
  }

  /** Counts, then forwards. */
  json<T>(req: KubeRequest): Promise<T> {
    this.#count(req);
    const started = performance.now();
    const answer = this.#outcome(req, this.#inner.json<T>(req));
    if (this.#observe) {
      const done = () => this.#observe!(req.method, performance.now() - started);
      answer.then(done, done);
    }
    return answer;
  }

  /** Counts, then forwards. */
  stream(req: KubeRequest): Promise<ReadableStream<Uint8Array>> {
    this.#count(req);
    return this.#outcome(req, this.#inner.stream(req));
  }

  /** All requests so far. */
  get total(): number {
    return Object.values(this.counts).reduce((a, b) => a + b, 0);
  }
}
