/**
 * Claiming NAD blocks for this node: when its blocks of a range are full (or it has none), a
 * block of the range no block of the space overlaps is picked ({@link nextFreeNetworkBlock},
 * sized to the range: see `nad_blocks.ts`), its object created (named for the space's hash and
 * the CIDR: of two nodes claiming one block exactly one create succeeds) and the claim settled on
 * the cluster's claim counter as pool blocks' are (`claim_protocol.ts`; what may overlap a NAD
 * block is its space's blocks). One claim per range at a time; concurrent callers share it, and
 * a claim made ahead of need (`nad_claims_ahead.ts`) is hurried by an ADD that needs it.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { ClaimTurn } from "./block_api.ts";
import { type Cidr, formatCidr, parseCidr } from "./cidr.ts";
import { createClaimed, errorText, firstOverlapping, settleNewClaim } from "./claim_protocol.ts";
import type { BlockAllocation } from "./ip_pools.ts";
import {
  mayClaimAhead,
  networkBlockName,
  type NetworkBlockObject,
  networkBlockRange,
  networkHash,
  nextFreeNetworkBlock,
  rangeId,
} from "./nad_blocks.ts";
import type { NadRange } from "./nad_ipam.ts";
import { AHEAD_SPREAD_MS, spreadStart } from "./nad_claims_ahead.ts";
import { claimKey, type NadBlock, type NodeNadBlocks } from "./nad_node_blocks.ts";

/** A claim under way: its promise, whether it is one made ahead of need, and its start now. */
interface Claiming {
  claim: Promise<NadBlock | undefined>;
  ahead: boolean;
  hurry?: () => void;
}

/** The claims of one node's NAD blocks. */
export class NadBlockClaims {
  readonly #b: NodeNadBlocks;
  readonly #full: (space: string, range: NadRange, listed: NetworkBlockObject[]) => void;
  readonly #unused: (held: NadBlock) => void;
  /** The claim under way per range ({@link claimKey}). */
  readonly #claiming = new Map<string, Claiming>();

  /**
   * Claims into `blocks`; `full` is told what a claim that found no free block listed (the
   * quarantine waits look for blocks other nodes give back), `unused` is handed a block claimed
   * ahead of need (given back when it stays empty).
   */
  constructor(
    blocks: NodeNadBlocks,
    full: (space: string, range: NadRange, listed: NetworkBlockObject[]) => void,
    unused: (held: NadBlock) => void,
  ) {
    this.#b = blocks;
    this.#full = full;
    this.#unused = unused;
  }

  /** Whether a claim of the range `key` ({@link claimKey}) is under way. */
  claiming(key: string): boolean {
    return this.#claiming.has(key);
  }

