/**
 * Gives the C allocator's free memory back to the kernel once the daemon has gone quiet.
 *
 * A burst of ADDs and DELs leaves glibc's malloc holding memory that V8's array buffers, Deno's
 * I/O and V8's compiler have freed: malloc keeps freed chunks for reuse and returns to the kernel
 * only what lies at the top of its heap, so the daemon's resident memory stays at the burst's
 * high-water mark. `malloc_trim(0)` hands back every whole free page of every arena. It runs once
 * per quiet spell (no CNI request for {@link QUIET_MS}), on the JS thread; while requests keep
 * coming it does not run at all, so it costs a busy node nothing. Where libc has no
 * `malloc_trim` (not glibc), nothing is trimmed.
 *
 * @module
 */

/** How long without a CNI request counts as quiet, in ms. */
export const QUIET_MS = 5_000;

/** The timer functions the trimmer uses (tests hand in their own clock). */
export interface TrimTimers {
  /** Runs `fn` once after `ms`; the process must not stay alive for it. */
  start(fn: () => void, ms: number): number;
  /** Cancels a timer `start` returned. */
  cancel(id: number): void;
}

const REAL_TIMERS: TrimTimers = {
  start(fn, ms) {
    const id = setTimeout(fn, ms) as unknown as number;
    Deno.unrefTimer(id);
    return id;
  },
  cancel: (id) => clearTimeout(id),
};

/**
 * Calls `trim` once after each quiet spell that follows activity.
 *
 * @example
 * ```ts
 * const trimmer = new IdleTrimmer(mallocTrim()!);
 * trimmer.touch(); // on every CNI request; trims once 5–10 s after the last one
 * ```
 */
export class IdleTrimmer {
  readonly #trim: () => void;
  readonly #quietMs: number;
  readonly #timers: TrimTimers;
  #timer: number | undefined;
  /** Activity since the timer was armed: the spell is not quiet yet. */
  #busy = false;
  /** Activity since the last trim: there may be something to give back. */
  #pending = false;
  #trims = 0;

  /** A trimmer calling `trim` after `quietMs` without activity. */
  constructor(trim: () => void, quietMs = QUIET_MS, timers: TrimTimers = REAL_TIMERS) {
    this.#trim = trim;
    this.#quietMs = quietMs;
    this.#timers = timers;
  }

  /** How many times it has trimmed. */
  get trims(): number {
    return this.#trims;
  }

  /** Notes activity (cheap: at most one timer is armed, whatever the request rate). */
  touch(): void {
    this.#pending = true;
    if (this.#timer === undefined) this.#arm();
    else this.#busy = true;
  }

  /** Cancels the timer. */
  stop(): void {
    if (this.#timer !== undefined) this.#timers.cancel(this.#timer);
    this.#timer = undefined;
  }

  #arm(): void {
    this.#busy = false;
    this.#timer = this.#timers.start(() => this.#fire(), this.#quietMs);
  }

  #fire(): void {
    this.#timer = undefined;
    if (this.#busy) return this.#arm();
    if (!this.#pending) return;
    this.#pending = false;
    this.#trims++;
    this.#trim();
  }
}

let opened: { trim?: () => void } | undefined;

/**
 * glibc's `malloc_trim(0)`, or undefined where libc has none. The library is opened once per
 * process, however many daemons a test starts in it.
 */
export function mallocTrim(): (() => void) | undefined {
  if (opened) return opened.trim;
  try {
    const lib = Deno.dlopen("libc.so.6", {
      malloc_trim: { parameters: ["usize"], result: "i32" },
    });
    opened = { trim: () => void lib.symbols.malloc_trim(0n) };
  } catch {
    opened = {};
  }
  return opened.trim;
}
