/**
 * The policy table's rule counters, read now and then for the metrics (not at each scrape: a read
 * by `nft` is a process): through netlink when an in-process reader is at hand (one dump, done
 * before the next tick can come), else by `nft -j list table`. A tick while the last read still
 * runs is skipped, so reads never pile up however slowly `nft` lists a large table, and one that
 * outlasts its timeout is given up, its process killed. A read that finds the table gone says so.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { Nft } from "../cluster/masquerade.ts";
import { Deadline } from "../runtime/deadline.ts";
import { type RuleCount, ruleCounts } from "./rule_counts.ts";

/** A counter read still running after this is given up (its process killed). */
const COUNT_TIMEOUT_MS = 8_000;

/** What the counter needs. */
export interface RuleCounterDeps {
  /** The nftables table (family inet) whose rules are counted. */
  table: string;
  /** Lists the table (`listJson`) when there is no in-process reader. */
  nft: Nft;
  /**
   * Reads the rules' counters in-process (`NftNetlink`: one netlink dump, no process); without
   * it they are read by `nft.listJson`.
   */
  counter?: { ruleCounts(table: string): RuleCount[] };
  /** Where it says a read failed. */
  logger: Logger;
  /** A read still running after this long is given up (8 s unless set). */
  timeoutMs?: number;
  /** Whether the table is written (known to be there): no table, nothing to count. */
  written: () => boolean;
  /** Pods of this node isolated now: each has a counted drop rule. */
  isolatedPods: () => number;
  /** The table was found gone (deleted behind the daemon's back). */
  gone: () => void;
}

/**
 * The counters as last read.
 *
 * @example
 * ```ts
 * const counter = new RuleCounter({ table, nft, logger, written, isolatedPods, gone });
 * counter.start(10_000);
 * metrics(counter.counts);
 * counter.stop();
 * ```
 */
export class RuleCounter {
  readonly #d: RuleCounterDeps;
  #counts: RuleCount[] = [];
  /** Whether a read runs. */
  #counting = false;
  #skipped = 0;
  #timer?: ReturnType<typeof setInterval>;

  /** Creates the counter; nothing is read before {@link RuleCounter.start} or a `read`. */
  constructor(deps: RuleCounterDeps) {
    this.#d = deps;
  }

  /** Reads the counters every `everyMs` until {@link RuleCounter.stop}. */
  start(everyMs: number): void {
    this.#timer = setInterval(() => this.read(), everyMs);
  }

  /** Stops reading (a read under way ends on its own). */
  stop(): void {
    clearInterval(this.#timer);
  }

  /**
   * Packets each rule of the table counted since its chain was written, as last read: allowing
   * rules by policy and rule, drops by pod and direction.
   */
  get counts(): RuleCount[] {
    return this.#counts;
  }

  /** Reads skipped because the last one still ran. */
  get skipped(): number {
    return this.#skipped;
  }

  /**
   * One read of the rules' counters: through netlink when there is a `counter`, else by `nft`;
   * skipped while the last still runs.
   */
  read(): void {
    const { nft, table, counter } = this.#d;
    if (this.#d.written() && counter) {
      try {
        this.#counts = counter.ruleCounts(table);
        // Every isolated pod has a counted drop rule: none at all means the table is gone.
        if (!this.#counts.length && this.#d.isolatedPods()) this.#d.gone();
      } catch (e) {
        this.#d.logger.debug("network policy: the rules' counters were not read: {error}", {
          error: e instanceof Error ? e.message : String(e),
        });
      }
      return;
    }
    if (!this.#d.written() || !nft.listJson) {
      this.#counts = [];
      return;
    }
    if (this.#counting) {
      this.#skipped++;
      return;
    }
    this.#counting = true;
    const deadline = new Deadline(this.#d.timeoutMs ?? COUNT_TIMEOUT_MS);
    nft.listJson(table, deadline.signal).then(
      (json) => {
        this.#counts = json ? ruleCounts(json) : [];
        if (json === undefined && this.#d.written()) this.#d.gone();
      },
      (e) =>
        this.#d.logger.debug("network policy: the rules' counters were not read: {error}", {
          error: e instanceof Error ? e.message : String(e),
        }),
    ).finally(() => {
      deadline[Symbol.dispose]();
      this.#counting = false;
    });
  }
}
