/**
 * The node's record of what it plugged: one attachment per (container ID, interface), with the
 * CNI result it returned. Kept in memory and written through to a state directory (one JSON file
 * per attachment, replaced atomically), so a restarted daemon can still answer a repeated ADD,
 * CHECK and DEL for containers plugged before the restart.
 *
 * @module
 */
import type { CniResult, NetConf } from "../lib/cni/schemas.ts";
import type { DriverName } from "./drivers/driver.ts";
import type { PodRef } from "../lib/cni/args.ts";

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
  /** The result returned to the runtime, in the current spec version. */
  result: CniResult;
  /** When it was plugged (ISO 8601). */
  createdAt: string;
}

/** The key of an attachment. */
export interface AttachmentKey {
  /** The CNI container ID. */
  containerId: string;
  /** The interface name inside the container. */
  ifname: string;
}

const fileName = (k: AttachmentKey) => `${k.containerId}--${k.ifname}.json`;

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

  private constructor(dir: string) {
    this.#dir = dir;
  }

  /** Opens (creating if needed) the store in `dir` and loads its records. */
  static async open(dir: string): Promise<AttachmentStore> {
    const store = new AttachmentStore(dir);
    await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
    for await (const entry of Deno.readDir(dir)) {
      if (!entry.isFile || !entry.name.endsWith(".json")) continue;
      const record = JSON.parse(await Deno.readTextFile(`${dir}/${entry.name}`)) as Attachment;
      store.#items.set(fileName(record), record);
    }
    return store;
  }

  /** The attachment for `key`, if any. */
  get(key: AttachmentKey): Attachment | undefined {
    return this.#items.get(fileName(key));
  }

  /** Every attachment. */
  list(): Attachment[] {
    return [...this.#items.values()];
  }

  /** Records an attachment (replacing the file atomically). */
  async put(record: Attachment): Promise<void> {
    const name = fileName(record);
    const tmp = `${this.#dir}/.${name}.tmp`;
    await Deno.writeTextFile(tmp, JSON.stringify(record), { mode: 0o600 });
    await Deno.rename(tmp, `${this.#dir}/${name}`);
    this.#items.set(name, record);
  }

  /** Forgets an attachment; forgetting an unknown one is not an error. */
  async delete(key: AttachmentKey): Promise<void> {
    const name = fileName(key);
    await Deno.remove(`${this.#dir}/${name}`).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    });
    this.#items.delete(name);
  }
}
