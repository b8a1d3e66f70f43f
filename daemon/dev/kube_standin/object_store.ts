/**
 * The stand-in's storage: objects per resource type, one monotonic resourceVersion counter for
 * all of them (as etcd has), a history of changes for watches and exact-version reads, and
 * compaction of that history. No HTTP here.
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
}

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

const keyOf = (namespace: string | undefined, name: string) => (namespace ? `${namespace}/${name}` : name);

/** Object metadata as the server writes it (kubernetes-types marks server-set fields read-only). */
type WritableMeta = Record<string, unknown> & { name?: string; namespace?: string; resourceVersion?: string };
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
    const change: Change = { rv: this.#rv, resource: resourceId(rt), type, object: structuredClone(object), previous };
    this.#history.push(change);
    this.#lastRvByResource.set(change.resource, change.rv);
    for (const fn of this.#listeners) fn(change);
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
    if (!obj) throw new ApiFailure(404, "NotFound", `${rt.plural} ${JSON.stringify(name)} not found`);
    return structuredClone(obj);
  }

  /** True when the object exists. */
  has(rt: ResourceType, namespace: string | undefined, name: string): boolean {
    return this.#bucket(rt).has(keyOf(namespace, name));
  }

  /** Creates an object; an existing name is 409 AlreadyExists. */
  create(rt: ResourceType, namespace: string | undefined, input: KubeObject): KubeObject {
    const given = { ...input.metadata };
    if (!given.name && given.generateName) given.name = given.generateName + crypto.randomUUID().slice(0, 5);
    if (!given.name) throw new ApiFailure(422, "Invalid", "metadata.name: Required value: name or generateName is required");
    const key = keyOf(namespace, given.name);
    const bucket = this.#bucket(rt);
    if (bucket.has(key)) {
      throw new ApiFailure(409, "AlreadyExists", `${rt.plural} ${JSON.stringify(given.name)} already exists`);
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
   * Replaces an object. A resourceVersion that is not the current one is 409 Conflict; identity
   * fields (uid, creationTimestamp, deletionTimestamp) are kept.
   */
  update(rt: ResourceType, namespace: string | undefined, name: string, input: KubeObject, requireRv: boolean): KubeObject {
    const key = keyOf(namespace, name);
    const bucket = this.#bucket(rt);
    const current = bucket.get(key);
    if (!current) throw new ApiFailure(404, "NotFound", `${rt.plural} ${JSON.stringify(name)} not found`);
    const given = input.metadata?.resourceVersion;
    if (!given && requireRv) {
      throw new ApiFailure(422, "Invalid", `${rt.kind} ${JSON.stringify(name)} is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update`);
    }
    if (given && given !== current.metadata!.resourceVersion) {
      throw new ApiFailure(
        409,
        "Conflict",
        `Operation cannot be fulfilled on ${rt.plural} ${JSON.stringify(name)}: the object has been modified; please apply your changes to the latest version and try again`,
      );
    }
    const obj = structuredClone(input);
    const cm = meta(current);
    const m = meta(obj);
    Object.assign(m, { name, namespace: cm.namespace, uid: cm.uid, creationTimestamp: cm.creationTimestamp });
    for (const f of ["deletionTimestamp", "deletionGracePeriodSeconds"]) {
      if (cm[f] === undefined) delete m[f];
      else m[f] = cm[f];
    }
    this.#commit(rt, key, obj, current);
    return structuredClone(obj);
  }

  /** Marks an object as terminating (`deletionTimestamp` `graceSeconds` from now): a MODIFIED change. */
  markForDeletion(rt: ResourceType, namespace: string | undefined, name: string, graceSeconds: number): KubeObject {
    const key = keyOf(namespace, name);
    const current = this.#bucket(rt).get(key);
    if (!current) throw new ApiFailure(404, "NotFound", `${rt.plural} ${JSON.stringify(name)} not found`);
    if (current.metadata?.deletionTimestamp) return structuredClone(current);
    const obj = structuredClone(current);
    Object.assign(meta(obj), { deletionTimestamp: apiTime(Date.now() + graceSeconds * 1000), deletionGracePeriodSeconds: graceSeconds });
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
    if (!current) throw new ApiFailure(404, "NotFound", `${rt.plural} ${JSON.stringify(name)} not found`);
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
        throw new ApiFailure(410, "Expired", `too old resource version: ${atRv} (${this.#compactedRv + 1})`);
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
    if (afterRv < this.#compactedRv) {
      throw new ApiFailure(410, "Expired", `too old resource version: ${afterRv} (${this.#compactedRv + 1})`);
    }
    const id = resourceId(rt);
    return this.#history.filter((c) => c.rv > afterRv && c.resource === id);
  }

  /** Forgets the history up to `rv` (default: all of it), as etcd compaction does. */
  compact(rv: number = this.#rv): void {
    const keep = this.#history.filter((c) => c.rv > rv);
    this.#history.length = 0;
    this.#history.push(...keep);
    this.#compactedRv = Math.max(this.#compactedRv, rv);
  }
}
