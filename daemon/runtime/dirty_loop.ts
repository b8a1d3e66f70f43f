/**
 * A coalescing loop: `kick()` marks work pending; one pass runs at a time, and passes repeat while
 * work was marked during the last one, so a burst of kicks costs one or two passes. A kick that
 * lands between a pass's end and the loop's settling is never lost (the loop starts again).
 * Shared by the cluster controller and the pool IPAM's block writers.
 *
 * @module
 */

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
  #dirty = false;
  #running?: Promise<void>;

  /** Runs `pass` for every batch of kicks, while `go()` holds (checked before each pass). */
  constructor(pass: () => Promise<void>, go: () => boolean = () => true) {
    this.#pass = pass;
    this.#go = go;
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
      await this.#pass();
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
