/**
 * Port security on this node: keeps the guard table ({@link guardTableScript}) in line with the
 * pod interfaces Ferry plugged on its bridges. Rebuilt whole from the attachment records at start
 * (one `nft -f` transaction that replaces the previous daemon's table: no moment without guard),
 * then an ADD adds its pod's elements in-process before it answers ({@link PortGuard.admit}, one
 * nf_tables netlink batch, its only write: the port, made in the guard's interface group
 * ({@link PortGuard.group}), sends nothing until then) and a DEL destroys them. The drops are
 * counted per port and kind in the table itself ({@link PortGuard.drops}).
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import { NFPROTO_BRIDGE, type SetElementOp } from "../net/netlink/nft_sets.ts";
import {
  GUARD_KINDS,
  type GuardElement,
  guardElements,
  type GuardKind,
  guardRemovalScript,
  guardTableScript,
  type PortEntry,
  portGroup,
  portKey,
} from "./guard_table.ts";

/** Writes set elements in-process (`NftNetlink`). */
export interface ElementWriter {
  /** Adds (or, with `remove`, destroys) elements of a table of `family` in one transaction. */
  writeElements(
    family: number,
    table: string,
    ops: SetElementOp[],
    remove?: boolean,
  ): Promise<void>;
}

/** What the guard needs. */
export interface PortGuardDeps {
  /** The bridge-family table it owns. */
  table: string;
  /** Runs an `nft -f` script as one transaction. */
  apply(script: string): Promise<void>;
  /**
   * `nft -j list table bridge <table>`, undefined when there is none (for counting drops, and
   * seeing the table deleted); rejects when it cannot be listed.
   */
  listJson?(table: string): Promise<string | undefined>;
  /** The node's VXLAN port, with `routing.mode` vxlan: pods may not send to it. */
  tunnelPort?: number;
  /** The in-process writer; without it elements go through `apply`. */
  writer?: ElementWriter;
  /**
   * The interface index of a port in the node's namespace, undefined when it has none (no such
   * link). Without it no port takes the guard's fast paths (`fast4`, `fast6`): the same checks,
   * the long way.
   */
  indexOf?(port: string): number | undefined;
  /** Where it says what it did. */
  logger: Logger;
}

/** Dropped frames of one port and kind. */
export interface PortDrops {
  /** The host-side port. */
  port: string;
  /** What was forged. */
  kind: GuardKind;
  /** Frames dropped. */
  packets: number;
}

/** Port security's counters, for `/v1/stats`. */
export interface PortSecurityStats {
  /** Bridge ports under guard (pods' interfaces admitted, not yet released). */
  guardedPorts: number;
  /** Frames dropped by kind, summed over the guarded ports, as last read (every 10 s). */
  dropped: Record<string, number>;
}

/**
 * The node's port guard.
 *
 * @example
 * ```ts
 * const guard = new PortGuard({ table: "ferry-portsec", apply, writer, logger });
 * await guard.rebuild(entries);
 * // The port made with `hostGroup: guard.group`, then:
 * await guard.admit({ port: "fy0123456789ab", mac: "02:00:00:00:00:01", ips: ["10.244.0.5"] });
 * ```
 */
export class PortGuard {
  readonly #d: PortGuardDeps;
  readonly #group: number;
  #counts: PortDrops[] = [];
  /** The ports admitted and not released, with what they may send as. */
  readonly #guarded = new Map<string, PortEntry>();
  /** Ports the last rebuild closed (their record unreadable). */
  #closed: string[] = [];
  /** Whether the table has been written (by a rebuild): from then on it must be there. */
  #built = false;
  #countTimer?: ReturnType<typeof setInterval>;

  /** Creates the guard; nothing is written before {@link PortGuard.rebuild}. */
  constructor(deps: PortGuardDeps) {
    this.#d = deps;
    this.#group = portGroup(deps.table);
  }

  /** The table's name. */
  get table(): string {
    return this.#d.table;
  }

  /**
   * The interface group of the pod ports this guard closes ({@link portGroup}): a port created in
   * it sends nothing until {@link PortGuard.admit} lists it.
   */
  get group(): number {
    return this.#group;
  }