  /**
   * Claims a block of `range` (one claim per range at a time; concurrent callers share it). A
   * claim made `ahead` of need may decline (see `mayClaimAhead`) or fail: an ADD that was waiting
   * for it then claims for itself.
   */
  async claim(space: string, range: NadRange, ahead = false): Promise<NadBlock | undefined> {
    const key = claimKey(space, range);
    for (;;) {
      const pending = this.#claiming.get(key);
      if (pending) {
        if (ahead) return undefined;
        pending.hurry?.(); // an ADD needs it now: no more waiting out the spread
        try {
          const held = await pending.claim;
          if (held || !pending.ahead) return held;
        } catch (e) {
          if (!pending.ahead) throw e;
        }
        continue;
      }
      // A claim ahead of need starts after a random part of the spread: the nodes of a burst
      // reach half a block together, and claims that overlap in time contend for the claim turn
      // (each lost commit lists the space again).
      const { start, hurry } = spreadStart(ahead ? this.#b.d.aheadSpreadMs ?? AHEAD_SPREAD_MS : 0);
      const claim = start.then(() => this.#claimNew(space, range, ahead)).catch((e) => {
        throw unavailable(
          this.#b,
          e,
          `cannot claim a block of ${formatCidr(range.cidr)} (space ${space})`,
        );
      }).finally(() => {
        if (this.#claiming.get(key)?.claim === claim) this.#claiming.delete(key);
      });
      this.#claiming.set(key, { claim, ahead, hurry });
      return await claim;
    }
  }

  async #claimNew(space: string, range: NadRange, ahead: boolean): Promise<NadBlock | undefined> {
    const { api, nodeName, logger } = this.#b.d;
    const stats = this.#b.stats;
    const lost: Cidr[] = [];
    for (let attempt = 0; attempt < 32; attempt++) {
      if (ahead && this.#b.closed) return undefined;
      // The first candidate is picked from the watch cache: a block another node claimed meanwhile
      // costs a lost create or a settle that yields (whose list is read from storage), never a
      // duplicate. Every later attempt, and "no free block" before it is answered, reads storage:
      // a lagging cache never makes a range look full.
      const cached = attempt === 0;
      const listed = await api.list({ network: space, cached });
      if (ahead && this.#b.closed) return undefined;
      const taken = [
        ...listed.flatMap((b) => b.spec?.cidr ? [parseCidr(b.spec.cidr)] : []),
        ...[...this.#b.blocks.values()].filter((b) => b.network === space).map((b) => b.cidr),
        ...lost,
      ];
      const cidr = nextFreeNetworkBlock(range, taken, nodeName);
      if (!cidr) {
        if (cached) continue;
        if (!ahead) this.#full(space, range, listed);
        return undefined;
      }
      if (ahead && !mayClaimAhead(range, cidr, listed.length + lost.length)) return undefined;
      const pool = networkBlockRange(range, cidr)!;
      const created = await createNadBlock(this.#b, space, rangeId(range), cidr, []);
      if (!created) {
        stats.claimRaces++;
        lost.push(cidr);
        continue;
      }
      if (!(await settleNadClaim(this.#b, created.obj, cidr, created.turn))) {
        stats.claimRaces++;
        lost.push(cidr);
        continue;
      }
      const held = await this.#b.open(space, rangeId(range), cidr, pool, created.obj);
      stats.claims++;
      if (ahead) stats.claimsAhead++;
      logger.info(
        "claimed NAD block {cidr} of space {space} for node {node} ({free} addresses{ahead})",
        {
          cidr: formatCidr(cidr),
          space,
          node: nodeName,
          free: held.local.free,
          ahead: ahead ? ", ahead of need" : "",
        },
      );
      // Given back when it stays unused (a claim ahead of need whose need never came).
      if (ahead && !this.#b.closed) this.#unused(held);
      return held;
    }
    throw new CniError(
      CNI_ERROR.TRY_AGAIN_LATER,
      `cannot claim a block of ${formatCidr(range.cidr)} (space ${space}) for node ${nodeName}`,
      "other nodes kept winning the claims",
    );
  }

  /**
   * At close: a claim ahead of need still waiting out its spread gives up at once, one listing
   * gives up before it creates anything; one already creating ends with the API client (an
   * object left unsettled is this node's at its next start, and given back empty). Settles once
   * every claim has ended.
   */
  async close(): Promise<void> {
    for (const c of this.#claiming.values()) c.hurry?.();
    await Promise.allSettled([...this.#claiming.values()].map((c) => c.claim));
  }
}

/** An API failure as code 11 (the runtime retries); a CniError as it is. */
export function unavailable(blocks: NodeNadBlocks, e: unknown, what: string): CniError {
  if (e instanceof CniError) return e;
  return new CniError(
    CNI_ERROR.TRY_AGAIN_LATER,
    `${what} for node ${blocks.d.nodeName}`,
    errorText(e),
  );
}

/**
 * Creates a NAD block's object after taking a claim turn ({@link createClaimed}); undefined when
 * the name exists.
 *
 * @throws {CniError} 11 when the API fails.
 */
export async function createNadBlock(
  blocks: NodeNadBlocks,
  space: string,
  range: string,
  cidr: Cidr,
  allocations: BlockAllocation[],
): Promise<{ obj: NetworkBlockObject; turn: ClaimTurn } | undefined> {
  const { api, nodeName } = blocks.d;
  try {
    return await createClaimed(api, {
      metadata: {
        name: networkBlockName(space, cidr),
        labels: { "ferry.dev/node": nodeName, "ferry.dev/network": networkHash(space) },
      },
      spec: { network: space, range, cidr: formatCidr(cidr), node: nodeName, allocations },
    });
  } catch (e) {
    throw new CniError(
      CNI_ERROR.TRY_AGAIN_LATER,
      `cannot claim NAD block ${formatCidr(cidr)} (space ${space}) for node ${nodeName}`,
      errorText(e),
    );
  }
}

/**
 * Settles a claim as pool blocks are ({@link settleNewClaim}): true once no other block of the
 * space overlaps and the claim counter was bumped from the version read before the create; false
 * (the object deleted before any address of it was handed out) when another block overlaps it.
 */
export function settleNadClaim(
  blocks: NodeNadBlocks,
  created: NetworkBlockObject,
  cidr: Cidr,
  first: ClaimTurn,
): Promise<boolean> {
  return settleNewClaim(
    blocks.d.api,
    created,
    first,
    () => overlappingInSpace(blocks, created.spec!.network, created.metadata!.name!, cidr),
    `NAD block ${formatCidr(cidr)}`,
  );
}

/** The first block of `space` other than `name` that overlaps `cidr`, listed from storage. */
export async function overlappingInSpace(
  blocks: NodeNadBlocks,
  space: string,
  name: string,
  cidr: Cidr,
): Promise<NetworkBlockObject | undefined> {
  return firstOverlapping(await blocks.d.api.list({ network: space }), name, cidr);
}
