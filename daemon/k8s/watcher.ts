/**
 * The daemon's watches, together: one {@link Informer} per watched resource (the node's pods,
 * nodes, IP pools and blocks), started and stopped as one, and healthy and synced only when each
 * of them is. An informer added later starts at once, and one can be removed (the pool watches
 * when `ipam.mode: auto` settles on podCIDRs). The NetworkAttachmentDefinition watch stays apart:
 * it starts with the first pod that selects a network, and a cluster without the NAD CRD must not
 * make the daemon unready.
 *
 * @module
 */
import type { KubeObject } from "./client.ts";
import type { Informer, InformerStats } from "./informer.ts";

/**
 * The set of informers.
 *
 * @example
 * ```ts
 * const watcher = new Watcher();
 * watcher.add("pods", podInformer);
 * watcher.start();
 * ```
 */
export class Watcher {
  readonly #informers = new Map<string, Informer<KubeObject>>();
  #started = false;

  /** Adds an informer under a name (started with the others, or at once if already started). */
  add<T extends KubeObject>(name: string, informer: Informer<T>): void {
    this.#informers.set(name, informer as unknown as Informer<KubeObject>);
    if (this.#started) informer.start();
  }

  /** Stops the informer called `name` and leaves it out of `synced` and `healthy` from now on. */
  async remove(name: string): Promise<void> {
    const informer = this.#informers.get(name);
    this.#informers.delete(name);
    await informer?.stop();
  }

  /** Whether an informer called `name` is in the set. */
  has(name: string): boolean {
    return this.#informers.has(name);
  }

  /** Starts every informer. */
  start(): void {
    this.#started = true;
    for (const i of this.#informers.values()) i.start();
  }

  /** Stops every informer (their watches close). */
  async stop(): Promise<void> {
    await Promise.all([...this.#informers.values()].map((i) => i.stop()));
  }

  /** Resolves once every informer now in the set has delivered its first list. */
  async firstSync(): Promise<void> {
    await Promise.all([...this.#informers.values()].map((i) => i.synced));
  }

  /** True when every informer has delivered its first list. */
  get synced(): boolean {
    return [...this.#informers.values()].every((i) => i.isSynced);
  }

  /** False when any informer has been failing for longer than its deadline. */
  get healthy(): boolean {
    return [...this.#informers.values()].every((i) => i.healthy);
  }

  /** Each informer's counters, by name. */
  stats(): Record<string, InformerStats> {
    return Object.fromEntries([...this.#informers].map(([n, i]) => [n, { ...i.stats }]));
  }
}
