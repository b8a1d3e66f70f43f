/**
 * The embedded API stand-in: an in-memory Kubernetes API on loopback that behaves like a real
 * kube-apiserver wherever Ferry depends on it (see `shared/KUBE-API-FACTS.md`), so developers and
 * the default test suite need no cluster. Tests get hooks to drop watch connections, delay or
 * fail requests, and compact history.
 *
 * What it models: monotonic resourceVersions shared by all types; list (with `limit`/`continue`,
 * `resourceVersion=0` answered whole as from the watch cache,
 * `resourceVersion` + `resourceVersionMatch=Exact` reads of older versions, HTTP 410 `Expired`
 * after compaction), watch (from a resourceVersion, synthetic ADDED when none or "0" is given,
 * objects moving in and out of a selector as ADDED/DELETED, bookmarks only when the type has
 * newer events, the in-stream ERROR 410 for a version older than the watch cache, which keeps at
 * least 100 events per type and all of the last 75 s, `timeoutSeconds`); get, create
 * (409 `AlreadyExists`), update (409 `Conflict` on a stale resourceVersion, 422 when a pod update
 * has none; 422 for a `metadata.uid` that is not the object's, update or patch), JSON merge
 * patch, delete (409 `Conflict` when its uid or resourceVersion
 * preconditions fail; a pod with `spec.nodeName` is only marked with
 * `deletionTimestamp` until deleted again with `gracePeriodSeconds=0`, as without a kubelet, and
 * every other pod deletion is a MODIFIED with grace 0 followed by DELETED, as the real server does);
 * field selectors (the server's supported fields; others are 400) and label selectors;
 * metadata-only answers (`Accept: …;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`, for
 * objects, lists, watch events and bookmarks, with the real server's 406 for a view that does not
 * fit; `daemon/dev/kube_standin/media.ts`);
 * namespaces must exist; CRDs register their resources (served versions, scope); bearer tokens.
 *
 * What it does not model: RBAC and admission beyond namespace existence, strategic merge and JSON
 * patch (415), subresources other than the object itself (`/status` is the object), finalizers and garbage collection,
 * server-side apply, structural-schema pruning and validation of custom resources, protobuf,
 * `sendInitialEvents`, watch-cache timing (events arrive at once, unless a test stalls the cache:
 * `stallWatchCache`), and API discovery documents.
 *
 * The parts: lists (`list.ts`), watches (`watch.ts`), answers (`answers.ts`), media views
 * (`media.ts`), the storage (`object_store.ts`), selectors, merge patch; this module serves them.
 *
 * @module
 */
import type { KubeObject } from "../../k8s/client.ts";
import {
  CONFIGMAPS,
  CRDS,
  DAEMONSETS,
  EVENTS,
  LEASES,
  NAMESPACES,
  NETWORK_POLICIES,
  NODES,
  PODS,
  type ResourceType,
  SERVICES,
} from "../../k8s/resources.ts";
import { type AnswerView, answerView, checkView, viewed } from "./media.ts";
import { applyMergePatch } from "./merge_patch.ts";
import { answer, status } from "./answers.ts";
import { listResponse } from "./list.ts";
import { type OpenWatch, watchResponse } from "./watch.ts";
import { ApiFailure, ObjectStore } from "./object_store.ts";
import { SelectorError } from "./selectors.ts";

/** Injected trouble for tests. */
export interface FaultRule {
  /** Matches requests whose method is this (any when absent). */
  method?: string;
  /** Matches requests whose path contains this. */
  pathIncludes?: string;
  /** Matches only watch requests (true) or only non-watch requests (false). */
  watch?: boolean;
  /** Answer with this HTTP status … */
  status: number;
  /** … and this Status reason. */
  reason: string;
  /** How many matching requests fail (then the rule is spent). */
  times: number;
}

/** Counters for tests. */
export interface StandinStats {
  /** Requests served, by `METHOD resource` (watches as `WATCH resource`). */
  requests: Record<string, number>;
  /** Watches currently open. */
  openWatches: number;
  /** Of {@link StandinStats.requests}, those that asked for metadata only (`as=PartialObjectMetadata…`). */
  metadataOnly: Record<string, number>;
  /** Lists that asked for any version (`resourceVersion=0`: a real server's watch cache), by resource. */
  listsFromCache: Record<string, number>;
}

