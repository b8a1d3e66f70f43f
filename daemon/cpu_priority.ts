/**
 * The daemon's CPU priority. Every ADD's shim waits for the daemon, and a burst of pod starts is a
 * burst of shims: a Deno start each, tens of milliseconds of CPU, against a few milliseconds of
 * the daemon's per ADD. Under the kernel's fair scheduler a daemon at the same priority gets one
 * share among fifty starting shims, and each waits for it far longer than it works (measured
 * here, 50 shims' ADDs at once: the daemon's own ADD p50 180–200 ms at nice 0, 14–25 ms at -10). So
 * the daemon takes a higher priority (`nice`, -10 by default) for all of its threads at start;
 * threads started later inherit it from the thread that starts them.
 *
 * Nice orders the daemon against the processes of its own CPU cgroup: a host install (the
 * runtime's shims share its cgroup), or the processes of its pod. Between cgroups, such as a
 * DaemonSet pod and the runtime's slice, the cgroups' CPU weights decide (the pod's CPU request).
 *
 * @module
 */

/** The system calls the priority needs; {@link LibcPriority} is the real one. */
export interface PrioritySys {
  /** The process's thread IDs now. */
  threads(): number[];
  /** Sets one thread's nice value; throws {@link PriorityError} with the errno on failure. */
  setNice(tid: number, nice: number): void;
}

/** `setpriority` failed, with its errno. */
export class PriorityError extends Error {
  /** The errno (positive). */
  readonly errno: number;
  /** Creates the error. */
  constructor(message: string, errno: number) {
    super(message);
    this.name = "PriorityError";
    this.errno = errno;
  }
}

const EPERM = 1;
const ESRCH = 3;
const EACCES = 13;

/** What applying a nice value did. */
export interface PriorityOutcome {
  /** Threads set. */
  threads: number;
  /** Why the value could not be taken (no CAP_SYS_NICE for a negative value), when it could not. */
  refused?: string;
}

/**
 * Gives every thread of the process `nice`. A thread that ended meanwhile is skipped; a refusal
 * (EPERM, EACCES: a negative value without CAP_SYS_NICE) stops and is reported, leaving the
 * daemon as it was started; any other failure is thrown.
 *
 * @example
 * ```ts
 * applyNice(-10, LibcPriority.open()); // { threads: 9 }
 * ```
 */
export function applyNice(nice: number, sys: PrioritySys): PriorityOutcome {
  let threads = 0;
  for (const tid of sys.threads()) {
    try {
      sys.setNice(tid, nice);
      threads++;
    } catch (e) {
      if (!(e instanceof PriorityError)) throw e;
      if (e.errno === ESRCH) continue;
      if (e.errno === EPERM || e.errno === EACCES) return { threads, refused: e.message };
      throw e;
    }
  }
  return { threads };
}

const PRIO_PROCESS = 0;
const SYMBOLS = {
  setpriority: { parameters: ["i32", "u32", "i32"], result: "i32" },
  __errno_location: { parameters: [], result: "pointer" },
} as const;

/** {@link PrioritySys} through Deno FFI (`setpriority(2)`) and `/proc/self/task`. */
export class LibcPriority implements PrioritySys {
  readonly #lib: Deno.DynamicLibrary<typeof SYMBOLS>;

  private constructor(lib: Deno.DynamicLibrary<typeof SYMBOLS>) {
    this.#lib = lib;
  }

  /** Opens libc; throws where FFI is not available. */
  static open(): LibcPriority {
    return new LibcPriority(Deno.dlopen("libc.so.6", SYMBOLS));
  }

  /** The entries of `/proc/self/task`. */
  threads(): number[] {
    return [...Deno.readDirSync("/proc/self/task")].map((e) => Number(e.name));
  }

  /** `setpriority(PRIO_PROCESS, tid, nice)`: on Linux, for that one thread. */
  setNice(tid: number, nice: number): void {
    if (this.#lib.symbols.setpriority(PRIO_PROCESS, tid, nice) === 0) return;
    const at = this.#lib.symbols.__errno_location();
    const errno = at ? new Deno.UnsafePointerView(at).getInt32() : 0;
    const name = errno === EPERM || errno === EACCES
      ? "permission denied (a negative value needs CAP_SYS_NICE)"
      : `errno ${errno}`;
    throw new PriorityError(`setpriority(${tid}, ${nice}): ${name}`, errno);
  }

  /** Closes libc. */
  close(): void {
    this.#lib.close();
  }
}
