/**
 * The daemon's watches, together: one {@link Informer} per watched resource (pods of this node
 * today; NetworkAttachmentDefinitions and IP pools join later), started and stopped as one, and
 * healthy and synced only when each of them is.
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

  /** Adds an informer under a name (started with the others, or at once if already started). */
  add<T extends KubeObject>(name: string, informer: Informer<T>): void {
    this.#informers.set(name, informer as unknown as Informer<KubeObject>);
  }

  /** Starts every informer. */
  start(): void {
    for (const i of this.#informers.values()) i.start();
  }

  /** Stops every informer (their watches close). */
  async stop(): Promise<void> {
    await Promise.all([...this.#informers.values()].map((i) => i.stop()));
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
