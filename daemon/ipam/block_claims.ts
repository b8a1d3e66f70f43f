/**
 * Claiming blocks for this node (`ipam.mode: pool`): a block no node holds is picked
 * ({@link nextFreeBlock}) and its object created, named for its CIDR so that of two nodes
 * claiming one block exactly one create succeeds; the claim is then settled on the cluster's
 * claim counter ({@link ClaimTurn}), so of two overlapping blocks at most one is ever used (the
 * protocol is `claim_protocol.ts`'s, shared with NAD networks' blocks; a pool block may overlap any
 * other block). One claim at a time per family; concurrent callers share it.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import { type Cidr, formatCidr, parseCidr } from "./cidr.ts";
import {
  blockName,
  type IpBlockObject,
  nextFreeBlock,
  parsePool,
  type PoolFamily,
} from "./ip_pools.ts";
import { type ClaimTurn, overlappingPools } from "./block_api.ts";
import { createClaimed, errorText, firstOverlapping, settleNewClaim } from "./claim_protocol.ts";
import { gatewayOf, type NodeBlocks, type OwnedBlock } from "./owned_blocks.ts";

/** The claims of one node's blocks. */
export class BlockClaims {
  readonly #b: NodeBlocks;
  readonly #claiming = new Map<4 | 6, Promise<OwnedBlock>>();

  /** Claims into `blocks`. */
  constructor(blocks: NodeBlocks) {
    this.#b = blocks;
  }

  /** Claims a block of `family` (one claim at a time per family; concurrent callers share it). */
  claim(family: 4 | 6): Promise<OwnedBlock> {
    let claiming = this.#claiming.get(family);
    if (!claiming) {
      claiming = this.#claimNew(family).finally(() => this.#claiming.delete(family));
      this.#claiming.set(family, claiming);
    }
    return claiming;
  }

  async #claimNew(family: 4 | 6): Promise<OwnedBlock> {
    const { nodeName, view, api, logger } = this.#b.d;
    const lostRaces = new Set<string>();
    for (const poolName of this.#b.d.poolNames) {
      const obj = view.pool(poolName);
      if (!obj) continue;
      let fam: PoolFamily | undefined;
      try {
        fam = parsePool(obj).find((f) => f.family === family);
      } catch (e) {
        logger.error("{error}", { error: errorText(e) });
        continue;
      }
      if (!fam) continue;
      for (let attempt = 0; attempt < 32; attempt++) {
        const taken = [
          ...view.blocks().map((b) => parseCidr(b.cidr)),
          ...[...this.#b.blocks.values()].map((b) => b.cidr),
          ...[...lostRaces].map((c) => parseCidr(c)),
        ];
        const cidr = nextFreeBlock(fam, taken, nodeName);
        if (!cidr) break;
        const text = formatCidr(cidr);
        let claimed: { obj: IpBlockObject; turn: ClaimTurn } | undefined;
        this.#b.claimingNames.add(blockName(cidr));
        try {
          claimed = await createClaimed(api, {
            metadata: {
              name: blockName(cidr),
              labels: { "ferry.dev/node": nodeName, "ferry.dev/pool": poolName },
            },
            spec: { pool: poolName, cidr: text, node: nodeName, allocations: [] },
          });
        } catch (e) {
          this.#b.claimingNames.delete(blockName(cidr));
          throw new CniError(
            CNI_ERROR.TRY_AGAIN_LATER,
            `cannot claim a block of IPPool ${poolName} for node ${nodeName}`,
            errorText(e),
          );
        }
        if (!claimed) {
          this.#b.claimingNames.delete(blockName(cidr));
          // Another node was first (our watch had not shown its block yet): try the next.
          this.#b.stats.claimRaces++;
          lostRaces.add(text);
          continue;
        }
        const { obj: created, turn } = claimed;
        let settled: boolean;
        try {
          settled = await this.#settleClaim(created, cidr, turn);
        } catch (e) {
          this.#b.claimingNames.delete(blockName(cidr));
          throw e;
        }
        if (!settled) {
          this.#b.claimingNames.delete(blockName(cidr));
          lostRaces.add(text);
          continue;
        }
        const block = await this.#b.openBlock(poolName, cidr, created)
          .finally(() => this.#b.claimingNames.delete(blockName(cidr)));
        try {
          await this.#b.d.gateways.add(gatewayOf(block));
        } catch (e) {
          this.#b.blocks.delete(block.name);
          await Deno.remove(`${this.#b.dir}/${block.name}`, { recursive: true }).catch(() => {});
          await api.delete(block.name, created.metadata!.uid!, created.metadata!.resourceVersion!)
            .catch(() => {});
          throw new CniError(
            CNI_ERROR.IO_FAILURE,
            `cannot put the gateway of block ${text} on the bridge`,
            errorText(e),
          );
        }
        this.#b.stats.claims++;
        logger.info("claimed block {cidr} of IPPool {pool} for node {node} ({free} addresses)", {
          cidr: text,
          pool: poolName,
          node: nodeName,
          free: block.local.free,
        });
        return block;
      }
    }
    throw this.#b.exhausted(family, this.#whyNoBlock(family));
  }

  /**
   * Settles a claim whose block object was just created (see {@link ClaimTurn}): true once the
   * block is this node's to use; false when another block overlaps it, which is then deleted
   * before any of its addresses was handed out.
   */
  #settleClaim(created: IpBlockObject, cidr: Cidr, first: ClaimTurn): Promise<boolean> {
    const { api, logger, nodeName } = this.#b.d;
    return settleNewClaim(
      api,
      created,
      first,
      () => this.overlapping(created.metadata!.name!, cidr),
      `block ${formatCidr(cidr)} for node ${nodeName}`,
      (other) => {
        this.#b.stats.overlapsYielded++;
        logger.warn(
          "block {cidr} overlaps block {other} of node {owner} (IPPool {pool}): gave it back " +
            "before handing out any of its addresses",
          {
            cidr: formatCidr(cidr),
            other: other.spec!.cidr,
            owner: other.spec!.node,
            pool: other.spec!.pool,
          },
        );
      },
    );
  }

  /** The first block other than `name` that shares addresses with `cidr`, listed from storage. */
  async overlapping(name: string, cidr: Cidr): Promise<IpBlockObject | undefined> {
    return firstOverlapping(await this.#b.d.api.list(), name, cidr);
  }

  /** Why no block of `family` can be claimed: pools missing, broken, full; overlaps reported. */
  #whyNoBlock(family: 4 | 6): string {
    const { view, poolNames, logger } = this.#b.d;
    const reasons: string[] = [];
    for (const name of poolNames) {
      const obj = view.pool(name);
      if (!obj) {
        reasons.push(`IPPool ${name} does not exist`);
        continue;
      }
      try {
        if (!parsePool(obj).some((f) => f.family === family)) {
          reasons.push(`IPPool ${name} has no IPv${family} CIDR`);
        } else reasons.push(`IPPool ${name} has no free block left`);
      } catch (e) {
        reasons.push(errorText(e));
      }
    }
    const overlapping = overlappingPools(view);
    if (overlapping.join() !== this.#b.overlappingPools.join()) {
      this.#b.overlappingPools = overlapping;
      for (const o of overlapping) {
        logger.error("{overlap}: their blocks are claimed one at a time, never both", {
          overlap: o,
        });
      }
    }
    return reasons.join("; ") || "no pool is configured";
  }
}
