/**
 * Claims of NAD blocks ahead of need: after an allocation, a node whose blocks of a range are
 * down to half a block free claims its next block in the background ({@link wantsBlockAhead},
 * {@link mayClaimAhead}), so the ADDs that would find them full do not wait for a claim. Such a
 * claim starts at a random moment within a spread ({@link spreadStart}), and a range where one
 * declined is not asked again for a while.
 *
 * @module
 */
import { formatCidr } from "./cidr.ts";
import { errorText } from "./claim_protocol.ts";
import { wantsBlockAhead } from "./nad_blocks.ts";
import type { NadRange } from "./nad_ipam.ts";
import { claimKey, type NadBlock, type NodeNadBlocks } from "./nad_node_blocks.ts";

/**
 * A claim ahead of need starts within this long after it is asked for (ms, uniformly at random),
 * so that the nodes of a burst, which reach half a block together, do not contend for the claim
 * turn all at once: each commit lost to another claim lists the space again (`bench:multinet`,
 * 500 pods over 10 nodes, ~13 claims: 127 lists of the space's blocks without a spread, 67 with
 * 2 s, 35 with 5 s). An ADD that needs the block meanwhile starts it at once.
 */
export const AHEAD_SPREAD_MS = 5000;

/** After a claim ahead of need declined, the range is not asked again for this long (ms). */
const AHEAD_DECLINED_MS = 30_000;

/**
 * When a claim starts: after a random part of `spreadMs` (at once for 0), or when `hurry` is
 * called.
 *
 * @example
 * ```ts
 * const { start, hurry } = spreadStart(5000);
 * start.then(claimNow);
 * hurry?.(); // an ADD needs it now
 * ```
 */
export function spreadStart(spreadMs: number): { start: Promise<void>; hurry?: () => void } {
  if (spreadMs <= 0) return { start: Promise.resolve() };
  let hurry: (() => void) | undefined;
  const start = new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, Math.random() * spreadMs);
    hurry = () => {
      clearTimeout(timer);
      resolve();
    };
  });
  return { start, hurry };
}

/** The claims of ranges' blocks (`NadBlockClaims`, `nad_block_claims.ts`) as claims ahead use them. */
export interface RangeClaims {
  /** Whether a claim of the range `key` ({@link claimKey}) is under way. */
  claiming(key: string): boolean;
  /** Claims a block of `range`, `ahead` of need: undefined when it declines. */
  claim(space: string, range: NadRange, ahead: boolean): Promise<NadBlock | undefined>;
}

/** The claims a node makes ahead of need. */
export class NadClaimsAhead {
  readonly #b: NodeNadBlocks;
  readonly #claims: RangeClaims;
  /** When a claim ahead of need last declined, per range (see `AHEAD_DECLINED_MS`). */
  readonly #declined = new Map<string, number>();

  /** Claims ahead for `blocks` through `claims`. */
  constructor(blocks: NodeNadBlocks, claims: RangeClaims) {
    this.#b = blocks;
    this.#claims = claims;
  }

  /**
   * After an allocation: when this node's blocks of `range` (`mine`) are down to half a block
   * free, its next block is claimed now, in the background (see `wantsBlockAhead`), so that the
   * ADDs which would find them full do not wait for a claim.
   */
  after(space: string, range: NadRange, mine: NadBlock[]): void {
    const key = claimKey(space, range);
    if (this.#b.closed || this.#claims.claiming(key)) return;
    // A range where one was declined (three quarters claimed, only small blocks left) is not
    // asked again for a while: not a list of the space after every ADD.
    const declined = this.#declined.get(key);
    if (declined !== undefined && Date.now() - declined < AHEAD_DECLINED_MS) return;
    const free = mine.reduce((n, b) => n + b.local.free, 0);
    if (!wantsBlockAhead(range, free)) return;
    this.#claims.claim(space, range, true).then((held) => {
      if (held) this.#declined.delete(key);
      else this.#declined.set(key, Date.now());
    }).catch((e) =>
      this.#b.d.logger.warn("claiming a NAD block of {range} ahead of need failed: {error}", {
        range: formatCidr(range.cidr),
        error: errorText(e),
      })
    );
  }
}
