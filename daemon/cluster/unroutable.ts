/**
 * Pod ranges of other nodes this node cannot route, and what is said about them. A range is
 * unroutable when planning finds no way to it (no InternalIP of its family, no VXLAN endpoint
 * published) or when the kernel refuses its route or overlay entries (a next hop not on this
 * node's segment: a node in another zone, a typo, a node being re-addressed). Each range is
 * reconciled on its own, so one such node never takes the others' routes or the masquerade table
 * with it. {@link UnroutableReport} decides, pass after pass, what is new (a log line, and a
 * Warning Event on the Node concerned, rate-limited), what is resolved, and when to try again
 * ({@link Backoff}). Pure: the controller does the saying and the timing.
 *
 * @module
 */

/** A pod range of another node without a working route, and why. */
export interface UnroutableRange {
  /** The node whose range it is (empty for a stale route Ferry could not remove). */
  node: string;
  /** The range, e.g. `10.244.9.0/24`. */
  dst: string;
  /** The next hop the route was to take, when there was one. */
  via?: string;
  /** Why: the planning's reason, or the kernel's answer. */
  reason: string;
  /** Whether the kernel refused it (tried again with backoff; planning's wait for a Node change). */
  refused?: boolean;
}

/** The Event reason on a Node whose range cannot be routed. */
export const ROUTE_FAILED_REASON = "FerryRouteFailed";

/** What one pass has to say. */
export interface UnroutableNews {
  /** Ranges unroutable for a reason not said yet (log once each). */
  fresh: UnroutableRange[];
  /** Ranges routed again after having been said unroutable. */
  resolved: string[];
  /**
   * Warning Events to record now, for ranges the kernel refused: one per node and distinct reason,
   * within the rate limit.
   */
  events: { node: string; message: string }[];
}

/**
 * Remembers what was said about unroutable ranges: each range's reason is logged once (again
 * when it changes), each node the kernel refused a range of gets one Event per distinct reason, at most `eventsPerMinute`
 * Events in all (the rest wait for a later pass), and a range that is routed again is said once.
 *
 * @example
 * ```ts
 * const report = new UnroutableReport();
 * const news = report.update(unroutable, Date.now());
 * for (const e of news.events) nodeEvent(e.node, "Warning", ROUTE_FAILED_REASON, e.message);
 * ```
 */
export class UnroutableReport {
  readonly #said = new Map<string, string>();
  readonly #evented = new Map<string, Set<string>>();
  readonly #eventTimes: number[] = [];
  readonly #perMinute: number;

  /** Creates the report; at most `eventsPerMinute` Events are asked for in any minute. */
  constructor(eventsPerMinute = 10) {
    this.#perMinute = eventsPerMinute;
  }

  /** Takes this pass's unroutable ranges; returns what to say about them at `now` (ms). */
  update(unroutable: UnroutableRange[], now: number): UnroutableNews {
    const key = (u: UnroutableRange) => `${u.node} ${u.dst}`;
    const current = new Map(unroutable.map((u) => [key(u), u]));
    const fresh = unroutable.filter((u) => this.#said.get(key(u)) !== u.reason);
    const resolved = [...this.#said.keys()].filter((k) => !current.has(k));
    for (const k of resolved) this.#said.delete(k);
    for (const u of fresh) this.#said.set(key(u), u.reason);
    // A node's Events are remembered while any of its ranges stays unroutable.
    const nodes = new Set(unroutable.map((u) => u.node));
    for (const node of [...this.#evented.keys()]) {
      if (!nodes.has(node)) this.#evented.delete(node);
    }
    while (this.#eventTimes.length && this.#eventTimes[0] <= now - 60_000) {
      this.#eventTimes.shift();
    }
    const events: UnroutableNews["events"] = [];
    for (const u of unroutable) {
      // Planning's (an IPv6 range over the overlay, an endpoint not yet published) are no fault.
      if (!u.node || !u.refused) continue;
      const said = this.#evented.get(u.node) ?? new Set<string>();
      if (said.has(u.reason)) continue;
      if (this.#eventTimes.length >= this.#perMinute) break;
      said.add(u.reason);
      this.#evented.set(u.node, said);
      this.#eventTimes.push(now);
      events.push({
        node: u.node,
        message: `pod range ${u.dst}${u.via ? ` via ${u.via}` : ""} cannot be routed: ${u.reason}`,
      });
    }
    return { fresh, resolved, events };
  }
}

/**
 * Delays between retries that double from `initialMs` to at most `maxMs`, starting again after
 * a success.
 *
 * @example
 * ```ts
 * const backoff = new Backoff(1000, 60_000);
 * backoff.next(); // 1000, then 2000, 4000, … 60000
 * backoff.reset();
 * ```
 */
export class Backoff {
  readonly #initial: number;
  readonly #max: number;
  #next: number;

  /** Creates the backoff. */
  constructor(initialMs: number, maxMs: number) {
    this.#initial = this.#next = initialMs;
    this.#max = maxMs;
  }

  /** The delay before the next retry (and doubles the one after). */
  next(): number {
    const ms = this.#next;
    this.#next = Math.min(this.#next * 2, this.#max);
    return ms;
  }

  /** Starts again from the initial delay. */
  reset(): void {
    this.#next = this.#initial;
  }
}