/** Options of the stand-in. */
export interface StandinOptions {
  /** A bearer token every request must carry (no auth when absent). */
  token?: string;
  /** How often an open watch considers sending a bookmark (ms). */
  bookmarkIntervalMs?: number;
  /** The port on 127.0.0.1 (0: any free one). */
  port?: number;
}

const BUILTIN = [
  PODS,
  NODES,
  NAMESPACES,
  EVENTS,
  CRDS,
  LEASES,
  NETWORK_POLICIES,
  { ...EVENTS, group: "events.k8s.io" },
  CONFIGMAPS,
  DAEMONSETS,
  SERVICES,
];

/**
 * The stand-in server.
 *
 * @example
 * ```ts
 * const api = await KubeStandin.start({ token: "t" });
 * // … point a client at api.url …
 * await api.stop();
 * ```
 */
export class KubeStandin {
  /** The storage (tests may read it directly). */
  readonly store = new ObjectStore();
  readonly #types = new Map<string, ResourceType>();
  readonly #options: StandinOptions;
  readonly #watches = new Set<OpenWatch>();
  readonly #faults: FaultRule[] = [];
  #delayMs = 0;
  readonly #delayed = new Set<() => void>();
  /** Where a stalled watch cache stopped following etcd (undefined: it follows). */
  #cacheRv: number | undefined;
  readonly #cacheResumed = new Set<() => void>();
  #port = 0;
  #server?: Deno.HttpServer<Deno.NetAddr>;
  /** Counters. */
  readonly stats: StandinStats = {
    requests: {},
    openWatches: 0,
    metadataOnly: {},
    listsFromCache: {},
  };

  private constructor(options: StandinOptions) {
    this.#options = options;
    for (const rt of BUILTIN) this.#register(rt);
    for (const name of ["default", "kube-system", "kube-public"]) {
      this.store.create(
        NAMESPACES,
        undefined,
        { metadata: { name }, spec: {}, status: { phase: "Active" } } as KubeObject,
      );
    }
  }

  /** Starts the stand-in on 127.0.0.1. */
  static async start(options: StandinOptions = {}): Promise<KubeStandin> {
    const api = new KubeStandin(options);
    await api.#listen(options.port ?? 0);
    return api;
  }

  /** The base URL, e.g. `http://127.0.0.1:43121`. */
  get url(): string {
    return `http://127.0.0.1:${this.#server!.addr.port}`;
  }

  /** The bearer token it asks for, if any. */
  get token(): string | undefined {
    return this.#options.token;
  }

  /** A kubeconfig (YAML) pointing at this stand-in. */
  kubeconfig(): string {
    return [
      "apiVersion: v1",
      "kind: Config",
      `clusters: [{name: standin, cluster: {server: "${this.url}"}}]`,
      `users: [{name: dev, user: {token: "${this.#options.token ?? "none"}"}}]`,
      "contexts: [{name: standin, context: {cluster: standin, user: dev}}]",
      "current-context: standin",
      "",
    ].join("\n");
  }

  /** Stops serving and closes every watch. */
  async stop(): Promise<void> {
    this.dropWatches();
    await this.#server?.shutdown();
  }

  /**
   * Hook: the API server goes away (watches drop, connections are refused) until
   * {@link KubeStandin.resume}, which serves the same objects on the same port again.
   */
  async pause(): Promise<void> {
    this.#port = this.#server!.addr.port;
    await this.stop();
  }

  /** Hook: serves again on the port {@link KubeStandin.pause} left. */
  async resume(): Promise<void> {
    await this.#listen(this.#port);
  }

