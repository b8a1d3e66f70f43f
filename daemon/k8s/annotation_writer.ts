/**
 * Writes pod annotations off the CNI answer path: ADD schedules the write and answers at once.
 * Writes are per pod and coalesced: while one is in flight, later requests for the same pod only
 * mark it dirty, and one more write follows with the newest value (computed when it is sent, so
 * it is never stale). A failed write is retried with exponential backoff (capped) until it lands,
 * the pod is gone (the API answers 404, or 422 on `metadata.uid` when the write names the UID and
 * a new pod took the name, or the caller no longer wants it: the watch saw the pod deleted), the
 * server refuses it as invalid (400, 422: logged, not retried), or the writer is closed; after a
 * few failures in a row it is logged once. An outage of
 * the API server therefore delays annotations, and never loses them. The node-local record stays
 * the source of truth either way. Shutdown flushes what is pending, up to a deadline, then closes.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { KubeApiError } from "./errors.ts";
import { sleep } from "../runtime/sleep.ts";

/** A pod by namespace and name (and UID, when known). */
export interface PodKey {
  /** Its namespace. */
  namespace: string;
  /** Its name. */
  name: string;
  /** Its UID. */
  uid?: string;
}

/** Options of {@link AnnotationWriter}. */
export interface AnnotationWriterOptions {
  /** Failures in a row after which a pod's write is logged as failing (default 3); it goes on. */
  retries?: number;
  /** The first pause after a failure (default 500 ms); it doubles with each failure. */
  backoffMs?: number;
  /** The longest pause between tries (default 60 000 ms). */
  maxBackoffMs?: number;
  /**
   * Whether a write for `pod` is still wanted, asked before each retry (default: always). The
   * daemon answers false once the watch saw the pod deleted, so no retry lands on a new pod of
   * the same name.
   */
  wanted?: (pod: PodKey) => boolean;
}

/** Sends one annotation value for a pod. */
export type WriteAnnotation = (pod: PodKey, value: string) => Promise<void>;

interface Slot {
  pod: PodKey;
  value: () => string;
  dirty: boolean;
  done: Promise<void>;
}

/**
 * The writer.
 *
 * @example
 * ```ts
 * const writer = new AnnotationWriter((pod, v) => kube.patchMerge(…), logger);
 * writer.schedule({ namespace: "default", name: "web-0" }, () => currentValue());
 * await writer.flush(AbortSignal.timeout(5000));
 * ```
 */
export class AnnotationWriter {
  readonly #write: WriteAnnotation;
  readonly #logger: Logger;
  readonly #retries: number;
  readonly #backoffMs: number;
  readonly #maxBackoffMs: number;
  readonly #wanted: (pod: PodKey) => boolean;
  readonly #slots = new Map<string, Slot>();
  /** Aborted at close: ends the retries' pauses. */
  readonly #closing = new AbortController();
  #closed = false;
  #writes = 0;
  #failures = 0;

  /** Creates the writer (see {@link AnnotationWriterOptions} for the retries). */
  constructor(write: WriteAnnotation, logger: Logger, options: AnnotationWriterOptions = {}) {
    this.#write = write;
    this.#logger = logger;
    this.#retries = options.retries ?? 3;
    this.#backoffMs = options.backoffMs ?? 500;
    this.#maxBackoffMs = options.maxBackoffMs ?? 60_000;
    this.#wanted = options.wanted ?? (() => true);
  }

  /** Writes sent (successful or not). */
  get writes(): number {
    return this.#writes;
  }

  /** Pods whose write failed `retries` times in a row (each is retried on until it lands or the pod is gone). */
  get failures(): number {
    return this.#failures;
  }

  /** Pods with a write pending or in flight. */
  get pending(): number {
    return this.#slots.size;
  }

  /** Schedules a write of `value()` on `pod`; returns at once (nothing once closed). */
  schedule(pod: PodKey, value: () => string): void {
    if (this.#closed) return;
    const key = `${pod.namespace}/${pod.name}`;
    const slot = this.#slots.get(key);
    if (slot) {
      slot.pod = pod;
      slot.value = value;
      slot.dirty = true;
      return;
    }
    const fresh: Slot = { pod, value, dirty: true, done: Promise.resolve() };
    this.#slots.set(key, fresh);
    fresh.done = this.#drain(key, fresh);
  }

  async #drain(key: string, slot: Slot): Promise<void> {
    try {
      while (slot.dirty && !this.#closed) await this.#send(slot);
    } finally {
      this.#slots.delete(key);
    }
  }

  /** Writes the slot's newest value (each retry too) until it lands or is no longer wanted. */
  async #send(slot: Slot): Promise<void> {
    for (let failed = 0;;) {
      const pod = slot.pod;
      try {
        slot.dirty = false;
        this.#writes++;
        await this.#write(pod, slot.value());
        if (failed >= this.#retries) {
          this.#logger.info(
            "recorded the attachments on pod {namespace}/{name} after {tries} tries",
            {
              namespace: pod.namespace,
              name: pod.name,
              tries: failed + 1,
            },
          );
        }
        return;
      } catch (e) {
        // The pod is gone, or replaced by a new one of the same name (the write names the UID).
        if (e instanceof KubeApiError && (e.isNotFound || e.isUidMismatch)) return;
        if (e instanceof KubeApiError && (e.status === 400 || e.status === 422)) {
          // The server refuses this write as it is: trying it again would not change that.
          this.#failures++;
          this.#logger.error(
            "the API server refused the attachments annotation of pod {namespace}/{name}: {error}",
            { namespace: pod.namespace, name: pod.name, error: e.message },
          );
          return;
        }
        failed++;
        if (failed === this.#retries) {
          this.#failures++;
          this.#logger.warn(
            "could not record the attachments on pod {namespace}/{name} after {tries} tries " +
              "(retrying at most every {pauseSeconds} s): {error}",
            {
              namespace: pod.namespace,
              name: pod.name,
              tries: failed,
              pauseSeconds: this.#maxBackoffMs / 1000,
              error: e instanceof Error ? e.message : String(e),
            },
          );
        }
        await sleep(
          Math.min(this.#backoffMs * 2 ** (failed - 1), this.#maxBackoffMs),
          this.#closing.signal,
        );
        if (this.#closed || !this.#wanted(slot.pod)) return;
      }
    }
  }

  /**
   * Stops retrying: writes in flight finish, pending retries are dropped and nothing new is
   * scheduled. Settles once no write is in flight.
   */
  async close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort();
    await Promise.all([...this.#slots.values()].map((s) => s.done));
  }

  /** Waits until nothing is pending, or `signal` aborts. */
  async flush(signal: AbortSignal): Promise<void> {
    const aborted = new Promise<void>((r) => {
      if (signal.aborted) r();
      else signal.addEventListener("abort", () => r(), { once: true });
    });
    while (this.#slots.size && !signal.aborted) {
      await Promise.race([Promise.all([...this.#slots.values()].map((s) => s.done)), aborted]);
    }
  }
}
