/**
 * The reuse quarantine's waits on NAD networks (see `quarantine.ts`): when the earliest
 * quarantined address of a range comes out, in this node's blocks of it or in a single-address
 * block another node holds empty (given back at the end of its quarantine), and the wait for a
 * static address this node released.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import { parseCidr } from "./cidr.ts";
import { type NetworkBlockObject, networkBlockRange, rangeId } from "./nad_blocks.ts";
import type { NadRange } from "./nad_ipam.ts";
import { claimKey, isSingle, type NodeNadBlocks, WRITE_DELAY_MS } from "./nad_node_blocks.ts";
import { type AllocationWait, earlier } from "./quarantine.ts";

/**
 * An ADD waiting for another node to give back an empty single-address block (at the end of its
 * quarantine, and of the write that showed it empty) looks again this long after it is due, and
 * then as often (ms)...
 */
const GIVE_BACK_MARGIN_MS = 1000;
/** ...until this long after it was due: its node is gone or stuck, and it is not waited for. */
const GIVE_BACK_GRACE_MS = 10_000;

/** The quarantine waits of one node's NAD blocks. */
export class NadQuarantineWaits {
  readonly #b: NodeNadBlocks;
  /**
   * Single-address blocks of a range other nodes hold empty (in their quarantine, given back at
   * its end), by name, with when this node first saw each so (on the IPAM's clock), as the last
   * claim that found the range full listed them.
   */
  readonly #emptyElsewhere = new Map<string, Map<string, number>>();

  /** The waits of `blocks`. */
  constructor(blocks: NodeNadBlocks) {
    this.#b = blocks;
  }

  /**
   * When the earliest address of `range` that is in quarantine comes out: in this node's blocks
   * of it, or in a single-address block another node holds empty (given back at the end of its
   * quarantine, which lasts `reuseDelayMs` from at latest when this node first saw it empty; one
   * still there `GIVE_BACK_GRACE_MS` after that, its node gone or stuck, is not waited for).
   */
  endsAt(space: string, range: NadRange): number | undefined {
    const id = rangeId(range);
    let first: number | undefined;
    for (const b of this.#b.blocks.values()) {
      // A lost block's addresses are not handed out again: not worth waiting for.
      if (b.network !== space || b.range !== id || b.lost) continue;
      first = earlier(first, b.local.quarantineEndsAt());
    }
    const { reuseDelayMs, writeDelayMs } = this.#b.d;
    const now = this.#b.clock.now();
    for (const seen of this.#emptyElsewhere.get(claimKey(space, range))?.values() ?? []) {
      const due = seen + (reuseDelayMs ?? 0) + (writeDelayMs ?? WRITE_DELAY_MS);
      // Looked for again a second after it is due, then every second while its node may be late.
      if (now < due + GIVE_BACK_MARGIN_MS) first = earlier(first, due + GIVE_BACK_MARGIN_MS);
      else if (now < due + GIVE_BACK_GRACE_MS) first = earlier(first, now + GIVE_BACK_MARGIN_MS);
    }
    return first;
  }

  /** Records the single-address blocks of `range` that `listed` shows empty on other nodes. */
  noteEmptyElsewhere(space: string, range: NadRange, listed: NetworkBlockObject[]): void {
    const key = claimKey(space, range);
    const before = this.#emptyElsewhere.get(key);
    const now = this.#b.clock.now();
    const seen = new Map<string, number>();
    for (const b of listed) {
      const spec = b.spec;
      const name = b.metadata?.name;
      if (!spec || !name || spec.node === this.#b.d.nodeName || spec.allocations?.length) continue;
      const cidr = parseCidr(spec.cidr);
      if (!isSingle(cidr) || !networkBlockRange(range, cidr)) continue;
      seen.set(name, before?.get(name) ?? now);
    }
    if (seen.size) this.#emptyElsewhere.set(key, seen);
    else this.#emptyElsewhere.delete(key);
  }

  /** Waits until `until`, a static address's end of quarantine, if `wait` allows; 11 otherwise. */
  async forStatic(until: number, what: string, wait: AllocationWait | undefined): Promise<void> {
    const clock = this.#b.clock;
    const left = until - clock.now();
    if (!wait || until > wait.until) {
      throw new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        `${what}: released less than ipam.reuseDelaySeconds ago, in the reuse quarantine for ${
          (left / 1000).toFixed(1)
        } s more${wait ? ", past this ADD's deadline" : ""}`,
      );
    }
    await clock.sleep(Math.max(1, left), wait.signal);
    if (wait.signal?.aborted) throw wait.signal.reason;
  }
}
