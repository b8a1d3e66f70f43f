/**
 * The bound on a stop, kept by a thread of its own. A timer on the daemon's event loop cannot
 * keep it: the loop itself may be what does not come back (a synchronous call blocked in the
 * kernel, a lock, the process's exit hanging), and then the timer never fires and only SIGKILL
 * ends the process, with its node's Lease kept. {@link StopWatchdog} runs a Worker
 * (`stop_watchdog_worker.ts`) whose timer fires whatever the main thread does, writes the last
 * line it was told, and ends the process with that exit code.
 *
 * @module
 */
import type { LogFormat } from "../telemetry/log.ts";
import type { WatchdogMessage } from "./stop_watchdog_worker.ts";

/** What the watchdog says, and exits with, if it fires. */
export interface WatchdogVerdict {
  /** The log line's message. */
  message: string;
  /** Its values. */
  properties?: Record<string, unknown>;
  /** The exit code. */
  code: number;
}

/**
 * A watchdog armed once: at `boundMs` from {@link StopWatchdog.arm} the process ends, with the
 * latest verdict's line and code, unless it ended before. Nothing disarms it: a stop that
 * finishes exits the process itself (and says so with {@link StopWatchdog.tell}, should the exit
 * not complete either).
 *
 * @example
 * ```ts
 * const watchdog = StopWatchdog.arm(15_000, "json", { message: "stop did not finish", code: 1 });
 * await daemon.stop();
 * watchdog.tell({ message: "the process did not end after its stop", code: 0 });
 * Deno.exit(0);
 * ```
 */
export class StopWatchdog {
  readonly #worker: Worker;

  private constructor(worker: Worker) {
    this.#worker = worker;
  }

  /**
   * Starts the watchdog's thread, to fire in `boundMs` with `verdict` in format `format`. Should
   * the thread fail (its module cannot load), `failed` is told why, and the process goes on.
   */
  static arm(
    boundMs: number,
    format: LogFormat,
    verdict: WatchdogVerdict,
    failed: (why: string) => void = () => {},
  ): StopWatchdog {
    const worker = new Worker(new URL("./stop_watchdog_worker.ts", import.meta.url), {
      type: "module",
    });
    // A Worker's uncaught error would otherwise end the process in the middle of its stop.
    worker.onerror = (e) => {
      e.preventDefault();
      failed(e.message);
    };
    const first: WatchdogMessage = {
      fireInMs: boundMs,
      format,
      message: verdict.message,
      properties: verdict.properties ?? {},
      code: verdict.code,
    };
    worker.postMessage(first);
    return new StopWatchdog(worker);
  }

  /** Replaces what the watchdog will say and exit with (the timer is not moved). */
  tell(verdict: WatchdogVerdict): void {
    const next: WatchdogMessage = {
      message: verdict.message,
      properties: verdict.properties ?? {},
      code: verdict.code,
    };
    this.#worker.postMessage(next);
  }
}
