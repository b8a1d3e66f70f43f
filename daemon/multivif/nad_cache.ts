/**
 * NetworkAttachmentDefinitions as one watch of all namespaces delivers them: never an API call per
 * ADD. An ADD that selects a NAD the watch has not delivered yet waits for it (woken by the watch,
 * bounded by its caller), as it waits for its pod. Pure: the watch feeds it.
 *
 * @module
 */
import type { KubeObject } from "../k8s/client.ts";

/** A NetworkAttachmentDefinition (`k8s.cni.cncf.io/v1`). */
export interface NadObject extends KubeObject {
  /** Its CNI config. */
  spec?: { config?: string };
}

/** What is kept of a NAD. */
export interface Nad {
  /** Namespace. */
  namespace: string;
  /** Name. */
  name: string;
  /** `spec.config` (a CNI config or conflist as JSON text), when it has one. */
  config?: string;
}

const keyOf = (namespace: string, name: string) => `${namespace}/${name}`;

/**
 * The cache.
 *
 * @example
 * ```ts
 * const nads = new NadCache();
 * informerHandlers = { upsert: (n) => nads.upsert(n), remove: (n) => nads.remove(n) };
 * const nad = await nads.waitFor("default", "macvlan-conf", AbortSignal.timeout(60_000));
 * ```
 */
export class NadCache {
  readonly #nads = new Map<string, Nad>();
  readonly #waiters = new Map<string, Set<(nad: Nad) => void>>();

  /** Records a NAD seen by the watch and wakes whoever waits for it. */
  upsert(obj: NadObject): void {
    const nad: Nad = {
      namespace: obj.metadata?.namespace ?? "default",
      name: obj.metadata?.name ?? "",
      config: obj.spec?.config,
    };
    const key = keyOf(nad.namespace, nad.name);
    this.#nads.set(key, nad);
    for (const wake of this.#waiters.get(key) ?? []) wake(nad);
    this.#waiters.delete(key);
  }

  /** Forgets a deleted NAD. */
  remove(obj: NadObject): void {
    this.#nads.delete(keyOf(obj.metadata?.namespace ?? "default", obj.metadata?.name ?? ""));
  }

  /** The NAD, if known. */
  get(namespace: string, name: string): Nad | undefined {
    return this.#nads.get(keyOf(namespace, name));
  }

  /** Resolves with the NAD once known; rejects with the signal's reason when it aborts first. */
  waitFor(namespace: string, name: string, signal: AbortSignal): Promise<Nad> {
    const known = this.get(namespace, name);
    if (known) return Promise.resolve(known);
    const key = keyOf(namespace, name);
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const wake = (nad: Nad) => {
        signal.removeEventListener("abort", onAbort);
        resolve(nad);
      };
      const onAbort = () => {
        this.#waiters.get(key)?.delete(wake);
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      let set = this.#waiters.get(key);
      if (!set) this.#waiters.set(key, set = new Set());
      set.add(wake);
    });
  }
}
