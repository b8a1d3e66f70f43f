/**
 * What the CNI commands of one node share (`cni_add.ts`, `cni_del.ts`, `cni_upkeep.ts`, brought
 * together by `cni_service.ts`): the collaborators handed in, one turn per container, the DELs
 * still finishing and the ADDs in flight, which driver serves a request, and releasing an
 * attachment (unplug through its driver, then forget its record).
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { NetConf } from "../../lib/cni/schemas.ts";
import type { CniRequest } from "../../lib/envelope.ts";
import type { Attachment, AttachmentKey, AttachmentStore } from "../records/attachment_store.ts";
import type { DefaultNetwork } from "./default_network.ts";
import type { Driver, DriverName } from "../drivers/driver.ts";
import { Deadline } from "../runtime/deadline.ts";
import { KeyedMutex } from "../runtime/keyed_mutex.ts";
import type { NetnsGuard } from "../net/netns_guard.ts";
import type { PhaseStats } from "../telemetry/phase_stats.ts";
import type { PodRegistry, RegisteredPod } from "../records/registry.ts";
import type { MultiVifDriver } from "../multivif/drivers.ts";
import { unplugChain } from "../multivif/chain.ts";

/** The Kubernetes side of the service: where pods are found and attachments recorded. */
export interface PodSource {
  /** The pods of this node, fed by the watch. */
  registry: PodRegistry;
  /** How long ADD waits for its pod to appear (ms). */
  waitMs: number;
  /**
   * Records an attachment on its pod: the one API write an ADD causes, sent after the answer
   * (scheduled here, written by a coalescing writer; the node-local record is the truth).
   */
  annotate(pod: RegisteredPod, attachment: Attachment): void;
  /** Records a Kubernetes Event on the pod (best effort, after the answer). */
  event?(pod: RegisteredPod, type: "Normal" | "Warning", reason: string, message: string): void;
}

/** What the service needs. */
export interface CniServiceDeps {
  /** The default network (the node bridge and its pools), once its ranges are known. */
  network: DefaultNetwork;
  /** How long a request waits for the default network to open (ms); then code 11. */
  networkWaitMs: number;
  /** The drivers of `attachment` configs; a type without a native driver goes to `delegate`. */
  drivers: { macvlan: Driver; ipvlan: Driver; delegate: Driver; "nad-bridge": Driver };
  /** The record of plugged interfaces. */
  store: AttachmentStore;
  /** Tells a pod's namespace from the node's, a gone one, or a file that is no namespace. */
  netns: NetnsGuard;
  /** Whether the daemon can serve ADD (STATUS reports it). */
  isReady: () => boolean;
  /** Where to log. */
  logger: Logger;
  /** Pods from Kubernetes; absent in standalone mode (no pod lookup, no annotation). */
  pods?: PodSource;
  /**
   * NetworkPolicy: told of each default-network ADD's addresses before it answers (the pod's
   * rules are then in place, or it rejects within its budget or when `signal`, the request's,
   * aborts) and of each DEL.
   */
  policy?: {
    plugged(
      pod: { namespace: string; name: string; labels: Record<string, string> },
      ips: string[],
      signal?: AbortSignal,
    ): Promise<void>;
    unplugged(pod: { namespace: string; name: string }): void;
  };
  /**
   * MultiNetworkPolicy: told of each ADD whose additional interfaces are recorded, before it
   * answers (their rules are then in place), and of each DEL.
   */
  multiPolicy?: {
    plugged(pod: { namespace: string; name: string }): Promise<void>;
    changed(): void;
  };
  /** Where ADD's phases are timed (`/v1/stats`); none when absent. */
  phases?: PhaseStats;
  /**
   * Port security: whether a pod's allowed-source-prefixes annotation is honoured (otherwise it
   * is refused with an Event on the pod); absent when port security is off.
   */
  portSecurity?: {
    allowSourcePrefixesAnnotation: boolean;
    /** Ferry's pod ranges, which no annotation may name (throws a CniError until known). */
    podRanges?(): string[];
  };
  /**
   * Additional interfaces (multi-VIF): the enabled drivers, in order, how long ADD waits for a
   * selected NetworkAttachmentDefinition to reach the watch (ms), and how the pod's default route
   * is moved to an additional interface (`default-route`). Off when absent or empty.
   */
  multiVif?: {
    drivers: MultiVifDriver[];
    waitMs: number;
    setDefaultRoute?: (netns: string, ifname: string, gateway: string) => Promise<void>;
  };
}

/** Registers work to undo when the answer to the request cannot be delivered. */
export type Undelivered = (undo: () => Promise<void>) => void;

/** The driver and config a request's network config selects. */
export interface Selection {
  /** Which driver. */
  driver: DriverName;
  /** The config that driver gets. */
  conf: NetConf;
}

/**
 * Selects the driver: without `attachment`, the default network (`bridge`); with one, its `type`
 * picks macvlan or ipvlan natively, anything else is delegated to that plugin. The attachment
 * inherits `cniVersion` and `name` from the Ferry config unless it sets its own.
 *
 * @throws {CniError} code 7 when `attachment` is not a config with a type, or names Ferry itself.
 */
