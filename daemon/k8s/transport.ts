/**
 * The one way API traffic leaves the daemon: {@link KubeTransport}, a `request` that returns JSON
 * or a byte stream. {@link HttpTransport} implements it on `fetch`, with TLS settings in a
 * `Deno.HttpClient` and a bearer token that is asked for on every request (so a rotated token is
 * picked up).
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
}

function queryString(query: KubeRequest["query"]): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) params.set(k, String(v));
  const s = params.toString();
  return s ? `?${s}` : "";
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

  /** Creates the transport and its HTTP client. */
  constructor(config: ConnectionConfig) {
    this.#config = config;
    // Over HTTP/2 (a kube-apiserver with TLS) every request shares one connection; over HTTP/1.1
    // a burst opens one per request in flight, and only a few are kept idle afterwards, so the
    // daemon's descriptors do not stay at the size of its largest burst.
    const options: Deno.CreateHttpClientOptions = { poolMaxIdlePerHost: 4 };
    if (config.caCert) options.caCerts = [config.caCert];
    this.#client = config.clientCert && config.clientKey
      ? Deno.createHttpClient({ ...options, cert: config.clientCert, key: config.clientKey })
      : Deno.createHttpClient(options);
  }

  async #send(req: KubeRequest, accept: string): Promise<Response> {
    const headers: Record<string, string> = { accept };
    const token = await this.#config.token?.();
    if (token) headers.authorization = `Bearer ${token}`;
    if (req.body !== undefined) headers["content-type"] = req.contentType ?? "application/json";
    const url = `${this.#config.server.replace(/\/$/, "")}${req.path}${queryString(req.query)}`;
    let res: Response;
    try {
      res = await fetch(url, {
        method: req.method,
        headers,
        body: req.body === undefined ? undefined : JSON.stringify(req.body),
        signal: req.signal,
        client: this.#client,
      });
    } catch (e) {
      if (req.signal?.aborted) throw req.signal.reason ?? e;
      throw new KubeUnreachableError(
        `cannot reach ${this.#config.server}: ${e instanceof Error ? e.message : e}`,
        { cause: e },
      );
    }
    if (!res.ok) {
      const text = await res.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch { /* not JSON */ }
      throw kubeErrorFrom(res.status, body);
    }
    return res;
  }

  /** Sends a request and decodes its JSON answer. */
  async json<T>(req: KubeRequest): Promise<T> {
    const res = await this.#send(req, "application/json");
    return await res.json() as T;
  }

  /** Sends a request and returns its body stream. */
  async stream(req: KubeRequest): Promise<ReadableStream<Uint8Array>> {
    const res = await this.#send(req, "application/json");
    if (!res.body) throw new KubeUnreachableError("watch answered without a body");
    return res.body;
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
