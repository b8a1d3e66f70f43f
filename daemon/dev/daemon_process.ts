/**
 * A Ferry daemon as a process of its own, for the chaos run and the simulated cluster: started
 * with a config file (inside a network namespace when one is named, through `ip netns exec`), its
 * stderr appended to a log file, killed with SIGKILL or stopped with SIGTERM, and waited for until
 * its socket answers.
 *
 * @module
 */
import { HEALTHZ_PATH, READYZ_PATH } from "../../lib/socket_api.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { DAEMON_RUN_FLAGS } from "../runtime/runtime_flags.ts";

/**
 * Waits (bounded) until the daemon on `socket` answers `/healthz` (or, with `ready`, `/readyz`
 * with 200).
 *
 * @throws Error naming `log` (and quoting its end) when it does not in time.
 */
export async function waitForDaemon(
  socket: string,
  log: string,
  options: { ready?: boolean; timeoutMs?: number } = {},
): Promise<void> {
  const deadline = Date.now() + (options.timeoutMs ?? 30_000);
  const path = options.ready ? READYZ_PATH : HEALTHZ_PATH;
  while (true) {
    const res = await unixRequest(socket, "GET", path, undefined, AbortSignal.timeout(500))
      .catch(() => undefined);
    if (res && (!options.ready || res.status === 200)) return;
    if (Date.now() > deadline) {
      const tail = await Deno.readTextFile(log).then((t) => t.slice(-3000), () => "");
      throw new Error(
        `the daemon on ${socket} did not ${options.ready ? "become ready" : "start"} ` +
          `(${res ? `${res.status} ${res.body.trim()}` : "no answer"}); see ${log}, which ends:\n` +
          tail,
      );
    }
    await new Promise((r) => setTimeout(r, 25));
  }
}

/**
 * The process.
 *
 * @example
 * ```ts
 * const daemon = new DaemonProcess("/tmp/x/config.json", "/tmp/x/ferry.sock", "/tmp/x/daemon.log");
 * await daemon.start();
 * await daemon.kill();
 * ```
 */
export class DaemonProcess {
  #child?: Deno.ChildProcess;

  /** A daemon for `configFile` serving on `socket`, logging to `logFile`, inside `netns` if given. */
  constructor(
    readonly configFile: string,
    readonly socket: string,
    readonly logFile: string,
    readonly netns?: string,
  ) {}

  /** Starts it; with `wait`, resolves once its socket answers. */
  async start(wait = true): Promise<void> {
    const daemon = [
      Deno.execPath(),
      "run",
      ...DAEMON_RUN_FLAGS,
      new URL("../wiring/main.ts", import.meta.url).pathname,
      "--config",
      this.configFile,
    ];
    const argv = this.netns ? ["ip", "netns", "exec", this.netns, ...daemon] : daemon;
    // The shell appends stderr to the log file itself: lines are there as they are written (a
    // pipe through this process showed them only once the daemon had exited).
    this.#child = new Deno.Command("/bin/sh", {
      args: ["-c", 'exec "$@" 2>>"$FERRY_DAEMON_LOG"', "sh", ...argv],
      env: { FERRY_DAEMON_LOG: this.logFile },
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
    if (wait) await waitForDaemon(this.socket, this.logFile, { timeoutMs: 20_000 });
  }

  /** The daemon's process ID while it runs (the shell that starts it execs Deno). */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** Sends `signal` to the daemon (SIGHUP: re-read the config's log level). */
  signal(signal: Deno.Signal): void {
    this.#child?.kill(signal);
  }

  /** SIGKILL, as a crash; resolves when it is gone. */
  async kill(): Promise<void> {
    if (!this.#child) return;
    try {
      this.#child.kill("SIGKILL");
    } catch { /* already gone */ }
    await this.#child.status;
    this.#child = undefined;
  }

  /** SIGTERM, a graceful stop; resolves when it is gone. */
  async stop(): Promise<void> {
    if (!this.#child) return;
    this.#child.kill("SIGTERM");
    await this.#child.status;
    this.#child = undefined;
  }
}
