/**
 * The pod registry: what the node's one pod watch has seen, keyed by namespace/name and checked
 * against the pod UID, plus the container ID of the ADD that plugged each pod. ADD waits here for
 * its pod (it may race the watch), woken by the watch's events, never by polling.
 *
 * @module
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import type { Attachment } from "./attachment_store.ts";
import type { PodRef } from "../../lib/cni/args.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";

/** The annotation where the daemon records a pod's attachments (one merge patch per ADD). */
export const ATTACHMENTS_ANNOTATION = "ferry.dev/attachments";

/**
 * The parts of a pod Ferry uses: its metadata. The node's pod watch asks the API server for
 * nothing else (a metadata-only watch; the node is in its field selector).
 */
export interface RegisteredPod {
  /** Namespace. */
  namespace: string;
  /** Name. */
  name: string;
  /** UID. */
  uid: string;
  /** resourceVersion seen. */
  resourceVersion: string;
  /** Annotations (network selections, Ferry's own record). */
  annotations: Record<string, string>;
  /** Labels. */
  labels: Record<string, string>;
  /** True once it has a deletionTimestamp. */
  terminating: boolean;
}

/**
 * What the pod watch keeps of a pod (its informer's transform): the metadata {@link stripPod}
 * reads, without the managed fields, owners and anything else; a spec or status a server sent
 * anyway (one that answered whole objects to a metadata-only watch) is dropped too.
 *
 * @example
 * ```ts
 * slimPod({ metadata: { name: "web-0", namespace: "app", managedFields: [] }, spec: { containers: [] } });
 * // { metadata: { name: "web-0", namespace: "app" } } (the other fields it keeps undefined)
 * ```
 */
export function slimPod(pod: Pod): Pod {
  const m = pod.metadata ?? {};
  return {
    metadata: {
      name: m.name,
      namespace: m.namespace,
      uid: m.uid,
      resourceVersion: m.resourceVersion,
      labels: m.labels,
      annotations: m.annotations,
      deletionTimestamp: m.deletionTimestamp,
    },
  };
}

/** Strips a pod to what Ferry keeps. */
export function stripPod(pod: Pod): RegisteredPod {
  const m = pod.metadata ?? {};
  return {
    namespace: m.namespace ?? "default",
    name: m.name ?? "",
    uid: m.uid ?? "",
    resourceVersion: m.resourceVersion ?? "",
    annotations: { ...(m.annotations ?? {}) },
    labels: { ...(m.labels ?? {}) },
    terminating: !!m.deletionTimestamp,
  };
}

/** The container ID recorded in a pod's {@link ATTACHMENTS_ANNOTATION}, if any. */
export function recordedContainerId(pod: RegisteredPod): string | undefined {
  const raw = pod.annotations[ATTACHMENTS_ANNOTATION];
  if (!raw) return undefined;
  try {
    const id = JSON.parse(raw)?.containerId;
    return typeof id === "string" ? id : undefined;
  } catch {
    return undefined;
  }
}

interface Entry {
  pod: RegisteredPod;
  containerId?: string;
}

interface Waiter {
  ref: PodRef;
  resolve: (pod: RegisteredPod) => void;
  reject: (e: unknown) => void;
}

const keyOf = (namespace: string, name: string) => `${namespace}/${name}`;

/**
 * The registry.
 *
 * @example
 * ```ts
 * const registry = new PodRegistry();
 * informerHandlers = { upsert: (p) => registry.upsert(p), remove: (p) => registry.remove(p) };
 * const pod = await registry.waitFor({ namespace: "default", name: "web-0" }, AbortSignal.timeout(60_000));
 * ```
 */
export class PodRegistry {
  readonly #entries = new Map<string, Entry>();
  readonly #waiters = new Map<string, Set<Waiter>>();
  readonly #removed = new Set<(pod: RegisteredPod) => void>();

  /** Calls `fn` with every pod the watch saw deleted; returns the function that stops it. */
  onRemove(fn: (pod: RegisteredPod) => void): () => void {
    this.#removed.add(fn);
    return () => this.#removed.delete(fn);
  }