  /**
   * Replaces the table whole with the guard of `entries`, in one transaction; the `closed` ports
   * (pod interfaces whose record cannot be read) send nothing.
   */
  async rebuild(entries: PortEntry[], closed: string[] = []): Promise<void> {
    entries = entries.map((e) => this.#indexed(e));
    await this.#d.apply(
      guardTableScript(this.#d.table, entries, { tunnelPort: this.#d.tunnelPort, closed }),
    );
    this.#guarded.clear();
    for (const e of entries) this.#guarded.set(e.port, e);
    this.#closed = [...closed];
    this.#built = true;
    this.#d.logger.info("port security on {ports} pod interfaces (table bridge {table})", {
      ports: entries.length,
      table: this.#d.table,
    });
  }

  /**
   * Lets `entry`'s pod send as itself (and as nothing else) from its port: its elements in one
   * transaction. Until then the port, made in the guard's {@link PortGuard.group}, sends nothing.
   *
   * @throws {CniError} code 5 when the kernel refuses.
   */
  async admit(entry: PortEntry): Promise<void> {
    try {
      entry = this.#indexed(entry);
      const now = guardElements(entry);
      // Admitted before (an ADD again): what it may no longer send as goes first (its earlier
      // link's index, or addresses it no longer has).
      const before = this.#guarded.get(entry.port);
      const gone = before ? stale(guardElements(before), now) : [];
      if (gone.length) await this.#destroy(entry.port, gone, false);
      await this.#write(now);
      this.#guarded.set(entry.port, entry);
    } catch (e) {
      throw new CniError(
        CNI_ERROR.IO_FAILURE,
        `port security for ${entry.port} could not be put in place`,
        e instanceof Error ? e.message : String(e),
      );
    }
  }

  /**
   * Removes `entry`'s elements, its drop counters and its closing (a port no longer under
   * guard: run once its link is gone, or after a failed ADD). Absent elements are fine; a failure is logged.
   */
  async release(entry: PortEntry): Promise<void> {
    // The index it was admitted with (its link may be gone by now), or its link's.
    const known = this.#guarded.get(entry.port);
    this.#guarded.delete(entry.port);
    const own = guardElements(
      known?.index === undefined ? this.#indexed(entry) : { ...entry, index: known.index },
    );
    try {
      await this.#destroy(entry.port, own, true);
    } catch (e) {
      // Still in the table: a DEL again removes them with the index they were written with.
      if (known && !this.#guarded.has(entry.port)) this.#guarded.set(entry.port, known);
      this.#d.logger.warn("port security elements of {port} not removed: {error}", {
        port: entry.port,
        error: e instanceof Error ? e.message : String(e),
      });
    }
  }

  /**
   * Destroys `own` (elements of `port`), absent or not, and with `whole` the port's closing and
   * drop counters: in one transaction with the writer; without it, one per element (a missing one
   * fails only itself, and no failure is said).
   */
  async #destroy(port: string, own: GuardElement[], whole: boolean): Promise<void> {
    const kinds = whole ? ["closed", ...GUARD_KINDS.map((kind) => `drop_${kind}`)] : [];
    if (this.#d.writer) {
      const name = portKey(port);
      const ops: SetElementOp[] = [...own, ...kinds.map((set) => ({ set, key: name }))];
      await this.#d.writer.writeElements(NFPROTO_BRIDGE, this.#d.table, ops, true);
      return;
    }
    const texts = [
      ...own.map((e) => `${e.set} { ${e.text} }`),
      ...kinds.map((set) => `${set} { ${JSON.stringify(port)} }`),
    ];
    for (const t of texts) {
      await this.#d.apply(`delete element bridge ${this.#d.table} ${t}\n`).catch(() => {});
    }
  }

  /**
   * `entry` with its port's index now, when the port has one (see {@link PortGuardDeps.indexOf});
   * without one when it has none (its link gone).
   */
  #indexed(entry: PortEntry): PortEntry {
    const { index: _, ...rest } = entry;
    const index = this.#d.indexOf?.(entry.port);
    return index === undefined ? rest : { ...rest, index };
  }

  /** Adds `elements` in one transaction. */
  async #write(elements: GuardElement[]): Promise<void> {
    if (this.#d.writer) {
      await this.#d.writer.writeElements(NFPROTO_BRIDGE, this.#d.table, elements);
    } else {
      await this.#d.apply(
        elements.map((e) => `add element bridge ${this.#d.table} ${e.set} { ${e.text} }`)
          .join("\n") + "\n",
      );
    }
  }

  /** Removes the table (port security turned off, or the uninstall). */
  async remove(): Promise<void> {
    await this.#d.apply(guardRemovalScript(this.#d.table));
  }

  /** The frames dropped so far, per port and kind (none when the table cannot be listed). */
  async drops(): Promise<PortDrops[]> {
    const json = await this.#d.listJson?.(this.#d.table).catch(() => undefined);
    return json ? dropsOf(json) : [];
  }

  /**
   * The table was found gone at a read of the counters (deleted behind the daemon's back): it is
   * written again whole from what the guard holds (the ports under ADD closed again by its rules).
   */
  async #writeAgain(): Promise<void> {
    this.#d.logger.warn(
      "port security: table bridge {table} is gone (deleted by hand?): written again",
      {
        table: this.#d.table,
      },
    );
    try {
      // Each index looked up again: a link gone meanwhile has no fast path to write.
      const entries = [...this.#guarded.values()].map((e) => this.#indexed(e));
      for (const e of entries) this.#guarded.set(e.port, e);
      await this.#d.apply(
        guardTableScript(this.#d.table, entries, {
          tunnelPort: this.#d.tunnelPort,
          closed: this.#closed,
        }),
      );
      // What changed while the table was written (an ADD admitted) too.
      const since = [...this.#guarded.values()].filter((e) => !entries.includes(e));
      const elements = since.flatMap(guardElements);
      if (elements.length) await this.#write(elements);
    } catch (e) {
      this.#d.logger.error(
        "port security: table bridge {table} could not be written again: {error}",
        {
          table: this.#d.table,
          error: e instanceof Error ? e.message : String(e),
        },
      );
    }
  }

  /**
   * Reads the drop counters every `everyMs` for {@link PortGuard.counts} (the metrics read them
   * at each scrape; listing the table is a process, so not then), telling `increased` what was
   * dropped since the last read.
   */
  startCounting(everyMs = 10_000, increased?: (drops: PortDrops[]) => void): void {
    this.stopCounting();
    const read = () =>
      void this.#d.listJson?.(this.#d.table).then((json) => {
        // Listed as absent: the table was deleted (a failed listing is not read as absent).
        if (json === undefined && this.#built) return this.#writeAgain();
        const d = json ? dropsOf(json) : [];
        const more = dropIncreases(this.#counts, d);
        this.#counts = d;
        if (more.length) increased?.(more);
      }, () => {/* not listed this time: the counts stay as last read */});
    const timer = this.#countTimer = setInterval(read, everyMs);
    Deno.unrefTimer(timer);
    read();
  }

  /** Stops reading the counters. */
  stopCounting(): void {
    if (this.#countTimer !== undefined) clearInterval(this.#countTimer);
    this.#countTimer = undefined;
  }

  /** The drop counters as last read (see {@link PortGuard.startCounting}). */
  counts(): PortDrops[] {
    return this.#counts;
  }

  /**
   * Ports under guard and the frames dropped by kind (the counters as last read).
   *
   * @example
   * ```ts
   * guard.stats(); // { guardedPorts: 12, dropped: { arp: 2, ipv4: 3 } }
   * ```
   */
  stats(): PortSecurityStats {
    const dropped: Record<string, number> = {};
    for (const d of this.#counts) dropped[d.kind] = (dropped[d.kind] ?? 0) + d.packets;
    return { guardedPorts: this.#guarded.size, dropped };
  }
}

/**
 * The elements of `before` that `now` does not hold (by set and key): what a port admitted again
 * may no longer send as.
 */
function stale(before: GuardElement[], now: GuardElement[]): GuardElement[] {
  const key = (e: GuardElement) => `${e.set} ${e.key.join(",")} ${e.keyEnd?.join(",") ?? ""}`;
  const kept = new Set(now.map(key));
  return before.filter((e) => !kept.has(key(e)));
}

/**
 * The drop counters of `nft -j list table bridge …` output: the elements of the `drop_<kind>`
 * sets with their counters (pure).
 *
 * @example
 * ```ts
 * dropsOf(json); // [{ port: "fy0123456789ab", kind: "ipv4", packets: 3 }]
 * ```
 */
export function dropsOf(json: string): PortDrops[] {
  const out: PortDrops[] = [];
  const items = (JSON.parse(json) as { nftables?: Record<string, unknown>[] }).nftables ?? [];
  for (const item of items) {
    const set = item.set as { name?: string; elem?: unknown[] } | undefined;
    const kind = set?.name?.startsWith("drop_") ? set.name.slice(5) as GuardKind : undefined;
    if (!kind || !GUARD_KINDS.includes(kind)) continue;
    for (const e of set!.elem ?? []) {
      const elem = (e as { elem?: { val?: unknown; counter?: { packets?: number } } }).elem;
      if (typeof elem?.val !== "string") continue;
      out.push({ port: elem.val, kind, packets: elem.counter?.packets ?? 0 });
    }
  }
  return out;
}

/**
 * What was dropped between two reads of the counters, per port and kind (a counter lower than
 * before was reset with its table: all of it is new).
 *
 * @example
 * ```ts
 * dropIncreases([{ port: "fy1", kind: "arp", packets: 2 }], [{ port: "fy1", kind: "arp", packets: 5 }]);
 * // [{ port: "fy1", kind: "arp", packets: 3 }]
 * ```
 */
export function dropIncreases(before: PortDrops[], after: PortDrops[]): PortDrops[] {
  const was = new Map(before.map((d) => [`${d.port}/${d.kind}`, d.packets]));
  return after.flatMap((d) => {
    const old = was.get(`${d.port}/${d.kind}`) ?? 0;
    const packets = d.packets >= old ? d.packets - old : d.packets;
    return packets > 0 ? [{ ...d, packets }] : [];
  });
}
