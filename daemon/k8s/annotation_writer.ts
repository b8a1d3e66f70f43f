/**
 * Writes pod annotations off the CNI answer path: ADD schedules the write and answers at once.
 * Writes are per pod and coalesced: while one is in flight, later requests for the same pod only
 * mark it dirty, and one more write follows with the newest value (computed when it is sent, so
 * it is never stale). A failed write is retried with backoff a bounded number of times, then
 * logged; the node-local record stays the source of truth either way. Shutdown flushes what is
 * pending, up to a deadline.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";

/** A pod by namespace and name. */
export interface PodKey {
  /** Its namespace. */
  namespace: string;
  /** Its name. */
  name: string;
}

/** Sends one annotation value for a pod. */
export type WriteAnnotation = (pod: PodKey, value: string) => Promise<void>;

interface Slot {
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
  readonly #slots = new Map<string, Slot>();
  #writes = 0;
  #failures = 0;

  /** Creates the writer; a write is tried `1 + retries` times, `backoffMs` doubling between tries. */
  constructor(
    write: WriteAnnotation,
    logger: Logger,
    options: { retries?: number; backoffMs?: number } = {},
  ) {
    this.#write = write;
    this.#logger = logger;
    this.#retries = options.retries ?? 3;
    this.#backoffMs = options.backoffMs ?? 500;
  }

  /** Writes sent (successful or not). */
  get writes(): number {
    return this.#writes;
  }

  /** Pods whose last write failed after every retry. */
  get failures(): number {
    return this.#failures;
  }

  /** Pods with a write pending or in flight. */
  get pending(): number {
    return this.#slots.size;
  }

  /** Schedules a write of `value()` on `pod`; returns at once. */
  schedule(pod: PodKey, value: () => string): void {
    const key = `${pod.namespace}/${pod.name}`;
    const slot = this.#slots.get(key);
    if (slot) {
      slot.value = value;
      slot.dirty = true;
      return;
    }
    const fresh: Slot = { value, dirty: true, done: Promise.resolve() };
    this.#slots.set(key, fresh);
    fresh.done = this.#drain(key, pod, fresh);
  }

  async #drain(key: string, pod: PodKey, slot: Slot): Promise<void> {
    try {
      while (slot.dirty) {
        slot.dirty = false;
        await this.#send(pod, slot.value);
      }
    } finally {
      this.#slots.delete(key);
    }
  }

  async #send(pod: PodKey, value: () => string): Promise<void> {
    for (let attempt = 0;; attempt++) {
      try {
        this.#writes++;
        await this.#write(pod, value());
        return;
      } catch (e) {
        if (attempt >= this.#retries) {
          this.#failures++;
          this.#logger.warn(
            "could not record the attachments on pod {namespace}/{name} after {tries} tries: {error}",
            { ...pod, tries: attempt + 1, error: e instanceof Error ? e.message : String(e) },
          );
          return;
        }
        await new Promise((r) => setTimeout(r, this.#backoffMs * 2 ** attempt));
      }
    }
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
