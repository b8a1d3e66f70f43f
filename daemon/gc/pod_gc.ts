/**
 * The IP reconcile loop: releases what this node holds for pods that are gone, when the runtime
 * never sent their DEL (a node reboot, a crashed runtime, a DEL that failed halfway, the daemon
 * down at teardown). The whereabouts IP reconcile loop is the model, in the sample-controller
 * shape: events only queue keys (one per attachment); one idempotent sync per key reads the
 * node's records and the pod cache, and releases under the container's lock; failures are
 * retried with backoff at most `maxRetries` times; the final outcome of a release is a Kubernetes
 * Event on the pod (`IPAddressGarbageCollected`, `IPAddressGarbageCollectionFailed`) and a log line
 * naming pod, container, addresses and reason.
 *
 * What is stale (released):
 * - an attachment of a pod that the watch no longer has, or has with another UID (a new pod of the
 *   same name): the pod's deletion queues its attachments at once, and the periodic sweep finds
 *   any missed (say, deleted while the daemon was down: gone from the re-list);
 * - an attachment whose network namespace no longer exists (its sandbox is gone; nothing can use
 *   its interfaces), found by the sweep;
 * - a host link on the bridge, or an address, that no attachment names (an ADD killed between
 *   plugging and recording), once the sweep has seen it orphaned for the grace period.
 *
 * What is never released: an attachment younger than `graceMs` (its ADD may be in flight before
 * its pod reaches the watch: it is looked at again when the grace has passed); an attachment of a
 * pod that exists with its UID and whose namespace exists, whatever the runtime said; anything at
 * all while the pod cache is not synced and healthy (an API outage makes the sweep do nothing
 * destructive); an attachment whose pod the cache lacks but the API server itself still has with
 * its UID (`podUid`, a read from the server's storage, asked before each release for a deleted
 * or replaced pod, and before the container's lock is taken: the cache's first list comes from
 * the server's watch cache, which may lag). An attachment without a pod (plain CNI use) is
 * released only for its namespace.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { Attachment, AttachmentKey, AttachmentStore } from "../records/attachment_store.ts";
import type { PodRegistry, RegisteredPod } from "../records/registry.ts";
import { type Outcome, WorkQueue } from "./work_queue.ts";

/** Why an attachment was released. */
export type GcReason = "pod deleted" | "pod replaced" | "namespace gone";

/** What the loop needs. */
export interface PodGcDeps {
  /** The node's attachment records. */
  store: AttachmentStore;
  /** The pod cache of the node's one pod watch. */
  registry: PodRegistry;
  /** True while the pod cache is complete and current (first list in, watch healthy). */
  synced: () => boolean;
  /** Releases `key` under its lock when `stale` still holds (CniService.releaseStale). */
  release: (
    key: AttachmentKey,
    stale: (record: Attachment | undefined) => Promise<boolean>,
  ) => Promise<Attachment | undefined>;
  /** Whether a network namespace path no longer exists. */
  netnsGone: (path: string) => Promise<boolean>;
  /**
   * The UID of the pod of that name as the API server's storage has it now (undefined when there
   * is none); a failure fails the release, which is retried. Without it the pod cache decides
   * alone.
   */
  podUid?: (pod: { namespace: string; name: string }) => Promise<string | undefined>;
  /**
   * Removes host links and addresses no attachment names once orphaned for `graceMs`
   * (CniService.sweepOrphans); run by each sweep.
   */
  sweepOrphans?: (
    seen: Map<string, number>,
    graceMs: number,
  ) => Promise<{ links: string[]; addresses: string[] }>;
  /** Records a Kubernetes Event on a pod (best effort). */
  event?: (
    pod: { namespace: string; name: string; uid?: string },
    type: "Normal" | "Warning",
    reason: string,
    message: string,
  ) => Promise<void>;
  /** Runs after every sweep (the node's own `ipam check`). */
  afterSweep?: () => void;
  /** Attachments younger than this are never released (ms). */
  graceMs: number;
  /** How often the sweep runs (ms; 0: never). */
  intervalMs: number;
  /** Retries of a failed release before it is given up (and reported). */
  maxRetries: number;
  /** Where to log. */
  logger: Logger;
}

