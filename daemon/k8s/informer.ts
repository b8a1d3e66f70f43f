/**
 * An informer: the cache of one resource selection, kept current by list-then-watch. It follows
 * bookmarks; on 410 Gone (HTTP or the in-stream ERROR event) it re-lists and reconciles the
 * cache, emitting changes and deletions for what moved while it was blind; it reconnects with
 * exponential backoff and full jitter; it reports itself unhealthy when it cannot re-establish
 * the watch within a deadline (and keeps trying); a periodic resync re-delivers the cache.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { KubeClient, KubeObject, SelectOptions } from "./client.ts";
import { KubeApiError } from "./errors.ts";
import type { ResourceType } from "./resources.ts";
import type { WatchEvent } from "./watch_stream.ts";
import type { KubeStatus } from "./errors.ts";
import { sleep } from "../runtime/sleep.ts";

/** A watch stream outlived its own timeout by the margin: cut it and watch again. */
class StreamOverdue extends Error {
  constructor() {
    super("the watch stream is overdue");
  }
}

/** Why a handler sees an object. */
export type UpsertReason = "event" | "relist" | "resync";

/** What an informer tells its owner. Handlers must not throw. */
export interface InformerHandlers<T> {
  /** An object appeared or changed (or is re-delivered). */
  upsert(obj: T, reason: UpsertReason): void;
  /** An object is gone. */
  remove(obj: T): void;
}

/** Tuning of an informer; every field has a default. */
export interface InformerOptions {
  /** Items per list page (default 500). */
  pageSize?: number;
  /** `timeoutSeconds` asked of each watch (default 300, with ±10% jitter). */
  watchTimeoutSeconds?: number;
  /** First reconnect delay ceiling in ms (default 200). */
  backoffInitialMs?: number;
  /** Largest reconnect delay ceiling in ms (default 30 000). */
  backoffMaxMs?: number;
  /** Unhealthy when no watch could be re-established for this long (ms, default 60 000). */
  unhealthyAfterMs?: number;
  /** Period of re-delivering the cache to handlers (ms; 0 disables; default 0). */
  resyncMs?: number;
  /**
   * How long a list, or the opening of a watch, may take before it counts as failed (ms, default
   * 30 000). A watch stream is also cut this long after its own `timeoutSeconds` should have
   * ended it, so a half-open connection to a vanished server cannot hold the informer forever.
   */
  requestTimeoutMs?: number;
  /** Randomness for jitter (tests pass a fixed one). */
  random?: () => number;
  /**
   * The first list asks for any resourceVersion (`resourceVersion=0`), which the API server
   * answers from its watch cache (whole, ignoring the page size) instead of reading every object
   * of the type from etcd and filtering them there (field selectors are not indexed in etcd): on
   * a large cluster, what each start of a DaemonSet's pods would cost. The cache may lag the
   * server's storage: the watch from the list's resourceVersion brings what it lacked, and an
   * owner that acts on an object's absence must ask the server first. Re-lists (after 410) read
   * the storage. Default false.
   */
  firstListFromCache?: boolean;
  /**
   * A resource the server does not serve (its list answers 404: a CRD not installed) counts as
   * one with no objects: the informer delivers an empty list, reports itself synced and healthy,
   * and lists again every `backoffMaxMs`, so objects appear once the CRD is installed. For
   * optional resources (MultiNetworkPolicy). Default false: a 404 is a failure like any other.
   */
  missingIsEmpty?: boolean;
  /**
   * Whether the cache keeps the objects (default true). False: it keeps only what it needs itself
   * (name, namespace, resourceVersion), for an owner that keeps its own copy of what it reads (a
   * whole cluster's pods, held once instead of twice); `list()` then returns those stubs, a
   * relist's removals hand them to `remove`, and there is no resync.
   */
  keepObjects?: boolean;
}

/** An informer's {@link InformerOptions} and what it keeps of its objects. */
export interface InformerSettings<T> extends InformerOptions {
  /**
   * What the informer keeps of each object, and so what its handlers see: applied once to every
   * object as it arrives, listed or watched (bookmarks aside). Owners strip what they do not use
   * (client-go's transform), so a cache of a whole cluster's objects stays small; the informer
   * itself needs `metadata.name`, `namespace` and `resourceVersion` kept. Default: the object as
   * it came.
   */
  transform?: (obj: T) => T;
}

/** Counters of an informer. */
export interface InformerStats {
  /** Full lists done (the first and every re-list). */
  lists: number;
  /** Re-lists caused by 410 Gone. */
  relists: number;
  /** Watch connections opened. */
  watches: number;
  /** Failed attempts (list or watch). */
  failures: number;
  /** Open watches that ended before `stop` (closed by the server, broken, expired, overdue). */
  interrupted: number;
}

