/**
 * The node's network is ready when Ferry is: the install stages the conflist (`install-cni
 * --stage-conflist DIR`) and the daemon puts it into the runtime's CNI config directory only once
 * it is ready. Until then the runtime finds no network config, reports `NetworkReady=false`, and
 * the kubelet keeps the node NotReady, so nothing is scheduled onto a node whose Ferry cannot
 * serve (a daemon that never starts, a config it refuses, a node name another daemon holds).
 *
 * Once published the conflist stays, also while the daemon restarts or is not ready for a while:
 * taking it away would make the node NotReady and, after the control plane's grace, evict its
 * pods over what may be a short API outage. A runtime that runs CNI STATUS (CNI 1.1) hears a not
 * ready daemon from the shim instead (code 50). Put back if it goes missing while the daemon is
 * ready.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";

/** What the publisher needs. */
export interface ConflistPublisherDeps {
  /** The staged conflist. */
  staged: string;
  /** The runtime's CNI config directory. */
  confDir: string;
  /** Whether the daemon is ready. */
  ready: () => boolean;
  /** Where it says what it did. */
  logger: Logger;
  /** How often readiness and the published file are looked at (1 s). */
  intervalMs?: number;
}

/**
 * Publishes the staged conflist once the daemon is ready.
 *
 * @example
 * ```ts
 * const publisher = new ConflistPublisher({ staged, confDir: "/etc/cni/net.d", ready, logger });
 * publisher.start();
 * ```
 */
export class ConflistPublisher {
  readonly #d: ConflistPublisherDeps;
  #timer?: ReturnType<typeof setInterval>;
  #running?: Promise<void>;
  #published = 0;
  #lastError = "";

  /** Where the conflist goes. */
  readonly target: string;
  readonly #tmp: string;
  /** The staged text, read once: the install wrote it before the daemon started. */
  #want?: string;

  /** Creates the publisher (not started). */
  constructor(deps: ConflistPublisherDeps) {
    this.#d = deps;
    const name = deps.staged.slice(deps.staged.lastIndexOf("/") + 1);
    this.target = `${deps.confDir}/${name}`;
    this.#tmp = `${deps.confDir}/.${name}.tmp-${Deno.pid}`;
  }

  /** How many times it was written into the config directory. */
  get published(): number {
    return this.#published;
  }

  /** Looks now, then every interval. */
  start(): void {
    const tick = () => {
      this.#running ??= this.publishIfReady().then(
        () => void (this.#lastError = ""),
        (e) => {
          const error = e instanceof Error ? e.message : String(e);
          // Said once while it lasts, not every second.
          if (error !== this.#lastError) {
            this.#d.logger.error("cannot publish the CNI config {target}: {error}", {
              target: this.target,
              error,
            });
          }
          this.#lastError = error;
        },
      ).finally(() => (this.#running = undefined));
    };
    tick();
    this.#timer = setInterval(tick, this.#d.intervalMs ?? 1000);
  }

  /**
   * Writes the staged conflist into the config directory (whole, then renamed) when the daemon is
   * ready and the published file is missing or differs; true when it wrote.
   */
  async publishIfReady(): Promise<boolean> {
    if (!this.#d.ready()) return false;
    const want = this.#want ??= await Deno.readTextFile(this.#d.staged);
    const have = await Deno.readTextFile(this.target).catch(() => undefined);
    if (have === want) return false;
    await Deno.writeTextFile(this.#tmp, want);
    await Deno.rename(this.#tmp, this.target);
    this.#published++;
    this.#d.logger.info(
      have === undefined
        ? "ready: published the CNI config {target}; the node's network is ready"
        : "ready: the CNI config {target} was changed, wrote it back",
      { target: this.target },
    );
    return true;
  }

  /** Stops looking (the published file stays). */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.#running;
  }
}
