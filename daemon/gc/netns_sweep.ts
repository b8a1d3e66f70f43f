/**
 * Standalone mode's reconcile loop (no Kubernetes, so no pod cache): an attachment whose network
 * namespace no longer exists is released, since nothing can use its interfaces any more. That is
 * the one truth a node without an API has, and it covers a DEL the runtime sent while the daemon
 * was down (the shim answered it, as a runtime requires, and the sandbox was then removed): the
 * first sweep after the start finds it. Runs at start, once the network is open, and every
 * `intervalMs`; each release is one log line naming the container, its addresses and why.
 *
 * With Kubernetes, the IP reconcile loop ({@link import("./pod_gc.ts").PodGc}) does this and more.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { Attachment, AttachmentKey, AttachmentStore } from "../records/attachment_store.ts";

/** What the sweep needs. */
export interface NetnsSweepDeps {
  /** The node's attachment records. */
  store: AttachmentStore;
  /** Whether a network namespace path no longer exists. */
  netnsGone: (path: string) => Promise<boolean>;
  /** Releases `key` under its lock when `stale` still holds (CniService.releaseStale). */
  release: (
    key: AttachmentKey,
    stale: (record: Attachment | undefined) => Promise<boolean>,
  ) => Promise<Attachment | undefined>;
  /** Whether the default network is open (nothing is swept before). */
  open: () => boolean;
  /** How often it runs (ms). */
  intervalMs: number;
  /** Runs after every sweep (the node's own `ipam check`). */
  afterSweep?: () => void;
  /** Where to log. */
  logger: Logger;
}

/** What the sweep did. */
export interface NetnsSweepStats {
  /** Sweeps run. */
  sweeps: number;
  /** Attachments released because their namespace was gone. */
  released: number;
  /** Releases that failed (tried again by the next sweep). */
  failed: number;
}

/**
 * The loop.
 *
 * @example
 * ```ts
 * const sweep = new NetnsSweep({ store, netnsGone, release, open, intervalMs: 5000, logger });
 * sweep.start();
 * await sweep.close();
 * ```
 */
export class NetnsSweep {
  readonly #d: NetnsSweepDeps;
  readonly #stats: NetnsSweepStats = { sweeps: 0, released: 0, failed: 0 };
  #timer?: ReturnType<typeof setTimeout>;
  #running?: Promise<void>;
  #closed = false;

  /** Creates the loop (not started). */
  constructor(deps: NetnsSweepDeps) {
    this.#d = deps;
  }

  /** Sweeps now, then every `intervalMs` (once the network is open; until then it waits). */
  start(): void {
    const tick = async () => {
      if (this.#closed) return;
      if (this.#d.open()) {
        this.#running = this.sweep().then(
          () => {},
          (e) => this.#d.logger.error("namespace sweep failed: {error}", { error: String(e) }),
        );
        await this.#running;
      }
      if (this.#closed) return;
      this.#timer = setTimeout(tick, this.#d.open() ? this.#d.intervalMs : 250);
      Deno.unrefTimer(this.#timer);
    };
    void tick();
  }

  /** One sweep: releases every attachment whose namespace is gone; how many. */
  async sweep(): Promise<number> {
    const { store, netnsGone, release, logger } = this.#d;
    this.#stats.sweeps++;
    let released = 0;
    for (const record of store.list()) {
      if (!record.netns || !(await netnsGone(record.netns))) continue;
      const key = { containerId: record.containerId, ifname: record.ifname };
      try {
        // Looked at again under the container's lock: a DEL or a new ADD may have come meanwhile.
        const done = await release(key, async (r) => !!r && await netnsGone(r.netns));
        if (!done) continue;
        released++;
        this.#stats.released++;
        logger.info(
          "released {containerId}/{ifname} ({addresses}): its network namespace {netns} is gone",
          {
            ...key,
            netns: record.netns,
            addresses: (done.result.ips ?? []).map((ip) => ip.address).join(", ") || "no address",
          },
        );
      } catch (e) {
        this.#stats.failed++;
        logger.warn(
          "releasing {containerId}/{ifname} failed ({error}); the next sweep tries again",
          {
            ...key,
            error: String(e),
          },
        );
      }
    }
    this.#d.afterSweep?.();
    return released;
  }

  /** Counters. */
  stats(): NetnsSweepStats {
    return { ...this.#stats };
  }

  /** Stops; a sweep under way finishes. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    await this.#running;
  }
}
