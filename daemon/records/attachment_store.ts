/**
 * The node's record of what it plugged: one attachment per (container ID, interface), with the
 * CNI result it returned. Kept in memory and written through to a state directory (one JSON file
 * per attachment, replaced atomically), so a restarted daemon can still answer a repeated ADD,
 * CHECK and DEL for containers plugged before the restart. A record file that cannot be read is
 * not fatal: its key (from the file name) is reported as damaged, so the start-up reconcile keeps
 * what that key holds, and a DEL for it still releases everything.
 *
 * @module
 */
import type { CniResult, NetConf } from "../../lib/cni/schemas.ts";
import type { PodRef } from "../../lib/cni/args.ts";

/** The names of the drivers that plug an interface (`drivers/`), as an attachment records them. */
export type DriverName = "bridge" | "macvlan" | "ipvlan" | "delegate" | "nad-bridge";

/** One plugged interface. */
export interface Attachment {
  /** The CNI container ID of the ADD. */
  containerId: string;
  /** The interface name inside the container. */
  ifname: string;
  /** The network namespace path of the ADD. */
  netns: string;
  /** The network (config `name`) the interface belongs to. */
  network: string;
  /** The driver that plugged it (records from before drivers existed are `bridge`). */
  driver?: DriverName;
  /** The attachment config the driver got (not kept for the default network). */
  conf?: NetConf;
  /** The host end of the veth pair, when the driver made one. */
  hostIfname?: string;
  /** The pod, when the runtime named it in CNI_ARGS. */
  pod?: PodRef;
  /** CNI_PATH of the ADD (a delegated plugin's DEL needs it when the runtime never sends one). */
  path?: string[];
  /**
   * An additional attachment (multi-VIF): the default interface it was plugged with, which takes
   * it along on DEL and CHECK.
   */
  parent?: string;
  /** An additional attachment's plugins, in ADD order (a NAD's single config or its conflist). */
  chain?: NetConf[];
  /** A NAD that replaced the pod's default network (`v1.multus-cni.io/default-network`). */
  defaultNetwork?: boolean;
  /** Extra source prefixes port security lets the interface send from (its pod's annotation). */
  allowedSources?: string[];
  /** The result returned to the runtime, in the current spec version. */
  result: CniResult;
  /** When it was plugged (ISO 8601). */
  createdAt: string;
}

/** A record written to its temporary file and not yet in place ({@link AttachmentStore.stage}). */
export interface StagedRecord {
  /** The record as written (later changes to the object are not in the file). */
  readonly record: Attachment;
  /** Puts it in place (an atomic rename) and in memory. */
  commit(): Promise<void>;
  /** Removes its temporary file: it never was in place. */
  discard(): Promise<void>;
}

/** The key of an attachment. */
export interface AttachmentKey {
  /** The CNI container ID. */
  containerId: string;
  /** The interface name inside the container. */
  ifname: string;
}

const fileName = (k: AttachmentKey) => `${k.containerId}--${k.ifname}.json`;

function keyOfFile(name: string): AttachmentKey | undefined {
  const m = /^(.+)--([^-][^/]*)\.json$/.exec(name);
  return m ? { containerId: m[1], ifname: m[2] } : undefined;
}

function isAttachment(x: unknown, name: string): x is Attachment {
  const a = x as Attachment;
  return typeof a === "object" && a !== null && typeof a.containerId === "string" &&
    typeof a.ifname === "string" && typeof a.netns === "string" &&
    typeof a.network === "string" && typeof a.result === "object" && a.result !== null &&
    fileName(a) === name;
}

/**
 * The store.
 *
 * @example
 * ```ts
 * const store = await AttachmentStore.open("/var/lib/ferry/attachments");
 * store.get({ containerId: "abc", ifname: "eth0" });
 * ```
 */
export class AttachmentStore {
  readonly #dir: string;
  readonly #items = new Map<string, Attachment>();
  /** The same records by container ID (DEL and the pod's annotations look at one container's). */
  readonly #byContainer = new Map<string, Map<string, Attachment>>();
  readonly #damaged = new Map<string, AttachmentKey>();

