/**
 * This node's blocks kept in line with the API (`ipam.mode: pool`): at start the node's block
 * objects and its block directories are reconciled; afterwards each block's object follows its
 * allocations (one writer per block, coalescing, with the object's resourceVersion as
 * precondition), a block deleted or re-assigned in the API is written again or given up, one
 * given to this node is adopted, and a block empty for `releaseAfterMs` is given back.
 *
 * @module
 */
import { type BlockAllocation, blockName } from "./ip_pools.ts";
import { parseCidr } from "./cidr.ts";
import { LocalPool } from "./local_pool.ts";
import { sleep } from "../runtime/sleep.ts";
import type { BlockSummary } from "./block_api.ts";
import type { BlockClaims } from "./block_claims.ts";
import {
  blockAllocations,
  deleteOwnObject,
  errorText,
  ownerKey,
  readBlockDirectories,
  recreateObject,
  updateAllocations,
  writeBackoffMs,
} from "./claim_protocol.ts";
import { gatewayOf, type NodeBlocks, type OwnedBlock, plainRange } from "./owned_blocks.ts";

/** The reconciliation of one node's blocks with their objects. */
export class BlockSync {
  readonly #b: NodeBlocks;
  readonly #claims: BlockClaims;
  readonly #timers = new Set<ReturnType<typeof setTimeout>>();

  /** Keeps `blocks` in line with the API, settling re-created objects through `claims`. */
  constructor(blocks: NodeBlocks, claims: BlockClaims) {
    this.#b = blocks;
    this.#claims = claims;
  }

  /** Stops the timers that give back empty blocks (at close). */
  stopTimers(): void {
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
  }

  /**
   * At start: reconciles the node's blocks in the API with its block directories (see
   * `block_ipam.ts`'s module doc). The watches must have delivered their first lists.
   */
  async reconcile(): Promise<void> {
    const { nodeName, view, api, logger } = this.#b.d;
    await Deno.mkdir(this.#b.dir, { recursive: true, mode: 0o700 });
    const local = await readBlockDirectories<{ pool: string; cidr: string }>(
      this.#b.dir,
      (meta) => typeof meta.cidr === "string" ? blockName(parseCidr(meta.cidr)) : undefined,
      (dir) =>
        logger.error("block directory {dir} has no readable .block.json; left alone", { dir }),
    );
    const mine = view.blocks().filter((b) => b.node === nodeName);
    for (const summary of mine) {
      const obj = await api.get(summary.name);
      if (!obj?.spec || obj.spec.node !== nodeName) continue;
      const hadLocal = local.delete(summary.name);
      const block = await this.#b.openBlock(obj.spec.pool, parseCidr(obj.spec.cidr), obj);
      const recorded = obj.spec.allocations ?? [];
      for (const a of recorded) {
        this.#b.meta.set(ownerKey({ containerId: a.containerID, ifname: a.ifname }), {
          uid: a.podUID,
          namespace: a.namespace,
          name: a.name,
        });
      }
      if (!hadLocal && recorded.length) {
        for (const a of recorded) {
          const owner = { containerId: a.containerID, ifname: a.ifname };
          await block.local.hold(a.ip, owner);
          this.#b.adopted.add(ownerKey(owner));
        }
        logger.warn(
          "block {cidr} had no directory here (state lost?): adopted the {n} allocations its " +
            "object records; they are kept until a DEL for their container releases them",
          { cidr: block.text, n: recorded.length },
        );
      }
      if (!this.#b.d.poolNames.includes(block.pool)) {
        logger.warn(
          "block {cidr} is of IPPool {pool}, which this node no longer uses: it keeps its {n} addresses, hands out no more, and is given back once empty",
          { cidr: block.text, pool: block.pool, n: block.local.held },
        );
      }
      this.#b.markDirty(block);
    }
    for (const [name, meta] of local) {
      const cidr = parseCidr(meta.cidr);
      const pool = await LocalPool.open(`${this.#b.dir}/${name}`, plainRange(cidr));
      if (pool.held === 0) {
        await Deno.remove(`${this.#b.dir}/${name}`, { recursive: true });
        logger.info("removed the directory of block {cidr}: no object, no addresses", {
          cidr: meta.cidr,
        });
        continue;
      }
      const block = await this.#b.openBlock(meta.pool, cidr, undefined);
      logger.warn("block {cidr} holds {n} addresses here but has no object; claiming it again", {
        cidr: meta.cidr,
        n: pool.held,
      });
      await this.#recreate(block);
    }
    for (const block of this.#b.blocks.values()) this.checkEmpty(block);
  }

