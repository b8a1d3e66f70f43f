/**
 * A coalescing loop: `kick()` marks work pending; one pass runs at a time, and passes repeat while
 * work was marked during the last one, so a burst of kicks costs one or two passes. A kick that
 * lands between a pass's end and the loop's settling is never lost (the loop starts again).
 * Shared by the cluster controller, the pool IPAM's block writers and the policy enforcers.
 *
 * A pass that throws never ends the process: its error goes to the loop's `onError` (by default a
 * log line), the loop goes on with the next batch of kicks, and {@link DirtyLoop.idle} settles as
 * usual. Retrying the failed work is the owner's (a pass that wants another try kicks again).
 *
 * @module
 */

import { getLogger } from "@logtape/logtape";

const logger = getLogger(["ferry", "loop"]);

/** The default `onError`: one error line naming what the pass threw. */
function logPassFailure(error: unknown): void {
  logger.error("a reconciling pass failed: {error}", {
    error: error instanceof Error ? error.message : String(error),
  });
}

/**
 * The loop.
 *
 * @example
 * ```ts
 * const loop = new DirtyLoop(() => sync());
 * loop.kick();
 * await loop.idle();
 * ```
 */
export class DirtyLoop {
  readonly #pass: () => Promise<void>;
  readonly #go: () => boolean;
  readonly #onError: (error: unknown) => void;
  #dirty = false;
  #running?: Promise<void>;

  /**
   * Runs `pass` for every batch of kicks, while `go()` holds (checked before each pass); what a
   * pass throws goes to `onError`.
   */
  constructor(
    pass: () => Promise<void>,
    go: () => boolean = () => true,
    onError: (error: unknown) => void = logPassFailure,
  ) {
    this.#pass = pass;
    this.#go = go;
    this.#onError = onError;
  }

  /** Marks work pending; a pass runs (after the one running, if any). */
  kick(): void {
    this.#dirty = true;
    this.#start();
  }

  #start(): void {
    this.#running ??= this.#loop().finally(() => {
      this.#running = undefined;
      if (this.#dirty && this.#go()) this.#start();
    });
  }

  async #loop(): Promise<void> {
    // Let the kicks of this tick join the first pass.
    await Promise.resolve();
    while (this.#dirty && this.#go()) {
      this.#dirty = false;
      try {
        await this.#pass();
      } catch (e) {
        try {
          this.#onError(e);
        } catch { /* a reporter that throws must not end the loop either */ }
      }
    }
  }

  /** Whether work is pending or a pass runs. */
  get busy(): boolean {
    return this.#dirty || this.#running !== undefined;
  }

  /** Settles when no pass runs (pending work that `go()` refuses does not count). */
  async idle(): Promise<void> {
    while (this.#running) await this.#running;
  }
}
