/**
 * Typed API operations over a {@link KubeTransport}: list (one page, or all pages), watch (an
 * async iterable of events), get, create, update (409 Conflict surfaces as a typed error), merge
 * patch, delete, and Events.
 *
 * @module
 */
import type { ObjectMeta } from "kubernetes-types/meta/v1.d.ts";
import { KubeApiError } from "./errors.ts";
import { apiVersionOf, EVENTS, resourcePath, type ResourceType } from "./resources.ts";
import type { KubeTransport } from "./transport.ts";
import { type WatchEvent, watchEvents } from "./watch_stream.ts";

/** Any API object. */
export interface KubeObject {
  /** apiVersion. */
  apiVersion?: string;
  /** kind. */
  kind?: string;
  /** metadata. */
  metadata?: ObjectMeta;
}

/** Selection options of list and watch. */
export interface SelectOptions {
  /** Namespace; all namespaces when absent. */
  namespace?: string;
  /** e.g. `spec.nodeName=node-1`. */
  fieldSelector?: string;
  /** e.g. `app=web`. */
  labelSelector?: string;
  /**
   * Only the objects' metadata: the server answers `PartialObjectMetadata` (kind and apiVersion
   * `meta.k8s.io/v1`, no spec, no status), as client-go's metadata informers ask. Selectors still
   * apply to the whole object on the server's side.
   */
  metadataOnly?: boolean;
}

/**
 * `Accept` of a request for one object's (or a watch's objects') metadata only. Without the
 * trailing plain JSON a server that cannot transform the object would answer 406; with it, it may
 * answer the whole object, which readers of metadata handle alike.
 */
export const ACCEPT_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1," +
  "application/json";
/** `Accept` of a list of metadata only (`PartialObjectMetadataList`); see {@link ACCEPT_METADATA}. */
export const ACCEPT_METADATA_LIST =
  "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

/** One page of a list. */
export interface ListPage<T> {
  /** The objects. */
  items: T[];
  /** The list's resourceVersion: watch from here. */
  resourceVersion: string;
  /** Token for the next page, if any. */
  continue?: string;
}

/**
 * The client.
 *
 * @example
 * ```ts
 * const kube = new KubeClient(transport);
 * const { items, resourceVersion } = await kube.listAll<Pod>(PODS, { fieldSelector: "spec.nodeName=n1" });
 * for await (const ev of await kube.watch<Pod>(PODS, { resourceVersion, allowWatchBookmarks: true })) { … }
 * ```
 */
export class KubeClient {
  readonly #t: KubeTransport;

  /** Creates a client on `transport`. */
  constructor(transport: KubeTransport) {
    this.#t = transport;
  }

  /** Lists one page. */
  async list<T>(
    rt: ResourceType,
    opts: SelectOptions & {
      limit?: number;
      continue?: string;
      resourceVersion?: string;
      resourceVersionMatch?: "Exact" | "NotOlderThan";
      signal?: AbortSignal;
    } = {},
  ): Promise<ListPage<T>> {
    const list = await this.#t.json<
      { items: T[]; metadata: { resourceVersion: string; continue?: string } }
    >({
      method: "GET",
      path: resourcePath(rt, opts.namespace),
      query: {
        fieldSelector: opts.fieldSelector,
        labelSelector: opts.labelSelector,
        limit: opts.limit,
        continue: opts.continue,
        resourceVersion: opts.resourceVersion,
        resourceVersionMatch: opts.resourceVersionMatch,
      },
      accept: opts.metadataOnly ? ACCEPT_METADATA_LIST : undefined,
      signal: opts.signal,
    });
    const page: ListPage<T> = {
      items: list.items ?? [],
      resourceVersion: list.metadata.resourceVersion,
    };
    if (list.metadata.continue) page.continue = list.metadata.continue;
    return page;
  }

  /**
   * Lists every page (`limit`/`continue`); the result's resourceVersion is the first page's.
   * `resourceVersion` "0" asks for any version (a real server answers from its watch cache, in one
   * page); none, for the most recent (from etcd).
   */
  async listAll<T>(
    rt: ResourceType,
    opts: SelectOptions & { pageSize?: number; resourceVersion?: "0"; signal?: AbortSignal } = {},
  ) {
    const items: T[] = [];
    let page = await this.list<T>(rt, { ...opts, limit: opts.pageSize ?? 500 });
    const resourceVersion = page.resourceVersion;
    items.push(...page.items);
    while (page.continue) {
      page = await this.list<T>(rt, {
        ...opts,
        resourceVersion: undefined, // the continue token names it
        limit: opts.pageSize ?? 500,
        continue: page.continue,
      });
      items.push(...page.items);
    }
    return { items, resourceVersion };
  }