const keyOf = (o: KubeObject) => `${o.metadata?.namespace ?? ""}/${o.metadata?.name}`;

/**
 * The informer.
 *
 * @example
 * ```ts
 * const pods = new Informer<Pod>(kube, PODS, { fieldSelector: `spec.nodeName=${node}` }, handlers, logger);
 * pods.start();
 * await pods.synced;
 * ```
 */
export class Informer<T extends KubeObject> {
  readonly #kube: KubeClient;
  readonly #rt: ResourceType;
  readonly #select: SelectOptions;
  readonly #handlers: InformerHandlers<T>;
  readonly #log: Logger;
  readonly #o: Required<InformerSettings<T>>;
  readonly #cache = new Map<string, T>();
  readonly #abort = new AbortController();
  readonly #synced = Promise.withResolvers<void>();
  #isSynced = false;
  /** The server answered 404 to the last list (`missingIsEmpty`). */
  #missing = false;
  #failingSince: number | undefined;
  #loop?: Promise<void>;
  #resync?: ReturnType<typeof setInterval>;
  /** Counters. */
  readonly stats: InformerStats = { lists: 0, relists: 0, watches: 0, failures: 0, interrupted: 0 };

  /** Creates an informer; call {@link Informer.start}. */
  constructor(
    kube: KubeClient,
    rt: ResourceType,
    select: SelectOptions,
    handlers: InformerHandlers<T>,
    log: Logger,
    options: InformerSettings<T> = {},
  ) {
    this.#kube = kube;
    this.#rt = rt;
    this.#select = select;
    this.#handlers = handlers;
    this.#log = log;
    this.#o = {
      pageSize: 500,
      watchTimeoutSeconds: 300,
      backoffInitialMs: 200,
      backoffMaxMs: 30_000,
      unhealthyAfterMs: 60_000,
      resyncMs: 0,
      requestTimeoutMs: 30_000,
      random: Math.random,
      firstListFromCache: false,
      missingIsEmpty: false,
      keepObjects: true,
      transform: (obj) => obj,
      ...options,
    };
    this.#synced.promise.catch(() => {});
  }

  /** Resolves once the first list has been delivered to the handlers. */
  get synced(): Promise<void> {
    return this.#synced.promise;
  }

  /** True once the first list has been delivered. */
  get isSynced(): boolean {
    return this.#isSynced;
  }

  /** False while the watch has been failing for longer than the deadline. */
  get healthy(): boolean {
    return this.#failingSince === undefined ||
      Date.now() - this.#failingSince < this.#o.unhealthyAfterMs;
  }

  /** The cached objects. */
  list(): T[] {
    return [...this.#cache.values()];
  }

  /** Starts listing and watching. */
  start(): void {
    this.#loop ??= this.#run();
    if (this.#o.resyncMs > 0 && this.#o.keepObjects) {
      this.#resync = setInterval(() => {
        for (const obj of this.#cache.values()) this.#handlers.upsert(obj, "resync");
      }, this.#o.resyncMs);
    }
  }

  /** Stops: the open watch is closed and the loop ends. */
  async stop(): Promise<void> {
    this.#abort.abort();
    clearInterval(this.#resync);
    await this.#loop;
  }

  async #run(): Promise<void> {
    const signal = this.#abort.signal;
    let rv: string | undefined;
    let attempt = 0;
    while (!signal.aborted) {
      try {
        if (rv === undefined) {
          rv = await this.#relist(
            AbortSignal.any([signal, AbortSignal.timeout(this.#o.requestTimeoutMs)]),
          );
        }
        const timeoutSeconds = Math.round(
          this.#o.watchTimeoutSeconds * (0.9 + 0.2 * this.#o.random()),
        );
        // Opening the watch must answer within the request timeout; the stream then lives at most
        // its own timeout plus that margin (a half-open connection cannot hold the informer).
        const watchAbort = new AbortController();
        const opening = setTimeout(
          () => watchAbort.abort(new Error("the watch did not open in time")),
          this.#o.requestTimeoutMs,
        );
        let events: AsyncGenerator<WatchEvent<T | KubeStatus>>;
        try {
          events = await this.#kube.watch<T | KubeStatus>(this.#rt, {
            ...this.#select,
            resourceVersion: rv,
            allowWatchBookmarks: true,
            timeoutSeconds,
            signal: AbortSignal.any([signal, watchAbort.signal]),
          });
        } finally {
          clearTimeout(opening);
        }
        this.stats.watches++;
        attempt = 0;
        this.#failingSince = undefined;
        const cutoff = setTimeout(
          () => watchAbort.abort(new StreamOverdue()),
          timeoutSeconds * 1000 + this.#o.requestTimeoutMs,
        );
        const seen = { rv };
        try {
          await this.#consume(events, seen);
        } finally {
          clearTimeout(cutoff);
          rv = seen.rv;
          if (!signal.aborted) this.stats.interrupted++;
        }
      } catch (e) {
        if (signal.aborted) break;
        if (e instanceof StreamOverdue) continue;
        if (this.#o.missingIsEmpty && e instanceof KubeApiError && e.isNotFound) {
          // Listed again from scratch: a 404 on the watch means the resource went away.
          if (rv !== undefined) {
            rv = undefined;
            continue;
          }
          if (!this.#missing) {
            this.#log.info("{resource}: not served by the API server; none until it is", {
              resource: this.#rt.plural,
            });
          }
          this.#missing = true;
          this.#deliverEmpty();
          await sleep(this.#o.backoffMaxMs, signal);
          continue;
        }
        if (e instanceof KubeApiError && e.isGone) {
          this.#log.info("{resource}: resourceVersion {rv} expired, re-listing", {
            resource: this.#rt.plural,
            rv,
          });
          this.stats.relists++;
          rv = undefined;
          continue;
        }
        this.stats.failures++;
        this.#failingSince ??= Date.now();
        const ceiling = Math.min(this.#o.backoffMaxMs, this.#o.backoffInitialMs * 2 ** attempt++);
        const delay = Math.round(this.#o.random() * ceiling);
        this.#log.warn("{resource}: watch failed ({error}); retrying in {delay} ms", {
          resource: this.#rt.plural,
          error: e instanceof Error ? e.message : String(e),
          delay,
        });
        await sleep(delay, signal);
      }
    }
  }

  /** Applies a watch's events to the cache and handlers, keeping `seen.rv` current. */
  async #consume(
    events: AsyncGenerator<WatchEvent<T | KubeStatus>>,
    seen: { rv: string },
  ): Promise<void> {
    for await (const ev of events) {
      if (ev.type === "ERROR") {
        const status = ev.object as KubeStatus;
        throw new KubeApiError(
          status.code ?? 500,
          status.reason ?? "Unknown",
          status.message ?? "watch error",
        );
      }
      seen.rv = (ev.object as T).metadata?.resourceVersion ?? seen.rv;
      if (ev.type === "BOOKMARK") continue;
      const obj = this.#o.transform(ev.object as T);
      if (ev.type === "DELETED") {
        this.#cache.delete(keyOf(obj));
        this.#handlers.remove(obj);
      } else {
        this.#cache.set(keyOf(obj), this.#kept(obj));
        this.#handlers.upsert(obj, "event");
      }
    }
  }

  /** What the cache keeps of `obj`: itself, or with `keepObjects: false` its identity. */
  #kept(obj: T): T {
    if (this.#o.keepObjects) return obj;
    const { name, namespace, resourceVersion } = obj.metadata ?? {};
    return { metadata: { name, namespace, resourceVersion } } as T;
  }

  /** A resource not served: whatever was cached is gone, and the (empty) first list is in. */
  #deliverEmpty(): void {
    for (const [key, obj] of [...this.#cache]) {
      this.#cache.delete(key);
      this.#handlers.remove(obj);
    }
    if (!this.#isSynced) {
      this.#isSynced = true;
      this.#synced.resolve();
    }
  }

  /** Lists everything, reconciles the cache with it, and returns the list's resourceVersion. */
  async #relist(signal: AbortSignal): Promise<string> {
    const { items, resourceVersion } = await this.#kube.listAll<T>(this.#rt, {
      ...this.#select,
      pageSize: this.#o.pageSize,
      resourceVersion: this.#o.firstListFromCache && this.stats.lists === 0 ? "0" : undefined,
      signal,
    });
    this.stats.lists++;
    if (this.#missing) {
      this.#missing = false;
      this.#log.info("{resource}: now served", { resource: this.#rt.plural });
    }
    const seen = new Set<string>();
    for (const listed of items) {
      const obj = this.#o.transform(listed);
      const key = keyOf(obj);
      seen.add(key);
      const before = this.#cache.get(key);
      this.#cache.set(key, this.#kept(obj));
      if (!before || before.metadata?.resourceVersion !== obj.metadata?.resourceVersion) {
        this.#handlers.upsert(obj, "relist");
      }
    }
    for (const [key, obj] of [...this.#cache]) {
      if (seen.has(key)) continue;
      this.#cache.delete(key);
      this.#handlers.remove(obj);
    }
    if (!this.#isSynced) {
      this.#isSynced = true;
      this.#synced.resolve();
    }
    return resourceVersion;
  }
}
