/**
 * The attachment driver interface: how one pod interface of one network is plugged, unplugged and
 * checked. Drivers: `bridge` (the node's default network), `macvlan` and `ipvlan` (native, on a
 * master link), `delegate` (any standard CNI plugin from CNI_PATH). The service picks one per
 * request and records which, so DEL and CHECK go back to the same driver.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { CniResult, NetConf } from "../../lib/cni/schemas.ts";
import type { Plumber } from "../net/plumber.ts";
import type { Attachment, AttachmentKey, DriverName } from "../records/attachment_store.ts";
import type { AllocationWait } from "../ipam/quarantine.ts";

/** The names of the drivers, as each attachment records them (`records/attachment_store.ts`). */
export type { DriverName };

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
  /** Extra source prefixes port security lets the interface send from (CIDRs). */
  allowedSources?: string[];
  /** Hears the time (ms) spent allocating addresses, for the `ipam` phase. */
  ipamTime?: (ms: number) => void;
  /**
   * How long allocating an address may wait for one in the reuse quarantine (the request's
   * deadline, less the time to answer); without it, an allocation does not wait.
   */
  addressWait?: AllocationWait;
  /**
   * Hears the result as soon as it is known, while the plug may still be under way (the bridge
   * driver: once the addresses are allocated, as the kernel may still be creating the pair), with
   * the host-side link; `add` then resolves to this same result object. The service writes the
   * attachment's record meanwhile, and puts it in place only once the plug has succeeded.
   */
  resultKnown?: (result: CniResult, hostIfname?: string) => void;
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
  /**
   * DEL only: the driver may call this once the pod is as good as unplugged (the kernel has been
   * told to remove its link) and finish the rest after the runtime has its answer. Its container's
   * lock stays held until `del` returns, so nothing else touches that container meanwhile.
   */
  answerNow?: () => void;
}

/** One way of plugging an interface. */
export interface Driver {
  /**
   * Plugs; on failure leaves nothing behind (links, addresses, allocations) and throws a CniError.
   * What it did not create (an interface that already had the name) it never removes.
   */
  add(ctx: AddContext): Promise<Plugged>;
  /** Unplugs and releases; anything already gone is success. */
  del(ctx: RecordContext): Promise<void>;
  /** Compares the live state with `expected`; throws a CniError describing the first difference. */
  check(ctx: RecordContext & { netns: string }, expected: CniResult): Promise<void>;
}

/**
 * Refuses an ADD whose interface name is already taken in the pod's namespace, before anything is
 * created: a failed ADD's clean-up (the driver's, or a delegated plugin's DEL) removes the
 * interface by name, and must never remove someone else's. A chained ADD (with a `prevResult`)
 * is let through: its interface may be an earlier plugin's to modify.
 *
 * @throws {CniError} code 5 naming the interface and the namespace.
 */
export async function refuseTakenName(
  plumber: Pick<Plumber, "inspect">,
  ctx: AddContext,
): Promise<void> {
  if (ctx.prevResult) return;
  if (await plumber.inspect(ctx.netns, ctx.key.ifname)) {
    throw new CniError(
      CNI_ERROR.IO_FAILURE,
      `interface ${ctx.key.ifname} already exists in ${ctx.netns}`,
      "Ferry leaves an interface it did not create alone; choose another CNI_IFNAME",
    );
  }
}