  /** Re-creates the object of a block that holds addresses here but has none. */
  async #recreate(block: OwnedBlock): Promise<void> {
    const { api, nodeName, logger } = this.#b.d;
    if (this.#b.closed) return;
    const r = await recreateObject(
      api,
      {
        metadata: {
          name: block.name,
          labels: { "ferry.dev/node": nodeName, "ferry.dev/pool": block.pool },
        },
        spec: {
          pool: block.pool,
          cidr: block.text,
          node: nodeName,
          allocations: this.#allocationsOf(block),
        },
      },
      () => this.#claims.overlapping(block.name, block.cidr),
      () => this.#b.stats.writes++,
    );
    if ("mine" in r) {
      block.obj = r.mine;
      this.#b.markDirty(block);
      return;
    }
    if (r.obj?.spec?.node === nodeName) block.obj = r.obj;
    block.lost = r.lost;
    logger.error(
      "{why}: {n} pods here keep their addresses ({ips}) until deleted, and nothing new is " +
        "allocated in it; `ipam check` shows whether any address is held twice",
      { why: block.lost, n: block.local.held, ips: block.local.allocations().map((a) => a.ip) },
    );
  }

  #allocationsOf(block: OwnedBlock): BlockAllocation[] {
    return blockAllocations(block.local.allocations(), (owner) => {
      const recorded = this.#b.d.podOf?.(owner);
      return this.#b.meta.get(ownerKey(owner)) ??
        (recorded &&
          { uid: recorded.uid ?? "", namespace: recorded.namespace, name: recorded.name });
    });
  }

  /** One write of a block; a failure marks it dirty again and backs off. */
  async writePass(block: OwnedBlock): Promise<void> {
    try {
      await this.#write(block);
      block.failures = 0;
    } catch (e) {
      block.writer.kick();
      block.failures++;
      const wait = writeBackoffMs(block.failures);
      this.#b.d.logger.warn("writing block {cidr} failed ({error}); again in {ms} ms", {
        cidr: block.text,
        error: errorText(e),
        ms: wait,
      });
      await sleep(wait, this.#b.closing.signal, { unref: true });
    }
  }

  async #write(block: OwnedBlock): Promise<void> {
    const { api, nodeName } = this.#b.d;
    for (let attempt = 0; attempt < 16; attempt++) {
      if (this.#b.closed) return;
      const desired = this.#allocationsOf(block);
      const base = block.obj ?? await api.get(block.name);
      if (this.#b.closed) return;
      if (!base?.spec) {
        block.obj = undefined;
        if (block.local.held === 0) return await this.#forget(block, "its object was deleted");
        return await this.#recreate(block);
      }
      if (base.spec.node !== nodeName) {
        block.obj = base;
        return await this.#recreate(block);
      }
      const written = await updateAllocations(api, block, base, desired);
      if (written === "same") return;
      if (written === "written") {
        this.#b.stats.writes++;
        return;
      }
      if (written === "conflict") this.#b.stats.conflicts++;
    }
    throw new Error(`block ${block.text}: still conflicting after 16 attempts`);
  }

  /** A block that holds no address any more: given back after `releaseAfterMs` (a lost one at once). */
  checkEmpty(block: OwnedBlock): void {
    if (block.local.held > 0) return;
    if (block.lost) {
      // Another node's now: nothing of it is this node's to give back, only its files here.
      void this.#forget(block, `${block.lost}; no pod here holds an address of it any more`);
      return;
    }
    block.emptySince ??= Date.now();
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      this.#retire(block).catch((e) =>
        this.#b.d.logger.warn("giving back block {cidr} failed: {error}", {
          cidr: block.text,
          error: errorText(e),
        })
      );
    }, this.#b.d.releaseAfterMs + 10);
    Deno.unrefTimer(timer);
    this.#timers.add(timer);
  }

  async #retire(block: OwnedBlock): Promise<void> {
    if (this.#b.closed || this.#b.blocks.get(block.name) !== block) return;
    if (block.local.held > 0 || block.retiring || block.emptySince === undefined) return;
    if (Date.now() - block.emptySince < this.#b.d.releaseAfterMs) return;
    // The node's first block of a family stays (the VXLAN device's address comes from it).
    if (this.#b.usable(block.family)[0] === block) return;
    block.retiring = true;
    try {
      await block.writer.idle();
      if (this.#b.closed) {
        block.retiring = false;
        return;
      }
      await deleteOwnObject(this.#b.d.api, block, this.#b.d.nodeName);
      await this.#forget(block, `empty for ${Math.round(this.#b.d.releaseAfterMs / 1000)} s`);
      this.#b.stats.released++;
    } catch (e) {
      block.retiring = false;
      this.checkEmpty(block);
      throw e;
    }
  }

  /** Drops an empty block here: gateway off the bridge, directory removed. */
  async #forget(block: OwnedBlock, why: string): Promise<void> {
    this.#b.blocks.delete(block.name);
    await this.#b.d.gateways.remove(gatewayOf(block)).catch((e) =>
      this.#b.d.logger.warn("taking gateway {gw} off the bridge failed: {error}", {
        gw: gatewayOf(block),
        error: errorText(e),
      })
    );
    await Deno.remove(`${this.#b.dir}/${block.name}`, { recursive: true }).catch(() => {});
    this.#b.d.logger.info("gave back block {cidr} ({why})", { cidr: block.text, why });
  }

  /**
   * The watch saw one of this node's blocks deleted (by hand, or by anyone but this node): the
   * object is written again at once from the node's allocations, so that no other node can
   * claim the block and hand out addresses its pods hold; an empty block is let go.
   */
  blockDeleted(name: string): void {
    const block = this.#b.blocks.get(name);
    if (!block || block.retiring || block.lost || this.#b.closed) return;
    this.#b.d.logger.error(
      "block {cidr} of this node was deleted from the API while it holds {n} addresses; " +
        "writing it again from the node's allocations",
      { cidr: block.text, n: block.local.held },
    );
    block.obj = undefined;
    this.#b.markDirty(block);
  }

  /**
   * The watch saw a block naming this node that the node does not hold (its `spec.node` edited by
   * hand to this node, or a node's blocks moved): it is adopted as at start, so that what its
   * object records is never handed out again, and its allocations of pods that are gone are
   * released by the sweep (`BlockIpam.releaseAdoptedOfGonePods`).
   */
  blockGiven(summary: BlockSummary): void {
    if (this.#b.closed) return;
    const held = this.#b.blocks.get(summary.name);
    if (held && summary.node !== this.#b.d.nodeName && !held.lost && !held.retiring) {
      // Taken from this node (its spec.node edited): its pods keep their addresses, nothing new
      // is allocated in it, and its files go once they are released.
      held.lost = `block ${held.text} now names node ${summary.node}`;
      this.#b.d.logger.error(
        "{why}: {n} pods here keep their addresses ({ips}); nothing new is allocated in it",
        { why: held.lost, n: held.local.held, ips: held.local.allocations().map((a) => a.ip) },
      );
      this.checkEmpty(held);
      return;
    }
    if (summary.node !== this.#b.d.nodeName) return;
    if (this.#b.blocks.has(summary.name) || this.#b.claimingNames.has(summary.name)) return;
    this.#b.claimingNames.add(summary.name);
    this.#adoptGiven(summary).catch((e) =>
      this.#b.d.logger.error("adopting block {cidr} failed: {error}", {
        cidr: summary.cidr,
        error: errorText(e),
      })
    ).finally(() => this.#b.claimingNames.delete(summary.name));
  }

  async #adoptGiven(summary: BlockSummary): Promise<void> {
    const obj = await this.#b.d.api.get(summary.name);
    if (this.#b.closed || !obj?.spec || obj.spec.node !== this.#b.d.nodeName) return;
    if (this.#b.blocks.has(summary.name)) return;
    const block = await this.#b.openBlock(obj.spec.pool, parseCidr(obj.spec.cidr), obj);
    const recorded = obj.spec.allocations ?? [];
    for (const a of recorded) {
      const owner = { containerId: a.containerID, ifname: a.ifname };
      if (block.local.addressOf(owner)) continue;
      await block.local.hold(a.ip, owner);
      this.#b.adopted.add(ownerKey(owner));
      this.#b.meta.set(ownerKey(owner), { uid: a.podUID, namespace: a.namespace, name: a.name });
    }
    this.#b.d.logger.warn(
      "block {cidr} names this node but was not claimed by it (its spec.node edited?): adopted " +
        "the {n} allocations its object records; new addresses come from it too",
      { cidr: block.text, n: recorded.length },
    );
    await this.#b.d.gateways.add(gatewayOf(block)).catch(() => {});
    this.#b.markDirty(block);
    this.checkEmpty(block);
  }
}
