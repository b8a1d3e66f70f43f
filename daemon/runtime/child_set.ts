/**
 * The child processes one owner spawns, kept so that none outlives it: each is killed when its
 * signal aborts (a timeout, a caller giving up) and all of them when the owner closes. Without
 * it an `nft` process started by a daemon that is shutting down (or that stopped waiting for it)
 * runs on, an orphan, for as long as its work takes.
 *
 * @module
 */
import { feedStdin } from "./child_input.ts";

/** A child process that ended because it was killed (aborted, timed out, or its owner closed). */
export class ChildKilledError extends Error {
  /** Creates the error. */
  constructor(what: string, why: string) {
    super(`${what}: killed (${why})`);
    this.name = "ChildKilledError";
  }
}

/** What a run of one child gives back. */
export interface ChildOutput {
  /** Whether it exited with status 0. */
  success: boolean;
  /** What it wrote on stdout (empty unless asked for). */
  stdout: Uint8Array;
  /** What it wrote on stderr. */
  stderr: Uint8Array;
}

/**
 * The live children of one owner.
 *
 * @example
 * ```ts
 * const children = new ChildSet();
 * const out = await children.run("nft", ["-f", "-"], { stdin: ruleset, signal: deadline.signal });
 * children.close(); // on shutdown: whatever still runs is killed
 * ```
 */
export class ChildSet {
  /** Each live child, with what kills it. */
  readonly #live = new Map<Deno.ChildProcess, (why: string) => void>();
  #closed = false;

  /** How many children run now. */
  get size(): number {
    return this.#live.size;
  }

  /**
   * Runs `cmd` with `args` (stdin, when given, written and closed) and resolves to its output;
   * rejects with {@link ChildKilledError} when `signal` aborts first (the child is killed and
   * reaped) or the set is closed.
   */
  async run(
    cmd: string,
    args: string[],
    options: { stdin?: string; stdout?: boolean; signal?: AbortSignal } = {},
  ): Promise<ChildOutput> {
    const what = [cmd, ...args].join(" ");
    if (this.#closed) throw new ChildKilledError(what, "its owner is closed");
    if (options.signal?.aborted) throw new ChildKilledError(what, reasonOf(options.signal.reason));
    const child = new Deno.Command(cmd, {
      args,
      stdin: options.stdin === undefined ? "null" : "piped",
      stdout: options.stdout ? "piped" : "null",
      stderr: "piped",
    }).spawn();
    let why: string | undefined;
    const kill = (reason: string) => {
      why ??= reason;
      try {
        child.kill("SIGKILL");
      } catch { /* already exited */ }
    };
    const onAbort = () => kill(reasonOf(options.signal?.reason));
    options.signal?.addEventListener("abort", onAbort, { once: true });
    this.#live.set(child, kill);
    try {
      const [out] = await Promise.all([
        child.output(),
        options.stdin === undefined ? undefined : feedStdin(child, options.stdin),
      ]);
      if (why) throw new ChildKilledError(what, why);
      return {
        success: out.success,
        stdout: options.stdout ? out.stdout : new Uint8Array(),
        stderr: out.stderr,
      };
    } finally {
      options.signal?.removeEventListener("abort", onAbort);
      this.#live.delete(child);
    }
  }

  /** Kills every child that runs (their runs reject) and refuses new ones. */
  close(): void {
    this.#closed = true;
    for (const kill of this.#live.values()) kill("its owner is closed");
  }
}

function reasonOf(reason: unknown): string {
  if (reason instanceof DOMException && reason.name === "TimeoutError") return "timed out";
  return reason instanceof Error ? reason.message : "aborted";
}