  async #listen(port: number): Promise<void> {
    const listening = Promise.withResolvers<void>();
    this.#server = Deno.serve(
      { hostname: "127.0.0.1", port, onListen: () => listening.resolve() },
      (req) => this.#handle(req),
    );
    await listening.promise;
  }

  /** Hook: ends every open watch abruptly, as a lost connection would. */
  dropWatches(): void {
    for (const w of [...this.#watches]) w.close(true);
  }

  /** Hook: makes matching requests fail. */
  failRequests(rule: FaultRule): void {
    this.#faults.push({ ...rule });
  }

  /** Hook: removes every fault rule. */
  clearFaults(): void {
    this.#faults.length = 0;
  }

  /** Hook: delays every response by `ms`; `0` also releases the requests being delayed now. */
  delayResponses(ms: number): void {
    this.#delayMs = ms;
    if (ms === 0) { for (const release of [...this.#delayed]) release(); }
  }

  /** Hook: compacts etcd up to now: exact lists and continue tokens of older versions answer 410. */
  compact(): void {
    this.store.compact();
  }

  /** Hook: empties the watch cache: watches from older versions get the in-stream 410 ERROR. */
  expireWatchCache(): void {
    this.store.expireWatchCache();
  }

  /**
   * Hook: the watch cache stops following etcd at `atRv` (default: now), as on a server whose
   * own watch of etcd is stuck: lists of any version (`resourceVersion=0`) answer as of `atRv`,
   * and watches deliver nothing newer (bookmarks included) until {@link KubeStandin.resumeWatchCache}.
   * Reads of the storage (gets, lists of the most recent version) are current.
   */
  stallWatchCache(atRv = this.store.rv): void {
    this.#cacheRv = atRv;
  }

  /** Hook: a stalled watch cache catches up: watches deliver what it held back, in order. */
  resumeWatchCache(): void {
    this.#cacheRv = undefined;
    for (const flush of [...this.#cacheResumed]) flush();
  }

  #register(rt: ResourceType): void {
    this.#types.set(`${rt.group}/${rt.version}/${rt.plural}`, rt);
  }

  #count(key: string): void {
    this.stats.requests[key] = (this.stats.requests[key] ?? 0) + 1;
  }

  async #handle(req: Request): Promise<Response> {
    if (this.#delayMs) {
      await new Promise<void>((resolve) => {
        const release = () => {
          clearTimeout(timer);
          this.#delayed.delete(release);
          resolve();
        };
        const timer = setTimeout(release, this.#delayMs);
        this.#delayed.add(release);
      });
    }
    const url = new URL(req.url);
    try {
      if (["/healthz", "/readyz", "/livez"].includes(url.pathname)) return new Response("ok");
      if (
        this.#options.token && req.headers.get("authorization") !== `Bearer ${this.#options.token}`
      ) {
        throw new ApiFailure(401, "Unauthorized", "Unauthorized");
      }
      if (url.pathname === "/version") {
        return answer({ major: "1", minor: "26", gitVersion: "v1.26.0-ferry-standin" });
      }
      const route = this.#route(url.pathname);
      const isWatch = ["true", "1"].includes(url.searchParams.get("watch") ?? "");
      const view = answerView(req.headers.get("accept"));
      this.#injectFault(req.method, url.pathname, isWatch);
      const watch = req.method === "GET" && !route.name && isWatch;
      const key = `${watch ? "WATCH" : req.method} ${route.rt.plural}`;
      this.#count(key);
      if (view !== "whole") this.stats.metadataOnly[key] = (this.stats.metadataOnly[key] ?? 0) + 1;
      if (watch) return this.#watch(route, url, view);
      return await this.#serve(req, route, url, view);
    } catch (e) {
      if (e instanceof ApiFailure) return status(e.code, e.reason, e.message);
      if (e instanceof SelectorError) return status(400, "BadRequest", e.message);
      return status(500, "InternalError", String(e));
    }
  }

  #injectFault(method: string, path: string, watch: boolean): void {
    const rule = this.#faults.find((f) =>
      f.times > 0 && (!f.method || f.method === method) &&
      (!f.pathIncludes || path.includes(f.pathIncludes)) &&
      (f.watch === undefined || f.watch === watch)
    );
    if (!rule) return;
    rule.times--;
    throw new ApiFailure(rule.status, rule.reason, "injected by the test");
  }

  #route(path: string): { rt: ResourceType; namespace?: string; name?: string } {
    const m = /^\/(?:api\/(v1)|apis\/([^/]+)\/([^/]+))\/(.*)$/.exec(path);
    if (!m) {
      throw new ApiFailure(
        404,
        "NotFound",
        `the server could not find the requested resource (${path})`,
      );
    }
    const [group, version] = m[1] ? ["", m[1]] : [m[2], m[3]];
    const segs = m[4].split("/").filter((s) => s !== "").map(decodeURIComponent);
    let namespace: string | undefined, plural: string, name: string | undefined, rest: string[];
    if (segs[0] === "namespaces" && segs.length >= 3) [, namespace, plural, name, ...rest] = segs;
    else [plural, name, ...rest] = segs;
    const rt = this.#types.get(`${group}/${version}/${plural}`);
    // `/status` is the object itself here (the stand-in keeps no separate status).
    if (!rt || rest.length > 1 || (rest.length === 1 && (rest[0] !== "status" || !name))) {
      throw new ApiFailure(
        404,
        "NotFound",
        `the server could not find the requested resource (${path})`,
      );
    }
    if (!rt.namespaced && namespace) {
      throw new ApiFailure(404, "NotFound", `${plural} is not namespaced`);
    }
    return { rt, namespace, name };
  }

  #checkNamespace(namespace: string | undefined): void {
    if (namespace && !this.store.has(NAMESPACES, undefined, namespace)) {
      throw new ApiFailure(404, "NotFound", `namespaces ${JSON.stringify(namespace)} not found`);
    }
  }

  async #serve(
    req: Request,
    r: { rt: ResourceType; namespace?: string; name?: string },
    url: URL,
    view: AnswerView,
  ): Promise<Response> {
    const { rt, namespace, name } = r;
    if (req.method === "GET" && !name) return this.#list(rt, namespace, url, view);
    checkView(view, false, rt.kind);
    const json = (obj: KubeObject, code?: number) => answer(viewed(obj, view), code);
    switch (req.method) {
      case "GET":
        return json(this.store.get(rt, namespace, name!));
      case "POST": {
        if (name) throw new ApiFailure(405, "MethodNotAllowed", "POST to an object");
        const body = await req.json() as KubeObject;
        const ns = rt.namespaced ? namespace ?? body.metadata?.namespace : undefined;
        if (rt.namespaced && !ns) {
          throw new ApiFailure(400, "BadRequest", "the namespace of the object is required");
        }
        this.#checkNamespace(ns);
        const created = this.store.create(rt, ns, defaults(rt, body));
        if (rt === CRDS) this.#registerCrd(created);
        return json(created, 201);
      }
      case "PUT": {
        if (!name) throw new ApiFailure(405, "MethodNotAllowed", "PUT to a collection");
        const body = await req.json() as KubeObject;
        return json(this.store.update(rt, namespace, name, body, rt === PODS));
      }
      case "PATCH": {
        if (!name) throw new ApiFailure(405, "MethodNotAllowed", "PATCH to a collection");
        const type = req.headers.get("content-type")?.split(";")[0];
        if (type !== "application/merge-patch+json") {
          throw new ApiFailure(
            415,
            "UnsupportedMediaType",
            `the stand-in supports only merge patches, not ${type}`,
          );
        }
        const current = this.store.get(rt, namespace, name);
        const patched = applyMergePatch(current, await req.json()) as KubeObject;
        patched.metadata = {
          ...patched.metadata,
          resourceVersion: current.metadata!.resourceVersion,
        };
        return json(this.store.update(rt, namespace, name, patched, false));
      }
      case "DELETE": {
        if (!name) throw new ApiFailure(405, "MethodNotAllowed", "DELETE of a collection");
        const options = await deleteOptions(req, url);
        const current = this.store.get(rt, namespace, name);
        checkPreconditions(current, options.preconditions);
        return json(this.#delete(rt, namespace, name, options.gracePeriodSeconds));
      }
    }
    throw new ApiFailure(405, "MethodNotAllowed", req.method);
  }

  #delete(
    rt: ResourceType,
    namespace: string | undefined,
    name: string,
    grace: number | undefined,
  ): KubeObject {
    const current = this.store.get(rt, namespace, name);
    const nodeName = (current as { spec?: { nodeName?: string } }).spec?.nodeName;
    const seconds = grace ??
      (current as { spec?: { terminationGracePeriodSeconds?: number } }).spec
        ?.terminationGracePeriodSeconds ??
      30;
    if (rt !== PODS) return this.store.remove(rt, namespace, name);
    // Pods always pass through graceful deletion, as on a real server: a bound pod with a grace
    // period is only marked (no kubelet confirms here); otherwise it is marked with grace 0
    // (a MODIFIED event) and removed at once (DELETED).
    if (nodeName && seconds > 0) return this.store.markForDeletion(rt, namespace, name, seconds);
    this.store.markForDeletion(rt, namespace, name, 0);
    return this.store.remove(rt, namespace, name);
  }

  #list(rt: ResourceType, namespace: string | undefined, url: URL, view: AnswerView): Response {
    return listResponse(
      { store: this.store, stats: this.stats, cacheRv: this.#cacheRv },
      rt,
      namespace,
      url,
      view,
    );
  }

  #watch(route: { rt: ResourceType; namespace?: string }, url: URL, view: AnswerView): Response {
    return watchResponse(
      {
        store: this.store,
        stats: this.stats,
        watches: this.#watches,
        bookmarkIntervalMs: this.#options.bookmarkIntervalMs ?? 1000,
        heldAt: () => this.#cacheRv,
        resumed: this.#cacheResumed,
      },
      route,
      url,
      view,
    );
  }

  #registerCrd(crd: KubeObject): void {
    const spec = (crd as {
      spec?: {
        group: string;
        scope: string;
        names: { plural: string; kind: string };
        versions: { name: string; served: boolean }[];
      };
    }).spec;
    if (!spec) return;
    for (const v of spec.versions ?? []) {
      if (!v.served) continue;
      this.#register({
        group: spec.group,
        version: v.name,
        plural: spec.names.plural,
        kind: spec.names.kind,
        namespaced: spec.scope === "Namespaced",
      });
    }
  }
}

