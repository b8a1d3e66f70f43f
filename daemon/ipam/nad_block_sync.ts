/**
 * This node's NAD blocks kept in line with the API: at start the node's `NetworkBlock`s and its
 * block directories are reconciled (a directory is the newer truth; an object without one, state
 * lost, has its allocations adopted; a directory without an object that still holds addresses
 * has its object written again); afterwards each block's object follows its allocations (one
 * writer per block, {@link WRITE_DELAY_MS} after a change, the object's resourceVersion as
 * precondition: `claim_protocol.ts`), and an empty block is given back, a single address once its
 * quarantine is over, a larger block after `releaseAfterMs`.
 *
 * @module
 */
import { parseCidr } from "./cidr.ts";
import {
  blockAllocations,
  deleteOwnObject,
  errorText,
  ownerKey,
  readBlockDirectories,
  updateAllocations,
  writeBackoffMs,
} from "./claim_protocol.ts";
import type { BlockAllocation } from "./ip_pools.ts";
import { networkBlockName } from "./nad_blocks.ts";
import { createNadBlock, settleNadClaim } from "./nad_block_claims.ts";
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
    for (const obj of await api.list({ node: nodeName })) {
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
      this.#b.kick(held);
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
    for (let attempt = 0; attempt < 16 && !this.#b.closed; attempt++) {
      const desired = this.#allocationsOf(held);
      const base = held.obj ?? await api.get(held.name);
      if (!base?.spec || base.spec.node !== nodeName) {
        held.obj = undefined;
        if (held.local.held === 0) return await this.#forget(held, "its object is gone");
        if (base?.spec) {
          this.#b.d.logger.error(
            "NAD block {name} now names node {other}, but pods here hold {ips} in it",
            { name: held.name, other: base.spec.node, ips: desired.map((a) => a.ip) },
          );
          return;
        }
        const created = await createNadBlock(this.#b, held.network, held.range, held.cidr, desired);
        if (created) {
          held.obj = created.obj;
          this.#b.stats.writes++;
          await settleNadClaim(this.#b, created.obj, held.cidr, created.turn).catch(() => true);
        }
        continue;
      }
      const written = await updateAllocations(api, held, base, desired);
      if (written === "same") return;
      if (written === "written") {
        this.#b.stats.writes++;
        return;
      }
    }
  }

  /** A block that holds no address any more: given back after {@link keepEmptyMs}. */
  checkEmpty(held: NadBlock): void {
    if (held.local.held > 0) return;
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