  /**
   * Opens a watch from `resourceVersion`; resolves once the server has answered (so a caller
   * knows the connection stands) to the stream of events. The stream ends when the server closes
   * it (normal after `timeoutSeconds`) or `signal` aborts. An in-stream ERROR event is yielded like
   * any other; an HTTP error (such as 410) rejects.
   */
  async watch<T>(
    rt: ResourceType,
    opts: SelectOptions & {
      resourceVersion?: string;
      allowWatchBookmarks?: boolean;
      timeoutSeconds?: number;
      signal?: AbortSignal;
    },
  ): Promise<AsyncGenerator<WatchEvent<T>>> {
    const body = await this.#t.stream({
      method: "GET",
      path: resourcePath(rt, opts.namespace),
      query: {
        watch: "true",
        fieldSelector: opts.fieldSelector,
        labelSelector: opts.labelSelector,
        resourceVersion: opts.resourceVersion,
        allowWatchBookmarks: opts.allowWatchBookmarks ? "true" : undefined,
        timeoutSeconds: opts.timeoutSeconds,
      },
      accept: opts.metadataOnly ? ACCEPT_METADATA : undefined,
      signal: opts.signal,
    });
    return watchEvents<T>(body, opts.signal);
  }

  /** Reads one object (only its metadata with `metadataOnly`). */
  get<T>(
    rt: ResourceType,
    namespace: string | undefined,
    name: string,
    opts: { metadataOnly?: boolean; signal?: AbortSignal } = {},
  ): Promise<T> {
    return this.#t.json<T>({
      method: "GET",
      path: resourcePath(rt, namespace, name),
      accept: opts.metadataOnly ? ACCEPT_METADATA : undefined,
      signal: opts.signal,
    });
  }

  /** Reads one object; undefined when it does not exist (404). */
  find<T>(
    rt: ResourceType,
    namespace: string | undefined,
    name: string,
    opts: { metadataOnly?: boolean; signal?: AbortSignal } = {},
  ): Promise<T | undefined> {
    return this.get<T>(rt, namespace, name, opts).catch((e) => {
      if (e instanceof KubeApiError && e.isNotFound) return undefined;
      throw e;
    });
  }

  /** Creates an object; an existing name throws `KubeApiError` with `isAlreadyExists`. */
  create<T extends KubeObject>(rt: ResourceType, obj: T, signal?: AbortSignal): Promise<T> {
    const body = { apiVersion: apiVersionOf(rt), kind: rt.kind, ...obj };
    return this.#t.json<T>({
      method: "POST",
      path: resourcePath(rt, obj.metadata?.namespace),
      body,
      signal,
    });
  }

  /** Replaces an object; a stale resourceVersion throws `KubeApiError` with `isConflict`. */
  update<T extends KubeObject>(rt: ResourceType, obj: T, signal?: AbortSignal): Promise<T> {
    const body = { apiVersion: apiVersionOf(rt), kind: rt.kind, ...obj };
    return this.#t.json<T>({
      method: "PUT",
      path: resourcePath(rt, obj.metadata?.namespace, obj.metadata?.name),
      body,
      signal,
    });
  }

  /**
   * Applies a JSON merge patch (RFC 7386): named keys change, `null` removes a key. The answer is
   * the patched object, or only its metadata with `metadataOnly` (a writer of annotations need not
   * receive and decode the whole object).
   */
  patchMerge<T>(
    rt: ResourceType,
    namespace: string | undefined,
    name: string,
    patch: unknown,
    opts: { metadataOnly?: boolean; signal?: AbortSignal; subresource?: "status" } = {},
  ) {
    return this.#t.json<T>({
      method: "PATCH",
      path: resourcePath(rt, namespace, name) + (opts.subresource ? `/${opts.subresource}` : ""),
      body: patch,
      contentType: "application/merge-patch+json",
      accept: opts.metadataOnly ? ACCEPT_METADATA : undefined,
      signal: opts.signal,
    });
  }

  /**
   * Deletes an object; pods on a node are only marked unless `gracePeriodSeconds` is 0. With
   * `preconditions`, only the object of that uid and/or resourceVersion is deleted (otherwise
   * `KubeApiError` with `isConflict`).
   */
  delete(
    rt: ResourceType,
    namespace: string | undefined,
    name: string,
    opts: {
      gracePeriodSeconds?: number;
      preconditions?: { uid?: string; resourceVersion?: string };
      signal?: AbortSignal;
    } = {},
  ): Promise<unknown> {
    return this.#t.json({
      method: "DELETE",
      path: resourcePath(rt, namespace, name),
      query: { gracePeriodSeconds: opts.gracePeriodSeconds },
      body: opts.preconditions
        ? { kind: "DeleteOptions", apiVersion: "v1", preconditions: opts.preconditions }
        : undefined,
      signal: opts.signal,
    });
  }

  /** Records a core/v1 Event about `regarding` (shown by `kubectl describe`). */
  createEvent(
    regarding: {
      kind: string;
      namespace?: string;
      name: string;
      uid?: string;
      apiVersion?: string;
    },
    event: {
      type: "Normal" | "Warning";
      reason: string;
      message: string;
      component: string;
      host?: string;
    },
    signal?: AbortSignal,
  ): Promise<KubeObject> {
    const now = new Date().toISOString();
    const namespace = regarding.namespace ?? "default";
    return this.create(EVENTS, {
      metadata: { namespace, generateName: `${regarding.name}.` },
      involvedObject: { ...regarding, namespace: regarding.namespace },
      type: event.type,
      reason: event.reason,
      message: event.message,
      source: { component: event.component, host: event.host },
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
      reportingComponent: event.component,
      reportingInstance: event.host ?? "",
    } as KubeObject, signal);
  }
}