function defaults(rt: ResourceType, obj: KubeObject): KubeObject {
  if (rt !== PODS) return obj;
  const pod = obj as KubeObject & { status?: { phase?: string }; spec?: Record<string, unknown> };
  return {
    ...pod,
    spec: { ...pod.spec },
    status: { phase: "Pending", ...pod.status },
  } as KubeObject;
}

interface DeleteOptions {
  gracePeriodSeconds?: number;
  preconditions?: { uid?: string; resourceVersion?: string };
}

async function deleteOptions(req: Request, url: URL): Promise<DeleteOptions> {
  const text = await req.text();
  let opts: DeleteOptions = {};
  if (text) {
    try {
      opts = JSON.parse(text) as DeleteOptions;
    } catch {
      throw new ApiFailure(400, "BadRequest", "the body is not DeleteOptions JSON");
    }
  }
  const q = url.searchParams.get("gracePeriodSeconds");
  if (q !== null) opts.gracePeriodSeconds = Number(q);
  return opts;
}

/** A delete's preconditions, as the real server checks them: a mismatch is 409 Conflict. */
function checkPreconditions(current: KubeObject, pre: DeleteOptions["preconditions"]): void {
  const meta = current.metadata ?? {};
  if (pre?.uid && pre.uid !== meta.uid) {
    throw new ApiFailure(
      409,
      "Conflict",
      `Precondition failed: UID in precondition: ${pre.uid}, UID in object meta: ${meta.uid}`,
    );
  }
  if (pre?.resourceVersion && pre.resourceVersion !== meta.resourceVersion) {
    throw new ApiFailure(
      409,
      "Conflict",
      `Precondition failed: ResourceVersion in precondition: ${pre.resourceVersion}, ` +
        `ResourceVersion in object meta: ${meta.resourceVersion}`,
    );
  }
}
