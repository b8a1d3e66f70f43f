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

import type { Logger } from "@logtape/logtape";
import { Libc, SyscallError } from "../net/netlink/libc.ts";

/** The system calls the priority needs (`Libc` and {@link processThreads} in the daemon). */
export interface PrioritySys {
  /** The process's thread IDs now. */
  threads(): number[];
  /** Sets one thread's nice value; throws a {@link SyscallError} on failure. */
  setNice(tid: number, nice: number): void;
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
 * const libc = Libc.open();
 * applyNice(-10, { threads: processThreads, setNice: (tid, n) => libc.setNice(tid, n) });
 * ```
 */
export function applyNice(nice: number, sys: PrioritySys): PriorityOutcome {
  let threads = 0;
  for (const tid of sys.threads()) {
    try {
      sys.setNice(tid, nice);
      threads++;
    } catch (e) {
      if (!(e instanceof SyscallError)) throw e;
      if (e.errno === ESRCH) continue;
      if (e.errno === EPERM || e.errno === EACCES) return { threads, refused: e.message };
      throw e;
    }
  }
  return { threads };
}

/** This process's thread IDs (the entries of `/proc/self/task`). */
export function processThreads(): number[] {
  return [...Deno.readDirSync("/proc/self/task")].map((e) => Number(e.name));
}

/**
 * Gives the daemon's threads the configured nice value; a refusal or a missing FFI leaves the
 * daemon at its start priority, with a warning. Call it before anything else starts: threads
 * started later inherit it.
 *
 * @example
 * ```ts
 * takeCpuPriority(-10, logger);
 * ```
 */
export function takeCpuPriority(nice: number, logger: Logger): void {
  if (nice === 0) return;
  let reason: string;
  try {
    const libc = Libc.open();
    const { threads, refused } = applyNice(nice, {
      threads: processThreads,
      setNice: (tid, n) => libc.setNice(tid, n),
    });
    if (!refused) {
      logger.info("CPU priority: nice {nice} on {threads} threads", { nice, threads });
      return;
    }
    reason = refused;
  } catch (e) {
    reason = e instanceof Error ? e.message : String(e);
  }
  logger.warn("CPU priority nice {nice} not taken ({reason}); running at the start priority", {
    nice,
    reason,
  });
}
