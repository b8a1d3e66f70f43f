/**
 * This node's NAD blocks kept in line with the API: at start the node's `NetworkBlock`s and its
 * block directories are reconciled (a directory is the newer truth; an object without one, state
 * lost, has its allocations adopted; a directory without an object that still holds addresses
 * has its object written again); afterwards each block's object follows its allocations (one
 * writer per block, {@link WRITE_DELAY_MS} after a change, the object's resourceVersion as
 * precondition: `claim_protocol.ts`), and an empty block is given back, a single address once its
 * quarantine is over, a larger block after `releaseAfterMs`. A block whose object is gone or
 * names another node while it holds addresses here has its object written again, and is lost
 * when another node has it or a block claimed meanwhile overlaps it (`recreateObject`: its pods
 * keep their addresses until their DEL, nothing new is allocated in it); so is, at start, a block
 * of this node that another block of its space overlaps.
 *
 * @module
 */
import { parseCidr } from "./cidr.ts";
import {
  blockAllocations,
  deleteOwnObject,
  errorText,
  firstOverlapping,
  ownerKey,
  readBlockDirectories,
  recreateObject,
  updateAllocations,
  writeBackoffMs,
} from "./claim_protocol.ts";
import type { BlockAllocation } from "./ip_pools.ts";
import { networkBlockName, type NetworkBlockObject, networkHash } from "./nad_blocks.ts";
import { overlappingInSpace } from "./nad_block_claims.ts";
import {
  isSingle,
  type NadBlock,
  type NadBlockMeta,
  type NodeNadBlocks,
  poolOfMeta,
  poolOfObject,
  SET_ASIDE,
  WRITE_DELAY_MS,
} from "./nad_node_blocks.ts";
import { formatCidr } from "./cidr.ts";

/** The reconciliation of one node's NAD blocks with their objects. */
export class NadBlockSync {
  readonly #b: NodeNadBlocks;

  /** Keeps `blocks` in line with the API. */
  constructor(blocks: NodeNadBlocks) {
    this.#b = blocks;
  }

  /** At start: reconciles the node's blocks in the API with its directories. */
  async reconcile(): Promise<void> {
    const { api, nodeName, logger } = this.#b.d;
    const dir = this.#b.dir;
    await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
    const local = await readBlockDirectories<NadBlockMeta>(
      dir,
      (meta) => networkBlockName(meta.network, parseCidr(meta.cidr)),
      (dir) =>
        logger.error("NAD block directory {dir} has no readable .block.json; left alone", { dir }),
    );
    const listed = await api.list({ node: nodeName });
    const spaces = new Map<string, NetworkBlockObject[]>();
    for (const obj of listed) {
      const spec = obj.spec;
      if (!spec || spec.node !== nodeName) continue;
      const name = obj.metadata!.name!;
      const meta = local.get(name);
      local.delete(name);
      const pool = meta ? poolOfMeta(meta) : poolOfObject(obj);
      if (!pool) {
        logger.error("NAD block {name} has a range that does not parse ({range}); left alone", {
          name,
          range: spec.range,
        });
        continue;
      }
      const held = await this.#b.open(spec.network, spec.range, parseCidr(spec.cidr), pool, obj);
      for (const a of spec.allocations ?? []) {
        const owner = { containerId: a.containerID, ifname: a.ifname };
        this.#b.meta.set(ownerKey(owner), { uid: a.podUID, namespace: a.namespace, name: a.name });
        // State lost here: what the object records stays taken until a DEL releases it, or the
        // sweep finds its pod gone (releaseAdoptedOfGonePods). An address set aside for another
        // IPAM's pod is released the same way, whatever the state.
        if (!meta && await held.local.hold(a.ip, owner)) this.#b.adopted.add(ownerKey(owner));
        if (a.containerID.startsWith(SET_ASIDE)) this.#b.adopted.add(ownerKey(owner));
      }
      await this.#lostIfOverlapped(held, spaces);
      this.#b.kick(held);
    }
    for (const [name, meta] of local) {
      const pool = poolOfMeta(meta);
      const held = await this.#b.open(
        meta.network,
        meta.range,
        parseCidr(meta.cidr),
        pool,
        undefined,
      );
      if (held.local.held === 0) {
        await this.#forget(held, "no object, no addresses");
        continue;
      }
      logger.warn("NAD block {name} holds {n} addresses here but has no object; writing it again", {
        name,
        n: held.local.held,
      });
      // Before any ADD is served: a block claimed meanwhile may overlap it.
      await this.#recreate(held);
    }
    for (const held of this.#b.blocks.values()) this.checkEmpty(held);
  }