/** Counters, for `/v1/stats`. */
export interface PodGcStats {
  /** Attachments released by the loop and the sweep. */
  released: number;
  /** Releases given up after their retries. */
  failed: number;
  /** Sweeps run, and sweeps skipped because the pod cache was not synced. */
  sweeps: number;
  /** Sweeps skipped while the pod cache was not synced. */
  sweepsSkipped: number;
  /** Keys queued or waiting for a retry or their grace. */
  queued: number;
  /** Host links no attachment named, removed by the sweep. */
  orphanLinks: number;
  /** Addresses no attachment named, released by the sweep. */
  orphanAddresses: number;
}

const keyText = (k: AttachmentKey) => `${k.containerId}\n${k.ifname}`;
const keyOf = (text: string): AttachmentKey => {
  const [containerId, ifname] = text.split("\n");
  return { containerId, ifname };
};
const errorText = (e: unknown) => e instanceof Error ? e.message : String(e);

/**
 * The loop.
 *
 * @example
 * ```ts
 * const gc = new PodGc({ store, registry, synced, release, netnsGone, graceMs: 60_000,
 *   intervalMs: 300_000, maxRetries: 2, logger });
 * registry.onRemove((pod) => gc.podDeleted(pod));
 * gc.start();
 * ```
 */
export class PodGc {
  readonly #d: PodGcDeps;
  readonly #queue: WorkQueue;
  readonly #stats = {
    released: 0,
    failed: 0,
    sweeps: 0,
    sweepsSkipped: 0,
    orphanLinks: 0,
    orphanAddresses: 0,
  };
  readonly #orphansSeen = new Map<string, number>();
  #timer?: ReturnType<typeof setInterval>;
  #first?: ReturnType<typeof setInterval>;

  /** Creates the loop. */
  constructor(deps: PodGcDeps) {
    this.#d = deps;
    this.#queue = new WorkQueue(
      (key) => this.#sync(key),
      (o) => this.#outcome(o),
      { maxRetries: deps.maxRetries },
    );
  }

  /**
   * Starts the sweep: once as soon as the pod cache is synced (what was deleted while the daemon
   * was down is released right after a restart), then every interval.
   */
  start(): void {
    if (this.#d.intervalMs <= 0) return;
    const sweep = () =>
      this.sweep().catch((e) =>
        this.#d.logger.error("sweep failed: {error}", { error: errorText(e) })
      );
    this.#first = setInterval(() => {
      if (!this.#d.synced()) return;
      clearInterval(this.#first);
      sweep();
    }, 200);
    Deno.unrefTimer(this.#first as unknown as number);
    this.#timer = setInterval(sweep, this.#d.intervalMs);
    Deno.unrefTimer(this.#timer as unknown as number);
  }

  /** The watch saw `pod` deleted: its attachments on this node are queued. */
  podDeleted(pod: RegisteredPod): void {
    for (const r of this.#d.store.list()) {
      if (r.pod?.namespace === pod.namespace && r.pod.name === pod.name) {
        if (r.pod.uid && r.pod.uid !== pod.uid) continue;
        this.#queue.add(keyText(r));
      }
    }
  }

  /**
   * Queues every attachment that looks stale now; does nothing while the pod cache is not synced.
   *
   * @returns how many were queued.
   */
  async sweep(): Promise<number> {
    if (!this.#d.synced()) {
      this.#stats.sweepsSkipped++;
      this.#d.logger.info("sweep skipped: the pod cache is not synced");
      return 0;
    }
    this.#stats.sweeps++;
    let queued = 0;
    for (const r of this.#d.store.list()) {
      if (await this.#staleReason(r, false)) {
        this.#queue.add(keyText(r));
        queued++;
      }
    }
    const orphans = await this.#d.sweepOrphans?.(this.#orphansSeen, this.#d.graceMs);
    this.#stats.orphanLinks += orphans?.links.length ?? 0;
    this.#stats.orphanAddresses += orphans?.addresses.length ?? 0;
    this.#d.afterSweep?.();
    return queued;
  }

  /** Why `r` is stale (ignoring its age unless `checkAge`), or undefined when it is live. */
  async #staleReason(r: Attachment, checkAge = true): Promise<GcReason | undefined> {
    if (checkAge && Date.now() - Date.parse(r.createdAt) < this.#d.graceMs) return undefined;
    if (await this.#d.netnsGone(r.netns)) return "namespace gone";
    if (!r.pod || !this.#d.synced()) return undefined;
    const pod = this.#d.registry.get(r.pod.namespace, r.pod.name);
    if (!pod) return "pod deleted";
    if (r.pod.uid && pod.uid !== r.pod.uid) return "pod replaced";
    return undefined;
  }

  async #sync(text: string): Promise<void> {
    const key = keyOf(text);
    const record = this.#d.store.get(key);
    if (!record) return;
    const age = Date.now() - Date.parse(record.createdAt);
    if (age < this.#d.graceMs) {
      // Looked at again once its grace has passed.
      if (await this.#staleReason(record, false)) {
        this.#queue.addAfter(text, this.#d.graceMs - age + 50);
      }
      return;
    }
    // The server is asked before the container's lock is taken (a slow API server must not hold
    // up the runtime's DEL of that container): a pod it no longer has with that UID cannot come
    // back, so its answer still holds under the lock, where the cache is looked at again.
    const looks = await this.#staleReason(record);
    if (!looks) return;
    if (looks !== "namespace gone" && record.pod && await this.#inApi(record.pod)) return;
    let reason: GcReason | undefined;
    const released = await this.#d.release(key, async (now) => {
      reason = now ? await this.#staleReason(now) : undefined;
      return reason !== undefined;
    });
    if (!released) return;
    this.#stats.released++;
    const ips = released.result.ips?.map((i) => i.address.split("/")[0]) ?? [];
    this.#d.logger.info(
      "released {containerId}/{ifname} of pod {pod} ({ips}, network {network}): {reason}",
      {
        ...key,
        pod: released.pod ? `${released.pod.namespace}/${released.pod.name}` : "none",
        ips: ips.join(", ") || "no address",
        network: released.network,
        reason,
      },
    );
    if (released.pod) {
      await this.#d.event?.(
        released.pod,
        "Normal",
        "IPAddressGarbageCollected",
        `Ferry released ${
          ips.join(", ") || "the interface"
        } (${released.ifname}, network ${released.network}) of container ${key.containerId}: ${reason}`,
      ).catch(() => {});
    }
  }

  /** Whether the API server still has the attachment's pod (with its UID) though the cache lacks it. */
  async #inApi(pod: NonNullable<Attachment["pod"]>): Promise<boolean> {
    if (!this.#d.podUid) return false;
    const uid = await this.#d.podUid(pod);
    if (uid === undefined || (pod.uid && uid !== pod.uid)) return false;
    this.#d.logger.info(
      "kept the attachments of pod {pod}: the API server has it, the pod cache does not yet",
      { pod: `${pod.namespace}/${pod.name}` },
    );
    return true;
  }

  #outcome(o: Outcome): void {
    if (o.ok) return;
    this.#stats.failed++;
    const key = keyOf(o.key);
    const record = this.#d.store.get(key);
    const ips = record?.result.ips?.map((i) => i.address.split("/")[0]).join(", ") || "none";
    this.#d.logger.error(
      "releasing {containerId}/{ifname} ({ips}) failed {attempts} times, given up: {error}",
      { ...key, ips, attempts: o.attempts, error: errorText(o.error) },
    );
    if (record?.pod) {
      this.#d.event?.(
        record.pod,
        "Warning",
        "IPAddressGarbageCollectionFailed",
        `Ferry could not release ${ips} (${key.ifname}, network ${record.network}) of container ${key.containerId}: ${
          errorText(o.error)
        }`,
      ).catch(() => {});
    }
  }

  /** Settles once nothing is queued or in work (keys waiting for a timer do not count). */
  idle(): Promise<void> {
    return this.#queue.idle();
  }

  /** Counters. */
  stats(): PodGcStats {
    return { ...this.#stats, queued: this.#queue.length };
  }

  /** Stops the sweep and the queue. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    clearInterval(this.#first);
    await this.#queue.close();
  }
}
