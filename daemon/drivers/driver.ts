/**
 * The attachment driver interface: how one pod interface of one network is plugged, unplugged and
 * checked. Drivers: `bridge` (the node's default network), `macvlan` and `ipvlan` (native, on a
 * master link), `delegate` (any standard CNI plugin from CNI_PATH). The service picks one per
 * request and records which, so DEL and CHECK go back to the same driver.
 *
 * @module
 */
import type { CniResult, NetConf } from "../../lib/cni/schemas.ts";
import type { Attachment, AttachmentKey } from "../attachment_store.ts";

/** The names of the drivers. */
export type DriverName = "bridge" | "macvlan" | "ipvlan" | "delegate";

/** What an ADD hands a driver. */
export interface AddContext {
  /** Container ID and interface name. */
  key: AttachmentKey;
  /** The pod's network namespace path. */
  netns: string;
  /** The network config of this attachment (for `bridge`, the runtime's Ferry config). */
  conf: NetConf;
  /** CNI_ARGS. */
  args: Record<string, string>;
  /** CNI_PATH, where delegated plugins are found. */
  path: string[];
  /** The previous result of a chained invocation. */
  prevResult?: CniResult;
}

/** What a driver reports after plugging. */
export interface Plugged {
  /** The result for the runtime, in the current spec version. */
  result: CniResult;
  /** The host-side link, when the driver made one. */
  hostIfname?: string;
}

/** What a DEL or CHECK hands a driver. */
export interface RecordContext {
  /** Container ID and interface name. */
  key: AttachmentKey;
  /** The namespace path; may be absent or gone on DEL. */
  netns?: string;
  /** The attachment config (the recorded one, or the runtime's when nothing was recorded). */
  conf: NetConf;
  /** CNI_ARGS. */
  args: Record<string, string>;
  /** CNI_PATH. */
  path: string[];
  /** What was recorded at ADD, if anything. */
  record?: Attachment;
}

/** One way of plugging an interface. */
export interface Driver {
  /** Plugs; on failure leaves nothing behind (links, addresses, allocations) and throws a CniError. */
  add(ctx: AddContext): Promise<Plugged>;
  /** Unplugs and releases; anything already gone is success. */
  del(ctx: RecordContext): Promise<void>;
  /** Compares the live state with `expected`; throws a CniError describing the first difference. */
  check(ctx: RecordContext & { netns: string }, expected: CniResult): Promise<void>;
}
