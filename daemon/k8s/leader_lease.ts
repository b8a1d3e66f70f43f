/**
 * Leadership through a `coordination.k8s.io` Lease, as client-go's leader election does it: the
 * holder renews `renewTime` well within `leaseDurationSeconds`; another candidate takes the Lease
 * over only once it has not been renewed for that long; every write carries the resourceVersion it
 * read, so of two candidates acting at once exactly one wins (the other gets 409 or AlreadyExists).
 *
 * @module
 */
import type { KubeObject } from "./client.ts";
import { KubeApiError } from "./errors.ts";

/** A Lease object. */
export interface LeaseObject extends KubeObject {
  /** Who holds it and until when. */
  spec?: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

/** The API side of one Lease. */
export interface LeaseApi {
  /** Reads it; undefined when it does not exist. */
  get(): Promise<LeaseObject | undefined>;
  /** Creates it (AlreadyExists when another was first). */
  create(lease: LeaseObject): Promise<LeaseObject>;
  /** Replaces it (409 Conflict on a stale resourceVersion). */
  update(lease: LeaseObject): Promise<LeaseObject>;
}

/** A Kubernetes MicroTime: RFC 3339 with microseconds. */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

/**
 * One candidate.
 *
 * @example
 * ```ts
 * const lease = new LeaderLease(api, "node-1", 15_000);
 * if (await lease.acquireOrRenew()) reclaim();
 * ```
 */
export class LeaderLease {
  readonly #api: LeaseApi;
  readonly #identity: string;
  readonly #durationMs: number;
  readonly #now: () => number;

  /** Creates a candidate called `identity` for leases of `durationMs`. */
  constructor(api: LeaseApi, identity: string, durationMs: number, now = () => Date.now()) {
    this.#api = api;
    this.#identity = identity;
    this.#durationMs = durationMs;
    this.#now = now;
  }

  /** Takes or renews the Lease; true when this candidate holds it afterwards. */
  async acquireOrRenew(): Promise<boolean> {
    const now = this.#now();
    const seconds = Math.ceil(this.#durationMs / 1000);
    const current = await this.#api.get();
    try {
      if (!current) {
        await this.#api.create({
          metadata: {},
          spec: {
            holderIdentity: this.#identity,
            leaseDurationSeconds: seconds,
            acquireTime: microTime(now),
            renewTime: microTime(now),
            leaseTransitions: 0,
          },
        });
        return true;
      }
      const spec = current.spec ?? {};
      const mine = spec.holderIdentity === this.#identity;
      const renewed = spec.renewTime ? Date.parse(spec.renewTime) : 0;
      const expired = now - renewed > (spec.leaseDurationSeconds ?? seconds) * 1000;
      if (!mine && !expired && spec.holderIdentity) return false;
      await this.#api.update({
        ...current,
        spec: {
          ...spec,
          holderIdentity: this.#identity,
          leaseDurationSeconds: seconds,
          acquireTime: mine ? spec.acquireTime : microTime(now),
          renewTime: microTime(now),
          leaseTransitions: (spec.leaseTransitions ?? 0) + (mine ? 0 : 1),
        },
      });
      return true;
    } catch (e) {
      if (e instanceof KubeApiError && (e.isConflict || e.isAlreadyExists)) return false;
      throw e;
    }
  }

  /**
   * Gives the Lease up if this candidate holds it (the holder emptied, as client-go's leader
   * election releases it), so that another candidate takes it at its next look instead of once
   * it has expired; a failure (or `timeoutMs` passing) leaves it to expire.
   */
  async release(timeoutMs = 2000): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const giveUp = async () => {
      const current = await this.#api.get();
      if (!current?.spec || current.spec.holderIdentity !== this.#identity) return;
      await this.#api.update({
        ...current,
        spec: {
          ...current.spec,
          holderIdentity: "",
          leaseDurationSeconds: 1,
          renewTime: microTime(this.#now()),
        },
      });
    };
    try {
      await Promise.race([
        giveUp(),
        new Promise<void>((r) => (timer = setTimeout(r, timeoutMs))),
      ]);
    } catch {
      // Not given back: it expires.
    } finally {
      clearTimeout(timer);
    }
  }
}