  #allocationsOf(held: NadBlock): BlockAllocation[] {
    return blockAllocations(held.local.allocations(), (owner) => this.#b.meta.get(ownerKey(owner)));
  }

  /** One pass of a block's writer: waits out the write delay, writes; a failure backs off. */
  async writePass(held: NadBlock): Promise<void> {
    try {
      const delay = this.#b.d.writeDelayMs ?? WRITE_DELAY_MS;
      if (delay > 0) await new Promise((r) => setTimeout(r, delay));
      // Closed meanwhile: what was pending is the flush's (it waits for this pass) or lost.
      if (this.#b.closed) return;
      await this.#write(held);
      held.failures = 0;
    } catch (e) {
      held.failures++;
      const wait = writeBackoffMs(held.failures);
      this.#b.d.logger.warn("writing NAD block {name} failed ({error}); again in {ms} ms", {
        name: held.name,
        error: errorText(e),
        ms: wait,
      });
      this.#b.after(wait, () => this.#b.kick(held));
    }
  }

  async #write(held: NadBlock): Promise<void> {
    const { api, nodeName } = this.#b.d;
    for (let attempt = 0; attempt < 16; attempt++) {
      if (this.#b.closed || held.lost) return;
      const desired = this.#allocationsOf(held);
      const base = held.obj ?? await api.get(held.name);
      if (this.#b.closed) return;
      if (!base?.spec || base.spec.node !== nodeName) {
        held.obj = undefined;
        if (held.local.held === 0) return await this.#forget(held, "its object is gone");
        return await this.#recreate(held);
      }
      const written = await updateAllocations(api, held, base, desired);
      if (written === "same") return;
      if (written === "written") {
        this.#b.stats.writes++;
        return;
      }
    }
    // Thrown, as the pool's writer does: the pass backs off and the block is written again.
    throw new Error(`NAD block ${held.name}: still conflicting after 16 attempts`);
  }

  /**
   * Writes again the object of a block that holds addresses here but whose object is gone or
   * names another node (`recreateObject`); the block is lost when another node has it or another
   * block of its space overlaps it.
   */
  async #recreate(held: NadBlock): Promise<void> {
    const { api, nodeName } = this.#b.d;
    if (this.#b.closed) return;
    const r = await recreateObject(
      api,
      {
        metadata: {
          name: held.name,
          labels: { "ferry.dev/node": nodeName, "ferry.dev/network": networkHash(held.network) },
        },
        spec: {
          network: held.network,
          range: held.range,
          cidr: formatCidr(held.cidr),
          node: nodeName,
          allocations: this.#allocationsOf(held),
        },
      },
      () => overlappingInSpace(this.#b, held.network, held.name, held.cidr),
      () => this.#b.stats.writes++,
    );
    if ("mine" in r) {
      held.obj = r.mine;
      this.#b.kick(held);
      return;
    }
    this.#lose(held, r.lost, r.obj?.spec?.node === nodeName ? r.obj : undefined);
  }

  /**
   * At start: a block of this node that another block of its space overlaps (its object kept
   * after it was lost, `recreateObject`) is lost again. `spaces` holds each space's blocks as
   * listed from storage once.
   */
  async #lostIfOverlapped(
    held: NadBlock,
    spaces: Map<string, NetworkBlockObject[]>,
  ): Promise<void> {
    let listed = spaces.get(held.network);
    if (!listed) {
      listed = await this.#b.d.api.list({ network: held.network });
      spaces.set(held.network, listed);
    }
    const other = firstOverlapping(listed, held.name, held.cidr)?.spec;
    if (other) {
      this.#lose(
        held,
        `NAD block ${formatCidr(held.cidr)} overlaps block ${other.cidr} of node ${other.node}`,
        held.obj,
      );
    }
  }

  /** Marks `held` lost (`obj` its object when it names this node, deleted once it is empty). */
  #lose(held: NadBlock, why: string, obj: NetworkBlockObject | undefined): void {
    held.obj = obj;
    held.lost = why;
    this.#b.d.logger.error(
      "{why} (space {space}): {n} pods here keep their addresses ({ips}) until deleted, and " +
        "nothing new is allocated in it; `ipam check` shows whether any address is held twice",
      {
        why,
        space: held.network,
        n: held.local.held,
        ips: held.local.allocations().map((a) => a.ip),
      },
    );
  }

  /** A block that holds no address any more: given back after {@link keepEmptyMs}. */
  checkEmpty(held: NadBlock): void {
    if (held.local.held > 0) return;
    if (held.lost) {
      void this.#dropLost(held);
      return;
    }
    held.emptySince ??= Date.now();
    this.#b.after(
      this.#keepEmptyMs(held) + 10,
      () =>
        this.#retire(held).catch((e) =>
          this.#b.d.logger.warn("giving back NAD block {name} failed: {error}", {
            name: held.name,
            error: errorText(e),
          })
        ),
    );
  }

  /**
   * How long an empty block is kept: a single address (a static one, or a block of a small range)
   * only as long as its quarantine, so that another node may hand it out next; a larger block
   * `releaseAfterMs`.
   */
  #keepEmptyMs(held: NadBlock): number {
    return isSingle(held.cidr) ? this.#b.d.reuseDelayMs ?? 0 : this.#b.d.releaseAfterMs;
  }

  async #retire(held: NadBlock): Promise<void> {
    const blocks = this.#b.blocks;
    if (this.#b.closed || blocks.get(held.name) !== held || held.local.held > 0) return;
    if (held.emptySince === undefined) return;
    if (Date.now() - held.emptySince < this.#keepEmptyMs(held)) return;
    await held.writer.idle();
    if (this.#b.closed || held.local.held > 0) return;
    // Out of the map first: nothing is allocated in it while its object is deleted.
    blocks.delete(held.name);
    try {
      await deleteOwnObject(this.#b.d.api, held, this.#b.d.nodeName);
    } catch (e) {
      blocks.set(held.name, held);
      throw e;
    }
    this.#b.stats.released++;
    await this.#forget(held, "empty");
  }

  /**
   * Drops a lost block once empty: its object, when it still names this node (kept after an
   * overlap), is deleted, and its files here.
   */
  async #dropLost(held: NadBlock): Promise<void> {
    if (this.#b.blocks.get(held.name) !== held) return;
    this.#b.blocks.delete(held.name);
    if (!this.#b.closed) {
      await deleteOwnObject(this.#b.d.api, held, this.#b.d.nodeName).catch((e) =>
        this.#b.d.logger.warn("deleting the object of lost NAD block {name} failed: {error}", {
          name: held.name,
          error: errorText(e),
        })
      );
    }
    await this.#forget(held, `${held.lost}; no pod here holds an address of it any more`);
  }

  async #forget(held: NadBlock, why: string): Promise<void> {
    this.#b.blocks.delete(held.name);
    await Deno.remove(`${this.#b.dir}/${held.name}`, { recursive: true }).catch(() => {});
    this.#b.d.logger.info("gave back NAD block {cidr} of space {space} ({why})", {
      cidr: formatCidr(held.cidr),
      space: held.network,
      why,
    });
  }
}
