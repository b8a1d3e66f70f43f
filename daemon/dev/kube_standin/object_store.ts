/**
 * The stand-in's storage: objects per resource type, one monotonic resourceVersion counter for
 * all of them (as etcd has), and a history of changes serving two readers, as on a real server:
 * exact-version lists (etcd: until compaction, after which they answer 410) and watches (the
 * watch cache: per resource type it keeps at least the newest 100 events and every event of the
 * last 75 s; a watch from before its oldest event answers 410). No HTTP here.
 *
 * @module
 */
import type { KubeObject } from "../../k8s/client.ts";
import { apiVersionOf, type ResourceType } from "../../k8s/resources.ts";

/** One change, as watches see it. */
export interface Change {
  /** The resourceVersion the change created. */
  rv: number;
  /** The resource type's id (`group/plural`). */
  resource: string;
  /** What happened. */
  type: "ADDED" | "MODIFIED" | "DELETED";
  /** The object after the change (for DELETED: as it was, with the deletion's resourceVersion). */
  object: KubeObject;
  /** The object before the change (MODIFIED, DELETED). */
  previous?: KubeObject;
  /** When it happened (ms since the epoch). */
  at: number;
}

/** The watch cache keeps at least this many events per resource type … */
export const WATCH_CACHE_MIN_EVENTS = 100;
/** … and every event younger than this (ms). */
export const WATCH_CACHE_FRESH_MS = 75_000;

/** An API failure with its HTTP code and Status reason. */
export class ApiFailure extends Error {
  /** HTTP status. */
  readonly code: number;
  /** Status reason. */
  readonly reason: string;
  /** Creates the failure. */
  constructor(code: number, reason: string, message: string) {
    super(message);
    this.code = code;
    this.reason = reason;
  }
}

/** The id of a resource type. */
export const resourceId = (rt: ResourceType) => `${rt.group}/${rt.plural}`;

const keyOf = (
  namespace: string | undefined,
  name: string,
) => (namespace ? `${namespace}/${name}` : name);

/** Object metadata as the server writes it (kubernetes-types marks server-set fields read-only). */
type WritableMeta = Record<string, unknown> & {
  name?: string;
  namespace?: string;
  resourceVersion?: string;
};
const meta = (o: KubeObject) => (o.metadata ??= {}) as WritableMeta;

/** A timestamp as the API formats it (seconds, UTC). */
export const apiTime = (ms = Date.now()) => new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");

/**
 * The store.
 *
 * @example
 * ```ts
 * const store = new ObjectStore();
 * store.create(PODS, "default", { metadata: { name: "web-0" } });
 * ```
 */
export class ObjectStore {
  #rv = 1;
  #compactedRv = 0;
  readonly #objects = new Map<string, Map<string, KubeObject>>();
  readonly #history: Change[] = [];
  readonly #lastRvByResource = new Map<string, number>();
  /** Per resource type: watches from below this version answer 410 (the watch cache's floor). */
  readonly #watchFloor = new Map<string, number>();
  /** Per resource type: how many of its events the watch cache holds. */
  readonly #watchCached = new Map<string, number>();
  readonly #now: () => number;

  /** Creates a store; `now` is the clock of the watch cache's freshness rule. */
  constructor(now: () => number = Date.now) {
    this.#now = now;
  }
  readonly #listeners = new Set<(c: Change) => void>();

  /** The newest resourceVersion. */
  get rv(): number {
    return this.#rv;
  }

  /** Changes at or below this version are gone (410 Expired when asked for). */
  get compactedRv(): number {
    return this.#compactedRv;
  }

  /** The resourceVersion of the newest change of one resource type (0 when none). */
  lastRvOf(rt: ResourceType): number {
    return this.#lastRvByResource.get(resourceId(rt)) ?? 0;
  }