  /** How many pods are known. */
  get size(): number {
    return this.#entries.size;
  }

  /** Records a pod seen by the watch and wakes whoever waits for it. */
  upsert(raw: Pod): void {
    const pod = stripPod(raw);
    const key = keyOf(pod.namespace, pod.name);
    const before = this.#entries.get(key);
    const containerId = before?.pod.uid === pod.uid ? before.containerId : undefined;
    this.#entries.set(key, { pod, containerId: containerId ?? recordedContainerId(pod) });
    for (const w of [...(this.#waiters.get(key) ?? [])]) this.#settle(key, w, pod);
  }

  /** Forgets a pod the watch saw deleted (only the incarnation with that UID). */
  remove(raw: Pod): void {
    const pod = stripPod(raw);
    const key = keyOf(pod.namespace, pod.name);
    if (this.#entries.get(key)?.pod.uid === pod.uid) this.#entries.delete(key);
    for (const fn of this.#removed) fn(pod);
  }

  /** The pod, if known. */
  get(namespace: string, name: string): RegisteredPod | undefined {
    return this.#entries.get(keyOf(namespace, name))?.pod;
  }

  /** The container ID of the ADD that plugged the pod, if any. */
  containerIdOf(ref: PodRef): string | undefined {
    return this.#entries.get(keyOf(ref.namespace, ref.name))?.containerId;
  }

  /** Records the container ID of a successful ADD (or clears it with undefined). */
  setContainerId(ref: PodRef, containerId: string | undefined): void {
    const e = this.#entries.get(keyOf(ref.namespace, ref.name));
    if (e) e.containerId = containerId;
  }

  #matches(ref: PodRef, pod: RegisteredPod): boolean {
    return !ref.uid || ref.uid === pod.uid;
  }

  #settle(key: string, w: Waiter, pod: RegisteredPod): void {
    if (!this.#matches(w.ref, pod)) return;
    this.#forget(key, w);
    if (pod.terminating) {
      w.reject(
        new CniError(
          CNI_ERROR.TRY_AGAIN_LATER,
          `pod ${key} is terminating; no new sandbox is plugged for it`,
        ),
      );
    } else {
      w.resolve(pod);
    }
  }

  /**
   * Resolves with the pod once the watch has delivered it (with the UID the runtime named, when
   * it named one). Rejects with the signal's reason when `signal` aborts first, and with CNI code
   * 11 for a terminating pod.
   */
  waitFor(ref: PodRef, signal: AbortSignal): Promise<RegisteredPod> {
    const key = keyOf(ref.namespace, ref.name);
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const waiter: Waiter = {
        ref,
        resolve: (pod) => {
          signal.removeEventListener("abort", onAbort);
          resolve(pod);
        },
        reject: (e) => {
          signal.removeEventListener("abort", onAbort);
          reject(e);
        },
      };
      const onAbort = () => {
        this.#forget(key, waiter);
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      let set = this.#waiters.get(key);
      if (!set) this.#waiters.set(key, set = new Set());
      set.add(waiter);
      const known = this.#entries.get(key);
      if (known) this.#settle(key, waiter, known.pod);
    });
  }

  #forget(key: string, w: Waiter): void {
    const set = this.#waiters.get(key);
    set?.delete(w);
    if (set?.size === 0) this.#waiters.delete(key);
  }

  /** How many ADDs are waiting for their pod. */
  get waiting(): number {
    let n = 0;
    for (const s of this.#waiters.values()) n += s.size;
    return n;
  }
}

/** The value of a pod's attachments annotation: its container and every interface plugged for it. */
export function attachmentsAnnotation(containerId: string, all: Attachment[]): string {
  const interfaces = all.filter((a) => a.containerId === containerId).map((a) => ({
    ifname: a.ifname,
    network: a.network,
    hostIfname: a.hostIfname,
    mac: a.result.interfaces?.find((i) => i.name === a.ifname)?.mac,
    ips: a.result.ips?.map((ip) => ip.address) ?? [],
  }));
  return JSON.stringify({ containerId, interfaces });
}