export function selectDriver(config: NetConf): Selection {
  const attachment = (config as Record<string, unknown>).attachment;
  if (attachment === undefined) return { driver: "bridge", conf: config };
  if (
    attachment === null || typeof attachment !== "object" || Array.isArray(attachment) ||
    typeof (attachment as { type?: unknown }).type !== "string"
  ) {
    throw new CniError(
      CNI_ERROR.INVALID_CONFIG,
      `network ${config.name}: attachment must be a network config with a type`,
    );
  }
  const conf = {
    cniVersion: config.cniVersion,
    name: config.name,
    ...attachment,
  } as NetConf;
  if (conf.type === config.type) {
    throw new CniError(
      CNI_ERROR.INVALID_CONFIG,
      `network ${config.name}: an attachment cannot be of type ${conf.type} itself`,
    );
  }
  if (conf.type === "macvlan" || conf.type === "ipvlan") return { driver: conf.type, conf };
  return { driver: "delegate", conf };
}

/** The field of a request that its command needs.
 *
 * @throws {CniError} code 4 when it is missing.
 */
export function need(req: CniRequest, field: "containerId" | "ifname" | "netns"): string {
  const value = req[field];
  if (!value) throw new CniError(CNI_ERROR.INVALID_ENV, `${field} is required for ${req.command}`);
  return value;
}

/** The state and steps the CNI commands of one node share. */
export class ServiceState {
  /** The collaborators. */
  readonly d: CniServiceDeps;
  /** One turn per container: no two commands of a container at once. */
  readonly locks = new KeyedMutex();
  /** DELs in progress, some answered before their work ended (see `cni_del.ts`). */
  readonly finishing = new Set<Promise<void>>();
  /**
   * The same, by namespace path and interface name: an ADD of another container into that
   * namespace and name waits for the old link to go.
   */
  readonly finishingAt = new Map<string, Promise<void>>();
  /**
   * Attachments whose ADD holds its container's turn: what they have plugged is not recorded
   * yet, and the orphan sweep must not take it for an orphan however long the ADD waits (for an
   * address block while the API is away, for a slow kernel).
   */
  readonly adding = new Map<string, AttachmentKey>();

  /** The state of a service with `deps`. */
  constructor(deps: CniServiceDeps) {
    this.d = deps;
  }

  /** The container and interface a request names (both required). */
  key(req: CniRequest): AttachmentKey {
    return { containerId: need(req, "containerId"), ifname: need(req, "ifname") };
  }

  /**
   * The driver called `name`; the default network's once it is open (bounded wait). For an ADD
   * (`adding`), a network held back (its node's identity or range in question) answers 11 with
   * the reason; DEL and CHECK go on.
   */
  async driver(name: DriverName, signal?: AbortSignal, adding = false): Promise<Driver> {
    if (name !== "bridge") return this.d.drivers[name];
    // Open (the usual case): no wait, so no deadline to start and clear on every request.
    const open = this.d.network.current;
    if (open && !(adding && this.d.network.waitingFor)) return open;
    using wait = new Deadline(this.d.networkWaitMs);
    return await this.d.network.driver(
      signal ? AbortSignal.any([wait.signal, signal]) : wait.signal,
    );
  }

  /** Unplugs through the recorded driver (or the one the request selects) and forgets it. */
  async release(key: AttachmentKey, req: CniRequest, answerNow?: () => void): Promise<void> {
    // An interface plugged with this one (multi-VIF) goes first, the last plugged first.
    const children = this.d.store.ofContainer(key.containerId).filter((r) =>
      r.parent === key.ifname
    ).reverse();
    for (const child of children) await this.release(child, req);
    const record = this.d.store.get(key);
    await this.unplug(key, record, req, answerNow);
    await this.d.store.delete(key);
    this.d.logger.info("released {containerId}/{ifname} ({ips})", {
      ...key,
      ips: record?.result.ips?.map((ip) => ip.address).join(", ") || "none",
    });
  }

  /**
   * Unplugs through the driver that plugged it; without a record, through the driver the
   * request's config selects (the spec gives DEL the same config as ADD).
   */
  async unplug(
    key: AttachmentKey,
    record: Attachment | undefined,
    req: CniRequest,
    answerNow?: () => void,
  ) {
    if (record?.chain) {
      return await unplugChain(
        this.d.drivers,
        record,
        await this.d.netns.forDel(record.netns),
        req,
      );
    }
    const { driver, conf } = record
      ? { driver: record.driver ?? "bridge", conf: record.conf ?? req.config }
      : selectDriver(req.config);
    // Only the namespace this daemon plugged (the record's) is entered, and only while it is
    // still a pod's: without a record, whatever has that name in the request's namespace is
    // not known to be ours, and it goes with its namespace anyway.
    await (await this.driver(driver)).del({
      key: { containerId: key.containerId, ifname: key.ifname },
      netns: await this.d.netns.forDel(record?.netns),
      conf,
      args: req.args,
      path: req.path,
      record,
      answerNow,
    });
  }
}