  private constructor(dir: string) {
    this.#dir = dir;
  }

  /**
   * Opens (creating if needed) the store in `dir` and loads its records. Temporary files of a
   * write that was killed halfway are removed; unreadable records are kept as
   * {@link AttachmentStore.damaged} keys.
   */
  static async open(dir: string): Promise<AttachmentStore> {
    const store = new AttachmentStore(dir);
    await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
    for await (const entry of Deno.readDir(dir)) {
      if (!entry.isFile) continue;
      if (entry.name.startsWith(".") && entry.name.endsWith(".tmp")) {
        await Deno.remove(`${dir}/${entry.name}`);
        continue;
      }
      const key = keyOfFile(entry.name);
      if (!key) continue;
      let record: unknown;
      try {
        record = JSON.parse(await Deno.readTextFile(`${dir}/${entry.name}`));
      } catch {
        record = undefined;
      }
      if (isAttachment(record, entry.name)) store.#remember(entry.name, record);
      else store.#damaged.set(entry.name, key);
    }
    return store;
  }

  /**
   * Keys whose record file exists but cannot be read: what they hold is not known, so nothing of
   * theirs is swept; a DEL for one releases it like any unrecorded attachment.
   */
  damaged(): AttachmentKey[] {
    return [...this.#damaged.values()];
  }

  /** The attachment for `key`, if any. */
  get(key: AttachmentKey): Attachment | undefined {
    return this.#items.get(fileName(key));
  }

  /** Every attachment. */
  list(): Attachment[] {
    return [...this.#items.values()];
  }

  /** The attachments of one container, in the order they were first recorded. */
  ofContainer(containerId: string): Attachment[] {
    const mine = this.#byContainer.get(containerId);
    return mine ? [...mine.values()] : [];
  }

  #remember(name: string, record: Attachment): void {
    this.#items.set(name, record);
    let mine = this.#byContainer.get(record.containerId);
    if (!mine) this.#byContainer.set(record.containerId, mine = new Map());
    mine.set(name, record);
  }

  /** Records an attachment (replacing the file atomically). */
  async put(record: Attachment): Promise<void> {
    await (await this.stage(record)).commit();
  }

  /**
   * Writes `record` to its temporary file without putting it in place: until
   * {@link StagedRecord.commit}, {@link AttachmentStore.get} does not see it, and a daemon
   * restarted meanwhile removes the file when it opens the store. ADD writes its record this way
   * while the pod's interface is still being plugged, and commits it once the plug succeeded.
   * One key is staged at a time (the service holds the container's lock).
   */
  async stage(record: Attachment): Promise<StagedRecord> {
    const name = fileName(record);
    const tmp = `${this.#dir}/.${name}.tmp`;
    await Deno.writeTextFile(tmp, JSON.stringify(record), { mode: 0o600 });
    return {
      record,
      commit: async () => {
        await Deno.rename(tmp, `${this.#dir}/${name}`);
        this.#remember(name, record);
      },
      discard: () => Deno.remove(tmp).catch(() => {}),
    };
  }

  /**
   * Removes an attachment's file while it stays known in memory until {@link delete}: a DEL
   * answered before its work ends (the kernel still removing the link, the addresses not yet
   * released) leaves no record on disk, so a daemon killed meanwhile finds the addresses and the
   * link unrecorded at its next start and releases them, as the runtime was told.
   */
  async retire(key: AttachmentKey): Promise<void> {
    await Deno.remove(`${this.#dir}/${fileName(key)}`).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    });
  }

  /** Forgets an attachment; forgetting an unknown one is not an error. */
  async delete(key: AttachmentKey): Promise<void> {
    const name = fileName(key);
    await Deno.remove(`${this.#dir}/${name}`).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    });
    this.#items.delete(name);
    const mine = this.#byContainer.get(key.containerId);
    if (mine?.delete(name) && mine.size === 0) this.#byContainer.delete(key.containerId);
    this.#damaged.delete(name);
  }
}