  #bucket(rt: ResourceType): Map<string, KubeObject> {
    const id = resourceId(rt);
    let b = this.#objects.get(id);
    if (!b) this.#objects.set(id, b = new Map());
    return b;
  }

  /** Calls `fn` for every later change, synchronously; returns the unsubscribe function. */
  subscribe(fn: (c: Change) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  #record(rt: ResourceType, type: Change["type"], object: KubeObject, previous?: KubeObject): void {
    const change: Change = {
      rv: this.#rv,
      resource: resourceId(rt),
      type,
      object: structuredClone(object),
      previous,
      at: this.#now(),
    };
    this.#history.push(change);
    this.#lastRvByResource.set(change.resource, change.rv);
    this.#watchCached.set(change.resource, (this.#watchCached.get(change.resource) ?? 0) + 1);
    this.#evictWatchCache(change.resource);
    for (const fn of this.#listeners) fn(change);
  }

  /** Drops the oldest events of a type from the watch cache while it holds more than the minimum and they are stale. */
  #evictWatchCache(resource: string): void {
    let cached = this.#watchCached.get(resource) ?? 0;
    if (cached <= WATCH_CACHE_MIN_EVENTS) return;
    const floor = this.#watchFloor.get(resource) ?? 0;
    const events = this.#history.filter((c) => c.resource === resource && c.rv > floor);
    let i = 0;
    while (cached > WATCH_CACHE_MIN_EVENTS && this.#now() - events[i].at >= WATCH_CACHE_FRESH_MS) {
      i++;
      cached--;
    }
    if (i === 0) return;
    this.#watchFloor.set(resource, events[i].rv - 1);
    this.#watchCached.set(resource, cached);
    this.#prune();
  }

  /** Forgets history that neither exact lists (compacted) nor watches (evicted) can still ask for. */
  #prune(): void {
    const keep = this.#history.filter((c) =>
      c.rv > this.#compactedRv || c.rv > (this.#watchFloor.get(c.resource) ?? 0)
    );
    this.#history.length = 0;
    this.#history.push(...keep);
  }

  #stamp(rt: ResourceType, obj: KubeObject): KubeObject {
    this.#rv++;
    obj.apiVersion = apiVersionOf(rt);
    obj.kind = rt.kind;
    meta(obj).resourceVersion = String(this.#rv);
    return obj;
  }

  /** Reads one object (a copy). */
  get(rt: ResourceType, namespace: string | undefined, name: string): KubeObject {
    const obj = this.#bucket(rt).get(keyOf(namespace, name));
    if (!obj) {
      throw new ApiFailure(404, "NotFound", `${rt.plural} ${JSON.stringify(name)} not found`);
    }
    return structuredClone(obj);
  }

  /** True when the object exists. */
  has(rt: ResourceType, namespace: string | undefined, name: string): boolean {
    return this.#bucket(rt).has(keyOf(namespace, name));
  }

  /** Creates an object; an existing name is 409 AlreadyExists. */
  create(rt: ResourceType, namespace: string | undefined, input: KubeObject): KubeObject {
    const given = { ...input.metadata };
    if (!given.name && given.generateName) {
      given.name = given.generateName + crypto.randomUUID().slice(0, 5);
    }
    if (!given.name) {
      throw new ApiFailure(
        422,
        "Invalid",
        "metadata.name: Required value: name or generateName is required",
      );
    }
    const key = keyOf(namespace, given.name);
    const bucket = this.#bucket(rt);
    if (bucket.has(key)) {
      throw new ApiFailure(
        409,
        "AlreadyExists",
        `${rt.plural} ${JSON.stringify(given.name)} already exists`,
      );
    }
    const obj = structuredClone({ ...input, metadata: given }) as KubeObject;
    const m = meta(obj);
    if (rt.namespaced) m.namespace = namespace;
    else delete m.namespace;
    m.uid = crypto.randomUUID();
    m.creationTimestamp = apiTime();
    delete m.deletionTimestamp;
    delete m.deletionGracePeriodSeconds;
    this.#stamp(rt, obj);
    bucket.set(key, obj);
    this.#record(rt, "ADDED", obj);
    return structuredClone(obj);
  }

  /**
   * Replaces an object. A resourceVersion that is not the current one is 409 Conflict, a UID
   * that is not the object's 422 Invalid (immutable); identity fields (uid, creationTimestamp,
   * deletionTimestamp) are kept.
   */
  update(
    rt: ResourceType,
    namespace: string | undefined,
    name: string,
    input: KubeObject,
    requireRv: boolean,
  ): KubeObject {
    const key = keyOf(namespace, name);
    const bucket = this.#bucket(rt);
    const current = bucket.get(key);
    if (!current) {
      throw new ApiFailure(404, "NotFound", `${rt.plural} ${JSON.stringify(name)} not found`);
    }
    const given = input.metadata?.resourceVersion;
    if (!given && requireRv) {
      throw new ApiFailure(
        422,
        "Invalid",
        `${rt.kind} ${
          JSON.stringify(name)
        } is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update`,
      );
    }
    if (given && given !== current.metadata!.resourceVersion) {
      throw new ApiFailure(
        409,
        "Conflict",
        `Operation cannot be fulfilled on ${rt.plural} ${
          JSON.stringify(name)
        }: the object has been modified; please apply your changes to the latest version and try again`,
      );
    }
    const cm = meta(current);
    const givenUid = input.metadata?.uid;
    if (givenUid && givenUid !== cm.uid) {
      // As the real server validates it: the UID cannot change, so an update or patch that names
      // another incarnation's UID is refused (a client's precondition on the object's identity).
      throw new ApiFailure(
        422,
        "Invalid",
        `${rt.kind} ${JSON.stringify(name)} is invalid: metadata.uid: Invalid value: ${
          JSON.stringify(givenUid)
        }: field is immutable`,
      );
    }
    const obj = structuredClone(input);
    const m = meta(obj);
    Object.assign(m, {
      name,
      namespace: cm.namespace,
      uid: cm.uid,
      creationTimestamp: cm.creationTimestamp,
    });
    for (const f of ["deletionTimestamp", "deletionGracePeriodSeconds"]) {
      if (cm[f] === undefined) delete m[f];
      else m[f] = cm[f];
    }
    this.#commit(rt, key, obj, current);
    return structuredClone(obj);
  }

  /**
   * Marks an object as terminating (`deletionTimestamp` `graceSeconds` from now): a MODIFIED
   * change. An object already marked with a shorter or equal grace period is left as it is.
   */
  markForDeletion(
    rt: ResourceType,
    namespace: string | undefined,
    name: string,
    graceSeconds: number,
  ): KubeObject {
    const key = keyOf(namespace, name);
    const current = this.#bucket(rt).get(key);
    if (!current) {
      throw new ApiFailure(404, "NotFound", `${rt.plural} ${JSON.stringify(name)} not found`);
    }
    const already = current.metadata?.deletionGracePeriodSeconds;
    if (current.metadata?.deletionTimestamp && already !== undefined && already <= graceSeconds) {
      return structuredClone(current);
    }
    const obj = structuredClone(current);
    Object.assign(meta(obj), {
      deletionTimestamp: apiTime(Date.now() + graceSeconds * 1000),
      deletionGracePeriodSeconds: graceSeconds,
    });
    this.#commit(rt, key, obj, current);
    return structuredClone(obj);
  }

  #commit(rt: ResourceType, key: string, obj: KubeObject, current: KubeObject): void {
    this.#stamp(rt, obj);
    this.#bucket(rt).set(key, obj);
    this.#record(rt, "MODIFIED", obj, current);
  }

  /** Removes an object now (DELETED event). */
  remove(rt: ResourceType, namespace: string | undefined, name: string): KubeObject {
    const key = keyOf(namespace, name);
    const bucket = this.#bucket(rt);
    const current = bucket.get(key);
    if (!current) {
      throw new ApiFailure(404, "NotFound", `${rt.plural} ${JSON.stringify(name)} not found`);
    }
    bucket.delete(key);
    const gone = this.#stamp(rt, structuredClone(current));
    this.#record(rt, "DELETED", gone, current);
    return structuredClone(gone);
  }

  /** The objects of a resource type (optionally one namespace) as of `atRv` (default: now). */
  snapshot(rt: ResourceType, namespace: string | undefined, atRv?: number): KubeObject[] {
    const state = new Map(this.#bucket(rt));
    if (atRv !== undefined && atRv < this.#rv) {
      if (atRv < this.#compactedRv) {
        throw new ApiFailure(
          410,
          "Expired",
          `too old resource version: ${atRv} (${this.#compactedRv + 1})`,
        );
      }
      const id = resourceId(rt);
      for (let i = this.#history.length - 1; i >= 0 && this.#history[i].rv > atRv; i--) {
        const c = this.#history[i];
        if (c.resource !== id) continue;
        const key = keyOf(c.object.metadata?.namespace, c.object.metadata!.name!);
        if (c.previous) state.set(key, c.previous);
        else state.delete(key);
      }
    }
    return [...state.entries()]
      .filter(([, o]) => !namespace || o.metadata?.namespace === namespace)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([, o]) => structuredClone(o));
  }

  /**
   * The changes of one resource type after `afterRv`.
   *
   * @throws {ApiFailure} 410 Expired when some of them were compacted away.
   */
  changesSince(rt: ResourceType, afterRv: number): Change[] {
    const id = resourceId(rt);
    const floor = this.#watchFloor.get(id) ?? 0;
    if (afterRv < floor) {
      throw new ApiFailure(410, "Expired", `too old resource version: ${afterRv} (${floor})`);
    }
    return this.#history.filter((c) => c.rv > afterRv && c.resource === id);
  }

  /** Compacts etcd's history up to `rv` (default: now): exact lists of older versions answer 410. */
  compact(rv: number = this.#rv): void {
    this.#compactedRv = Math.max(this.#compactedRv, rv);
    this.#prune();
  }

  /** Evicts every event from the watch cache: watches from any older version answer 410. */
  expireWatchCache(): void {
    for (const c of this.#history) {
      this.#watchFloor.set(c.resource, this.#rv);
      this.#watchCached.set(c.resource, 0);
    }
    this.#prune();
  }
}
