/**
 * The reuse quarantine's waiting side. A released address is not handed out again for
 * `ipam.reuseDelaySeconds` (see docs/ipam.md: every node's NetworkPolicy tables still name it as
 * the old pod's until they have seen that pod go). When the only free addresses of a range are in
 * quarantine, an ADD waits for the earliest of them to come out rather than answering 101, as long
 * as that is before the ADD's own deadline ({@link AllocationWait}); nothing is locked while it
 * waits, so other ADDs and DELs of the range go on, and of several ADDs waiting for one address
 * the first to ask after it came out gets it (the others wait for the next, or answer 101).
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import { sleep } from "../runtime/sleep.ts";

/** How long an allocation may wait for a quarantined address to come out. */
export interface AllocationWait {
  /** The moment it gives up (ms, on the IPAM's {@link IpamClock}). */
  until: number;
  /** Aborts the wait at once (the runtime hung up). */
  signal?: AbortSignal;
}

/** The time the IPAM reads and waits on; tests hand in one they move by hand. */
export interface IpamClock {
  /** Now, in ms. */
  now(): number;
  /** Resolves after `ms`, or at once when `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/**
 * The system's clock.
 *
 * @example
 * ```ts
 * await SYSTEM_CLOCK.sleep(10);
 * ```
 */
export const SYSTEM_CLOCK: IpamClock = Object.freeze({
  now: () => Date.now(),
  sleep: (ms: number, signal?: AbortSignal) => sleep(ms, signal ?? new AbortController().signal),
});

/**
 * Runs `attempt`; when it answers 101 (nothing free) and `earliest` names the moment a
 * quarantined address comes out, waits until then and runs it again, as long as that moment is
 * before `wait.until` and `wait.signal` has not aborted. Without `wait`, or with nothing in
 * quarantine, the 101 is answered at once; when the quarantine lasts past the deadline, the 101
 * says so.
 *
 * @throws {CniError} 101 from `attempt`, or naming the quarantine that outlasts the deadline; the
 * signal's reason when it aborts.
 * @example
 * ```ts
 * const ip = await waitOutQuarantine(() => pool.allocate(owner), () => pool.quarantineEndsAt(),
 *   { until: Date.now() + 10_000 }, SYSTEM_CLOCK);
 * ```
 */
export async function waitOutQuarantine<T>(
  attempt: () => Promise<T>,
  earliest: () => number | undefined,
  wait: AllocationWait | undefined,
  clock: IpamClock,
): Promise<T> {
  for (;;) {
    try {
      return await attempt();
    } catch (e) {
      if (!(e instanceof CniError) || e.code !== CNI_ERROR.ADDRESSES_EXHAUSTED) throw e;
      const at = earliest();
      if (at === undefined || !wait) throw e;
      if (wait.signal?.aborted) throw wait.signal.reason;
      const now = clock.now();
      if (at > wait.until) throw outlasts(e, at - now, wait.until - now);
      await clock.sleep(Math.max(1, at - now), wait.signal);
      if (wait.signal?.aborted) throw wait.signal.reason;
    }
  }
}

/** The 101 of `e`, saying that the earliest quarantined address comes out after the deadline. */
function outlasts(e: CniError, inMs: number, leftMs: number): CniError {
  return new CniError(
    CNI_ERROR.ADDRESSES_EXHAUSTED,
    `${e.message}: its only free addresses are in the reuse quarantine ` +
      `(ipam.reuseDelaySeconds), the earliest for ${seconds(inMs)} more, ` +
      `past this ADD's deadline in ${seconds(Math.max(0, leftMs))}`,
    e.details,
  );
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** The earlier of two moments, either of which may be unknown. */
export function earlier(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined ? b : b === undefined ? a : Math.min(a, b);
}
