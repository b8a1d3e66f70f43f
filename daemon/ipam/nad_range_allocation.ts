/**
 * An address of a NAD range for a pod: from this node's blocks of the range, in memory, claiming
 * another block when they are full (`nad_block_claims.ts`) and the next one ahead of need
 * (`nad_claims_ahead.ts`); an address another IPAM's live pod holds (whereabouts', before the
 * migration) is set aside for it instead.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import { formatCidr, formatIp } from "./cidr.ts";
import { ownerKey } from "./claim_protocol.ts";
import type { Owner } from "./local_pool.ts";
import { rangeId } from "./nad_blocks.ts";
import type { NadBlockClaims } from "./nad_block_claims.ts";
import type { NadClaimsAhead } from "./nad_claims_ahead.ts";
import { type NadIpamConfig, type NadRange, spaceKey } from "./nad_ipam.ts";
import { type NadBlock, type NodeNadBlocks, SET_ASIDE } from "./nad_node_blocks.ts";

/** The allocation of addresses in NAD ranges on one node. */
export class NadRangeAllocation {
  readonly #b: NodeNadBlocks;
  readonly #claims: NadBlockClaims;
  readonly #ahead: NadClaimsAhead;

  /** Allocates in `blocks`, claiming through `claims` and `ahead`. */
  constructor(blocks: NodeNadBlocks, claims: NadBlockClaims, ahead: NadClaimsAhead) {
    this.#b = blocks;
    this.#claims = claims;
    this.#ahead = ahead;
  }

  /**
   * An address of `range` for `owner` (the one it holds, if any). `network` names the network in
   * errors.
   *
   * @throws {CniError} 101 naming the network and the range when no address and no block is free.
   */
  async allocate(
    config: NadIpamConfig,
    range: NadRange,
    network: string,
    owner: Owner,
  ): Promise<string> {
    const space = spaceKey(config, range);
    const id = rangeId(range);
    const mine = () =>
      [...this.#b.blocks.values()].filter((b) => b.network === space && b.range === id);
    // A lost block (`NadBlock.lost`) keeps its pods' addresses and hands out no more.
    const usable = () => mine().filter((b) => !b.lost);
    for (const b of mine()) {
      const ip = b.local.addressOf(owner);
      if (ip) return ip;
    }
    // Until nothing is free: every claim adds a block (there are finitely many), and concurrent
    // ADDs may fill a block claimed for this one before it gets its turn.
    for (;;) {
      for (const b of usable()) {
        while (b.local.free > 0) {
          // Given back while an earlier block's allocation awaited (the list is a snapshot): an
          // address reserved in it now would be in a block another node may claim.
          if (this.#b.blocks.get(b.name) !== b || b.lost) break;
          let ip: string;
          try {
            ip = await b.local.allocate(owner);
          } catch (e) {
            if (e instanceof CniError && e.code === CNI_ERROR.ADDRESSES_EXHAUSTED) break;
            throw e;
          }
          const holder = this.#b.d.foreign?.(ip);
          if (holder) {
            await this.#setAside(b, ip, owner, holder);
            continue;
          }
          b.emptySince = undefined;
          this.#b.kick(b);
          this.#ahead.after(space, range, usable());
          return ip;
        }
      }
      const claimed = await this.#claims.claim(space, range);
      if (!claimed) break;
    }
    throw new CniError(
      CNI_ERROR.ADDRESSES_EXHAUSTED,
      `network ${network}: range ${formatCidr(range.cidr)} (${formatIp(range.start)}-${
        formatIp(range.end)
      }) has no free address`,
      `address space ${JSON.stringify(space)}; this node's blocks of it: ${
        mine().map((b) => formatCidr(b.cidr)).join(", ") || "none"
      }, no free block left in the range`,
    );
  }

  /**
   * Gives `ip` back from `owner` and holds it for the live pod another IPAM gave it, as an
   * adopted allocation (released by the sweep once that pod is gone).
   */
  async #setAside(
    b: NadBlock,
    ip: string,
    owner: Owner,
    holder: { namespace: string; name: string },
  ): Promise<void> {
    await b.local.release(owner);
    const other = { containerId: `${SET_ASIDE}${ip.replace(/[.:]/g, "-")}`, ifname: "whereabouts" };
    if (await b.local.hold(ip, other)) {
      this.#b.meta.set(ownerKey(other), { uid: "", ...holder });
      this.#b.adopted.add(ownerKey(other));
      this.#b.kick(b);
      this.#b.d.logger.info("left {ip} to {pod}, whose address it is in whereabouts' IPPool", {
        ip,
        pod: `${holder.namespace}/${holder.name}`,
      });
    }
  }
}
