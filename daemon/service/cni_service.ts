/**
 * What each CNI command does on this node: ADD plugs the interface through its driver (the node
 * bridge for the default network; macvlan, ipvlan or a delegated plugin when the config names an
 * `attachment`), DEL unplugs and releases (forgivingly), CHECK compares the live state with the
 * recorded result, STATUS tells whether ADD can be served, GC removes what the runtime no longer
 * lists. Collaborators (drivers, store, pods) are handed in.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { type PodRef, podRefFromArgs } from "../../lib/cni/args.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { CniResult, NetConf } from "../../lib/cni/schemas.ts";
import { upgradeResult } from "../../lib/cni/versions.ts";
import type { CniRequest } from "../../lib/envelope.ts";
import type {
  Attachment,
  AttachmentKey,
  AttachmentStore,
  StagedRecord,
} from "../records/attachment_store.ts";
import type { DefaultNetwork } from "./default_network.ts";
import type { Driver, DriverName, Plugged } from "../drivers/driver.ts";
import { Deadline } from "../runtime/deadline.ts";
import { KeyedMutex } from "../runtime/keyed_mutex.ts";
import type { NetnsGuard } from "../net/netns_guard.ts";
import type { PhaseStats } from "../telemetry/phase_stats.ts";
import type { PodRegistry, RegisteredPod } from "../records/registry.ts";
import type { MultiVifDriver, RequestedAttachment } from "../multivif/drivers.ts";
import { checkChain, plugChain, unplugChain } from "../multivif/chain.ts";
import { defaultDst } from "../net/link_plan.ts";
import { Abandoned, asAbandoned } from "./abandoned.ts";
import { ALLOWED_SOURCES_ANNOTATION, allowedSources } from "../portsec/allowed_sources.ts";

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

function need(req: CniRequest, field: "containerId" | "ifname" | "netns"): string {
  const value = req[field];
  if (!value) throw new CniError(CNI_ERROR.INVALID_ENV, `${field} is required for ${req.command}`);
  return value;
}

/**
 * The CNI commands of one node.
 *
 * @example
 * ```ts
 * const service = new CniService({ network, networkWaitMs, drivers, store, netns, isReady, logger });
 * const result = await service.handle(request);
 * ```
 */
export class CniService {
  readonly #d: CniServiceDeps;
  readonly #locks = new KeyedMutex();
  /** DELs in progress, some answered before their work ended (see `del`). */
  readonly #finishing = new Set<Promise<void>>();
  /**
   * The same, by namespace path and interface name: an ADD of another container into that
   * namespace and name waits for the old link to go.
   */
  readonly #finishingAt = new Map<string, Promise<void>>();
  /**
   * Attachments whose ADD holds its container's turn: what they have plugged is not recorded
   * yet, and the orphan sweep must not take it for an orphan however long the ADD waits (for an
   * address block while the API is away, for a slow kernel).
   */
  readonly #adding = new Map<string, AttachmentKey>();

  /** Creates the service. */
  constructor(deps: CniServiceDeps) {
    this.#d = deps;
  }

  /**
   * Runs one request; resolves to a result for ADD, undefined otherwise. `signal` aborts when
   * the requester has gone (its connection closed): work not yet started is abandoned, and an
   * ADD that finishes after that is rolled back instead of recorded.
   */
  handle(
    req: CniRequest,
    signal?: AbortSignal,
    undelivered?: Undelivered,
  ): Promise<CniResult | undefined> {
    // A request its requester gave up on ends as Abandoned, whatever the abort interrupted.
    return this.#run(req, signal, undelivered).catch((e) => {
      throw asAbandoned(e, signal, req);
    });
  }

  #run(
    req: CniRequest,
    signal?: AbortSignal,
    undelivered?: Undelivered,
  ): Promise<CniResult | undefined> {
    switch (req.command) {
      case "ADD":
        return this.add(req, signal, undelivered);
      case "DEL":
        return this.del(req, signal).then(() => undefined);
      case "CHECK":
        return this.check(req, signal).then(() => undefined);
      case "STATUS":
        return Promise.resolve(this.status()).then(() => undefined);
      case "GC":
        return this.gc(req).then(() => undefined);
    }
  }

  #key(req: CniRequest): AttachmentKey {
    return { containerId: need(req, "containerId"), ifname: need(req, "ifname") };
  }

  /**
   * The driver called `name`; the default network's once it is open (bounded wait). For an ADD
   * (`adding`), a network held back (its node's identity or range in question) answers 11 with
   * the reason; DEL and CHECK go on.
   */
  async #driver(name: DriverName, signal?: AbortSignal, adding = false): Promise<Driver> {
    if (name !== "bridge") return this.#d.drivers[name];
    // Open (the usual case): no wait, so no deadline to start and clear on every request.
    const open = this.#d.network.current;
    if (open && !(adding && this.#d.network.waitingFor)) return open;
    using wait = new Deadline(this.#d.networkWaitMs);
    return await this.#d.network.driver(
      signal ? AbortSignal.any([wait.signal, signal]) : wait.signal,
    );
  }

  /**
   * Plugs the interface, or returns the recorded result of an earlier identical ADD. The steps:
   * wait for the namespace and for a DEL still removing a link there, take the container's turn,
   * find the pod, plug the default interface, record it, plug the extra networks, put the pod's
   * NetworkPolicy in place, tell the pod; a failure is said on the pod too.
   */
  async add(
    req: CniRequest,
    signal?: AbortSignal,
    undelivered?: Undelivered,
  ): Promise<CniResult> {
    const key = this.#key(req);
    const netns = need(req, "netns");
    const ref = podRefFromArgs(req.args);
    const selection = selectDriver(req.config);
    const started = performance.now();
    await this.#d.netns.require(netns);
    await this.#finishingAt.get(`${netns}\0${key.ifname}`)?.catch(() => {});
    const run: AddRun = { req, key, netns, ref, ...selection, signal, started, reported: false };
    const result = await this.#locks.run(
      key.containerId,
      this.#plugging(key, () => this.#addInTurn(run, undelivered)),
      signal,
    ).catch((e) => {
      this.#reportFailedAdd(run, e);
      throw e;
    });
    this.#d.phases?.record("total", performance.now() - started);
    return result;
  }

  /** The ADD, holding its container's turn. */
  async #addInTurn(run: AddRun, undelivered?: Undelivered): Promise<CniResult> {
    const { key, netns, req } = run;
    this.#d.phases?.record("turn", performance.now() - run.started);
    const pod = run.pod = await this.#findPod(run);
    const existing = this.#d.store.get(key);
    if (existing) {
      if (existing.netns !== netns) {
        throw new CniError(
          CNI_ERROR.INVALID_ENV,
          `container ${key.containerId} already has ${key.ifname} in ${existing.netns}`,
        );
      }
      return existing.result;
    }
    // Multi-VIF: one bounded wait for every NAD this ADD needs, which may replace the default
    // network (v1.multus-cni.io/default-network) and add interfaces; a deadline only when
    // multi-VIF drivers will look for NADs (not on every ADD).
    using nadWait = pod && run.driver === "bridge" && this.#d.multiVif?.drivers.length
      ? new Deadline(this.#d.multiVif.waitMs)
      : undefined;
    const nads = nadWait
      ? AbortSignal.any([nadWait.signal, ...(run.signal ? [run.signal] : [])])
      : undefined;
    if (pod && run.driver === "bridge") run.allowedSources = this.#allowedSources(pod);
    const record = await this.#record(run, await this.#plugDefault(run, nads));
    if (pod && nads) await this.#plugExtrasOrUndo(run, pod, record, nads);
    if (pod && (this.#d.policy || this.#d.multiPolicy)) await this.#enforcePolicy(run, pod, record);
    if (pod && run.ref) {
      this.#d.pods!.registry.setContainerId(run.ref, key.containerId);
      this.#d.pods!.annotate(pod, record);
    }
    if (run.signal?.aborted) await this.#abandon(key, req);
    // A hang-up noticed only when the answer is written undoes this ADD as well.
    undelivered?.(() => this.#undoUndelivered(key, record, req));
    return record.result;
  }

  /**
   * The extra source prefixes the pod's annotation asks for, when port security honours them; a
   * refused annotation is said on the pod and logged, and the pod sends from its own addresses.
   *
   * @throws {CniError} code 7 (with a Warning Event on the pod) when an honoured annotation
   * names something that is no prefix, or a prefix a pod may not send from.
   */
  #allowedSources(pod: RegisteredPod): string[] | undefined {
    const ps = this.#d.portSecurity;
    if (!ps) return undefined;
    const honoured = ps.allowSourcePrefixesAnnotation;
    const ranges = honoured && pod.annotations?.[ALLOWED_SOURCES_ANNOTATION] !== undefined
      ? ps.podRanges?.() ?? []
      : [];
    const asked = allowedSources(pod.annotations, honoured, ranges);
    if ("invalid" in asked) {
      this.#d.pods?.event?.(pod, "Warning", "SourcePrefixesRefused", asked.invalid);
      throw new CniError(CNI_ERROR.INVALID_CONFIG, asked.invalid);
    }
    if ("refused" in asked) {
      this.#d.logger.warn("pod {namespace}/{name}: {why}", {
        namespace: pod.namespace,
        name: pod.name,
        why: asked.refused,
      });
      this.#d.pods?.event?.(pod, "Warning", "SourcePrefixesRefused", asked.refused);
      return undefined;
    }
    return asked.prefixes;
  }

  /** The ADD's pod, when Kubernetes is on and the runtime named one (its wait timed). */
  async #findPod(run: AddRun): Promise<RegisteredPod | undefined> {
    if (!run.ref) return undefined;
    const waited = performance.now();
    const pod = await this.#podFor(run.ref, run.req.containerId, run.signal);
    if (this.#d.pods) this.#d.phases?.record("podWait", performance.now() - waited);
    run.podRef = pod ? { ...run.ref, uid: pod.uid } : run.ref;
    return pod;
  }

  /**
   * Plugs the default interface: the chain of a NAD that replaces the default network, or the
   * selected driver.
   */
  async #plugDefault(run: AddRun, nads: AbortSignal | undefined): Promise<DefaultPlug> {
    const plugging = performance.now();
    const pod = run.pod;
    const replacement = pod && nads
      ? await this.#defaultReplacement(pod, run.key.ifname, nads)
      : undefined;
    const plug: DefaultPlug = replacement
      ? {
        record: await plugChain(
          this.#d.drivers,
          run.key,
          { netns: run.netns, pod: run.podRef },
          replacement,
          run.req,
          `${pod!.namespace}/${pod!.name}`,
        ),
      }
      : await this.#plugFreeing(run);
    this.#d.phases?.record("plug", performance.now() - plugging);
    return plug;
  }

  /**
   * Plugs through the selected driver; a range found full while DELs are finishing (answered,
   * their addresses not yet released) is tried once more when they have ended, so an address a
   * DEL gave back is there for the ADD that follows it.
   */
  async #plugFreeing(run: AddRun): Promise<DefaultPlug> {
    const finishing = this.#finishing.size ? [...this.#finishing] : [];
    try {
      return await this.#plugWithDriver(run);
    } catch (e) {
      const full = e instanceof CniError && e.code === CNI_ERROR.ADDRESSES_EXHAUSTED;
      finishing.push(...this.#finishing);
      if (!full || finishing.length === 0) throw e;
      await Promise.allSettled(finishing);
      return await this.#plugWithDriver(run);
    }
  }

  /**
   * Plugs through the selected driver. The record's file is written while the plug goes on (the
   * kernel creating the pair is most of an ADD under load), once the driver announces its result;
   * it is put in place only once the plug succeeded.
   */
  async #plugWithDriver(run: AddRun): Promise<DefaultPlug> {
    const { key, netns, req, driver, conf } = run;
    let staging: Promise<StagedRecord> | undefined;
    let announced: Attachment | undefined;
    let plugged: Plugged;
    try {
      plugged = await (await this.#driver(driver, run.signal, true)).add({
        key,
        netns,
        conf,
        args: req.args,
        path: req.path,
        prevResult: req.config.prevResult ? upgradeResult(req.config.prevResult) : undefined,
        allowedSources: run.allowedSources,
        ipamTime: (ms) => this.#d.phases?.record("ipam", ms),
        resultKnown: (result, hostIfname) => {
          announced = recordOf(run, result, hostIfname);
          staging = this.#d.store.stage(announced);
          staging.catch(() => {}); // settled by the caller, whichever way the plug goes
        },
      });
    } catch (e) {
      await staging?.then((s) => s.discard(), () => {});
      throw e;
    }
    // A driver that announced its result resolves to that same result (AddContext).
    return { record: announced ?? recordOf(run, plugged.result, plugged.hostIfname), staging };
  }

  /** Records the plugged attachment (the staged file put in place); unplugs it when that fails. */
  async #record(run: AddRun, { record, staging }: DefaultPlug): Promise<Attachment> {
    const { key, req } = run;
    try {
      const recording = performance.now();
      if (staging) await (await staging).commit();
      else await this.#d.store.put(record);
      this.#d.phases?.record("record", performance.now() - recording);
      return record;
    } catch (err) {
      await staging?.then((s) => s.discard(), () => {});
      this.#d.logger.warn("ADD of {containerId}/{ifname} could not be recorded, rolling back", {
        ...key,
      });
      await this.#unplug(key, record, req).catch((e) =>
        this.#d.logger.error("rollback of {containerId}/{ifname} failed: {error}", {
          ...key,
          error: String(e),
        })
      );
      throw new CniError(CNI_ERROR.IO_FAILURE, "cannot record the attachment", String(err));
    }
  }

  /**
   * Plugs the pod's additional networks. All or nothing: when one fails, the default interface
   * goes too (its extras are already undone), and a bad selection is said on the pod.
   */
  async #plugExtrasOrUndo(
    run: AddRun,
    pod: RegisteredPod,
    record: Attachment,
    nads: AbortSignal,
  ): Promise<void> {
    try {
      await this.#plugExtras(pod, record, run.req, nads);
    } catch (e) {
      await this.#release(run.key, run.req).catch(() => {});
      if (e instanceof CniError && e.code === CNI_ERROR.INVALID_CONFIG) {
        this.#d.pods?.event?.(pod, "Warning", "InvalidNetworkSelection", e.message);
        run.reported = true;
      }
      this.#d.logger.warn("ADD of {containerId}: additional networks failed: {error}", {
        ...run.key,
        error: e instanceof Error ? e.message : String(e),
      });
      throw e;
    }
  }

  /**
   * Puts the pod's NetworkPolicy (and its additional interfaces' MultiNetworkPolicy) in place
   * before the answer; when that fails, the ADD is undone
   * rather than answered with the pod open to what its policies deny.
   */
  async #enforcePolicy(run: AddRun, pod: RegisteredPod, record: Attachment): Promise<void> {
    const started = performance.now();
    try {
      await this.#d.policy?.plugged(
        pod,
        (record.result.ips ?? []).map((ip) => ip.address.split("/")[0]),
        run.signal,
      );
      // The pod's additional interfaces, recorded by now (MultiNetworkPolicy).
      await this.#d.multiPolicy?.plugged(pod);
      this.#d.phases?.record("policy", performance.now() - started);
    } catch (e) {
      await this.#release(run.key, run.req).catch(() => {});
      throw e;
    }
  }

  /** A failed ADD of a known pod is said on the pod too (kubectl describe), with its code. */
  #reportFailedAdd(run: AddRun, e: unknown): void {
    if (!run.pod || run.reported || run.signal?.aborted) return;
    const code = e instanceof CniError ? e.code : CNI_ERROR.INTERNAL;
    const msg = e instanceof Error ? e.message : String(e);
    this.#d.pods?.event?.(
      run.pod,
      "Warning",
      "FailedNetworkSetup",
      `Ferry could not plug ${run.key.ifname} of container ${run.key.containerId} (CNI error ${code}): ${msg}`,
    );
  }

  /** `fn`, with `key` counted among the ADDs in flight while it runs (see `#adding`). */
  #plugging<T>(key: AttachmentKey, fn: () => Promise<T>): () => Promise<T> {
    const id = `${key.containerId}/${key.ifname}`;
    return async () => {
      this.#adding.set(id, key);
      try {
        return await fn();
      } finally {
        this.#adding.delete(id);
      }
    };
  }

  /**
   * The requester of an ADD went away (its shim timed out, its connection closed) while the
   * interface was being plugged: nobody will use the result, so it is rolled back rather than
   * left behind unknown to the runtime.
   */
  async #abandon(key: AttachmentKey, req: CniRequest): Promise<never> {
    this.#d.logger.warn(
      "ADD of {containerId}/{ifname} finished after its requester had gone; rolling it back",
      { ...key },
    );
    await this.#release(key, req);
    throw new Abandoned("ADD", key.containerId, key.ifname);
  }

  /** Rolls back an ADD whose answer never reached its requester, unless it changed since. */
  #undoUndelivered(key: AttachmentKey, record: Attachment, req: CniRequest): Promise<void> {
    return this.#locks.run(key.containerId, async () => {
      if (this.#d.store.get(key) !== record) return;
      this.#d.logger.warn(
        "the answer to ADD {containerId}/{ifname} could not be delivered (its requester is gone); " +
          "rolling it back",
        { ...key },
      );
      await this.#release(key, req);
    });
  }

  /** Waits for the request's pod when Kubernetes is on and the runtime named a pod. */
  async #podFor(
    ref: PodRef,
    containerId: string | undefined,
    gone?: AbortSignal,
  ): Promise<RegisteredPod | undefined> {
    if (!this.#d.pods) return undefined;
    const { registry, waitMs } = this.#d.pods;
    using deadline = new Deadline(waitMs);
    const signal = deadline.signal;
    try {
      return await registry.waitFor(ref, gone ? AbortSignal.any([signal, gone]) : signal);
    } catch (e) {
      if (!signal.aborted) throw e;
      this.#d.logger.warn(
        "pod {namespace}/{name} did not appear within {ms} ms; ADD {containerId} refused",
        {
          ...ref,
          ms: waitMs,
          containerId,
        },
      );
      throw new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        `pod ${ref.namespace}/${ref.name} did not appear in the node's pod watch within ${
          waitMs / 1000
        } s`,
      );
    }
  }

  /** Unplugs and releases; anything already gone is success. */
  async del(req: CniRequest, signal?: AbortSignal): Promise<void> {
    const key = this.#key(req);
    // The node's own namespace is refused outright; a path that is gone or no namespace at all
    // is treated as gone (nothing is done inside it).
    await this.#d.netns.forDel(req.netns);
    // The answer may go out before the lock-held work ends (a driver's `answerNow`); what comes
    // after it is awaited by `idle()` and its failure logged (the reconcile loop then finds the
    // record and releases it).
    let early = false;
    let answer!: () => void;
    const answered = new Promise<void>((resolve) => (answer = () => (early = true, resolve())));
    const work = this.#locks.run(key.containerId, async () => {
      const ref = podRefFromArgs(req.args);
      const registry = this.#d.pods?.registry;
      const current = ref && registry?.containerIdOf(ref);
      if (ref && current && current !== key.containerId) {
        this.#d.logger.warn(
          "DEL for container {containerId} of pod {namespace}/{name}, which runs container {current}: " +
            "an old sandbox; the running pod stays plugged",
          { ...key, ...ref, current },
        );
      } else if (ref && current) {
        registry!.setContainerId(ref, undefined);
      }
      if (ref && !(current && current !== key.containerId)) this.#d.policy?.unplugged(ref);
      // Answered early only once the record is off the disk: a daemon killed before the work
      // ends then releases what it held at its next start (it is unrecorded), as the runtime
      // was told; if the file cannot be removed, the answer waits for the whole DEL.
      await this.#release(key, req, () => {
        this.#d.store.retire(key).then(answer, () => {});
      });
    }, signal);
    const where = `${req.netns ?? ""}\0${key.ifname}`;
    this.#finishing.add(work);
    this.#finishingAt.set(where, work);
    const forget = () => {
      this.#finishing.delete(work);
      if (this.#finishingAt.get(where) === work) this.#finishingAt.delete(where);
    };
    // Its additional interfaces' records are gone: their namespace's policy table follows.
    if (this.#d.multiPolicy) void work.then(() => this.#d.multiPolicy!.changed(), () => {});
    work.then(forget, (e) => {
      forget();
      if (!early) return; // the caller gets this error as the answer
      this.#d.logger.error(
        "DEL of {containerId}/{ifname}, answered already, failed to finish: {error}",
        { ...key, error: e instanceof Error ? e.message : String(e) },
      );
    });
    await Promise.race([answered, work]);
  }

  /** DELs in progress, answered or not (link removal confirmed, addresses released, …). */
  get finishingDels(): number {
    return this.#finishing.size;
  }

  /** Resolves once every DEL answered early has finished its work (for a graceful stop). */
  async idle(): Promise<void> {
    while (this.#finishing.size > 0) {
      await Promise.allSettled([...this.#finishing]);
    }
  }

  /** The NAD that replaces the pod's default network, when a multi-VIF driver names one. */
  async #defaultReplacement(
    pod: RegisteredPod,
    ifname: string,
    wait: AbortSignal,
  ): Promise<RequestedAttachment | undefined> {
    for (const d of this.#d.multiVif?.drivers ?? []) {
      const found = await d.defaultNetwork?.(pod, ifname, wait);
      if (found) return found;
    }
    return undefined;
  }

  /**
   * Plugs the additional attachments the multi-VIF drivers ask for, in order, each recorded with
   * `parent`; if one fails, those plugged before it are removed in reverse order and the error
   * names the network and the plugin's own code and message.
   */
  async #plugExtras(
    pod: RegisteredPod,
    parent: Attachment,
    req: CniRequest,
    wait: AbortSignal,
  ): Promise<void> {
    const podName = `${pod.namespace}/${pod.name}`;
    const wanted: RequestedAttachment[] = [];
    for (const d of this.#d.multiVif!.drivers) {
      const got = await d.requested(pod, parent.ifname, wait);
      for (const w of got.warnings) {
        this.#d.logger.warn("pod {pod}: {warning}", { pod: podName, warning: w });
      }
      wanted.push(...got.attachments);
    }
    const names = new Set([parent.ifname]);
    for (const a of wanted) {
      if (names.has(a.ifname)) {
        throw new CniError(
          CNI_ERROR.INVALID_CONFIG,
          `pod ${podName}: interface ${a.ifname} is requested twice`,
        );
      }
      names.add(a.ifname);
    }
    const done: AttachmentKey[] = [];
    try {
      for (const a of wanted) {
        const key = { containerId: parent.containerId, ifname: a.ifname };
        const record = await plugChain(
          this.#d.drivers,
          key,
          { ...parent, parent: parent.ifname },
          a,
          req,
          podName,
        );
        done.push(key);
        await this.#d.store.put(record);
        if (a.defaultRoute?.length) await this.#moveDefaultRoute(parent, record, a.defaultRoute);
      }
    } catch (e) {
      for (const key of done.reverse()) await this.#release(key, req).catch(() => {});
      throw e;
    }
  }

  /**
   * `default-route`: the pod's default route of each gateway's family goes through `to` instead of
   * the default interface, as Multus does; both records' results say so (CHECK stays true).
   */
  async #moveDefaultRoute(parent: Attachment, to: Attachment, gateways: string[]): Promise<void> {
    const set = this.#d.multiVif?.setDefaultRoute;
    if (!set) return;
    for (const gw of gateways) {
      const bare = gw.split("/")[0];
      const dst = defaultDst(bare);
      await set(to.netns, to.ifname, bare);
      parent.result = {
        ...parent.result,
        routes: (parent.result.routes ?? []).filter((r) => r.dst !== dst),
      };
      to.result = {
        ...to.result,
        routes: [...(to.result.routes ?? []).filter((r) => r.dst !== dst), { dst, gw: bare }],
      };
    }
    await this.#d.store.put(parent);
    await this.#d.store.put(to);
  }

  /** Unplugs through the recorded driver (or the one the request selects) and forgets it. */
  async #release(key: AttachmentKey, req: CniRequest, answerNow?: () => void): Promise<void> {
    // An interface plugged with this one (multi-VIF) goes first, the last plugged first.
    const children = this.#d.store.ofContainer(key.containerId).filter((r) =>
      r.parent === key.ifname
    ).reverse();
    for (const child of children) await this.#release(child, req);
    const record = this.#d.store.get(key);
    await this.#unplug(key, record, req, answerNow);
    await this.#d.store.delete(key);
    this.#d.logger.info("released {containerId}/{ifname} ({ips})", {
      ...key,
      ips: record?.result.ips?.map((ip) => ip.address).join(", ") || "none",
    });
  }

  /**
   * Unplugs through the driver that plugged it; without a record, through the driver the
   * request's config selects (the spec gives DEL the same config as ADD).
   */
  async #unplug(
    key: AttachmentKey,
    record: Attachment | undefined,
    req: CniRequest,
    answerNow?: () => void,
  ) {
    if (record?.chain) {
      return await unplugChain(
        this.#d.drivers,
        record,
        await this.#d.netns.forDel(record.netns),
        req,
      );
    }
    const { driver, conf } = record
      ? { driver: record.driver ?? "bridge", conf: record.conf ?? req.config }
      : selectDriver(req.config);
    // Only the namespace this daemon plugged (the record's) is entered, and only while it is
    // still a pod's: without a record, whatever has that name in the request's namespace is
    // not known to be ours, and it goes with its namespace anyway.
    await (await this.#driver(driver)).del({
      key: { containerId: key.containerId, ifname: key.ifname },
      netns: await this.#d.netns.forDel(record?.netns),
      conf,
      args: req.args,
      path: req.path,
      record,
      answerNow,
    });
  }

  /**
   * Releases an attachment the runtime never DELeted (the reconcile loop and the sweep): under the
   * container's lock, and only when `stale` still holds for the record found then (an ADD or DEL
   * may have come in meanwhile). The DEL is made from the record: its network, driver config,
   * pod and CNI_PATH.
   *
   * @returns the record released, or undefined when there was nothing (stale) to release.
   */
  releaseStale(
    key: AttachmentKey,
    stale: (record: Attachment | undefined) => boolean | Promise<boolean>,
  ): Promise<Attachment | undefined> {
    return this.#locks.run(key.containerId, async () => {
      const record = this.#d.store.get(key);
      if (!record || !(await stale(record))) return undefined;
      const args: Record<string, string> = {};
      if (record.pod) {
        args.K8S_POD_NAMESPACE = record.pod.namespace;
        args.K8S_POD_NAME = record.pod.name;
        if (record.pod.uid) args.K8S_POD_UID = record.pod.uid;
      }
      const req: CniRequest = {
        command: "DEL",
        containerId: key.containerId,
        ifname: key.ifname,
        netns: record.netns,
        args,
        path: record.path ?? [],
        config: {
          cniVersion: record.result.cniVersion ?? "1.1.0",
          name: record.network,
          type: "ferry",
        },
      };
      await this.#release(key, req);
      return record;
    });
  }

  /**
   * The sweep's second half: Ferry's host links and default-network addresses that no attachment
   * names (an ADD killed between plugging and recording, a record lost) are removed once they
   * have been seen orphaned for `graceMs` (`seen` keeps when each was first seen, across sweeps).
   * What an ADD in flight has plugged is never an orphan, however long that ADD takes (it counts
   * as named); an address is released under its container's lock and only while no record names
   * it.
   *
   * @returns how many links and addresses were removed.
   */
  async sweepOrphans(
    seen: Map<string, number>,
    graceMs: number,
  ): Promise<{ links: string[]; addresses: string[] }> {
    const bridge = this.#d.network.current;
    const out = { links: [] as string[], addresses: [] as string[] };
    if (!bridge) return out;
    const now = Date.now();
    const { links, owners } = await bridge.orphans(this.#d.store.list(), [
      ...this.#d.store.damaged(),
      ...this.#adding.values(),
    ]);
    const current = new Set([
      ...links.map((l) => `link ${l}`),
      ...owners.map((o) => `owner ${o.containerId}/${o.ifname}`),
    ]);
    for (const k of [...seen.keys()]) if (!current.has(k)) seen.delete(k);
    const old = (k: string) => {
      if (!seen.has(k)) seen.set(k, now);
      return now - seen.get(k)! >= graceMs;
    };
    for (const link of links) {
      if (!old(`link ${link}`)) continue;
      await bridge.removeHostLink(link);
      seen.delete(`link ${link}`);
      out.links.push(link);
    }
    for (const owner of owners) {
      const k = `owner ${owner.containerId}/${owner.ifname}`;
      if (!old(k)) continue;
      await this.#locks.run(owner.containerId, async () => {
        if (this.#d.store.get(owner) || !bridge.holds(owner)) return;
        const ip = bridge.addressesOf(owner);
        if (await bridge.releaseOwner(owner)) out.addresses.push(...ip);
      });
      seen.delete(k);
    }
    if (out.links.length || out.addresses.length) {
      this.#d.logger.warn(
        "sweep: removed host links {links} and released addresses {addresses} that no attachment named",
        { links: out.links.join(", ") || "none", addresses: out.addresses.join(", ") || "none" },
      );
    }
    return out;
  }

  /** Compares the live interface with the previous result (or the recorded one). */
  async check(req: CniRequest, signal?: AbortSignal): Promise<void> {
    const key = this.#key(req);
    const netns = need(req, "netns");
    await this.#d.netns.require(netns, true);
    return await this.#locks.run(key.containerId, async () => {
      const record = this.#d.store.get(key);
      if (!record) {
        throw new CniError(
          CNI_ERROR.UNKNOWN_CONTAINER,
          `no interface ${key.ifname} recorded for ${key.containerId}`,
        );
      }
      const expected = req.config.prevResult ? upgradeResult(req.config.prevResult) : record.result;
      await this.#checkRecord(record, netns, req, expected, signal);
      // Every interface plugged with it (multi-VIF), each against its own recorded result.
      for (const child of this.#d.store.ofContainer(key.containerId)) {
        if (child.parent !== key.ifname) continue;
        try {
          await this.#checkRecord(child, netns, req, child.result, signal);
        } catch (e) {
          const msg = e instanceof Error ? e.message : String(e);
          throw new CniError(
            e instanceof CniError ? e.code : CNI_ERROR.CHECK_MISMATCH,
            `network ${child.network} (${child.ifname}): ${msg}`,
          );
        }
      }
    }, signal);
  }

  /** Checks one attachment: through its driver, or each plugin of its chain in order. */
  async #checkRecord(
    record: Attachment,
    netns: string,
    req: CniRequest,
    expected: CniResult,
    signal?: AbortSignal,
  ): Promise<void> {
    const key = { containerId: record.containerId, ifname: record.ifname };
    if (!record.chain) {
      await (await this.#driver(record.driver ?? "bridge", signal)).check({
        key,
        netns,
        conf: record.conf ?? req.config,
        args: req.args,
        path: req.path,
        record,
      }, expected);
      return;
    }
    await checkChain(this.#d.drivers, record, netns, req, expected);
  }

  /** Throws code 50 when ADD cannot be served now. */
  status(): void {
    const waiting = this.#d.network.waitingFor;
    if (waiting) {
      throw new CniError(
        CNI_ERROR.PLUGIN_NOT_AVAILABLE,
        `the default network is not open: ${waiting}`,
      );
    }
    if (!this.#d.isReady()) {
      throw new CniError(CNI_ERROR.PLUGIN_NOT_AVAILABLE, "the Ferry daemon is not ready");
    }
    if ((this.#d.network.current?.free ?? 0) <= 0) {
      throw new CniError(CNI_ERROR.PLUGIN_NOT_AVAILABLE, "no free address on this node");
    }
  }

  /** Releases every attachment of this network that the runtime's valid list does not name. */
  async gc(req: CniRequest): Promise<void> {
    const listed = (req.config as Record<string, unknown>)["cni.dev/valid-attachments"];
    if (listed !== undefined && !Array.isArray(listed)) {
      throw new CniError(CNI_ERROR.INVALID_CONFIG, "cni.dev/valid-attachments must be a list");
    }
    const valid = new Set(
      ((listed ?? []) as { containerID?: string; ifname?: string }[]).map((a) =>
        `${a.containerID}/${a.ifname}`
      ),
    );
    const stale = new Map<string, AttachmentKey>();
    for (const a of this.#d.store.list()) {
      if (a.network === req.config.name) stale.set(`${a.containerId}/${a.ifname}`, a);
    }
    // Addresses of the default network's pools without a record (a crash between allocating and
    // recording) are this node's to give back, but only a GC of the default network sees them.
    const defaultNetwork = selectDriver(req.config).driver === "bridge";
    const bridge = this.#d.network.current;
    for (const owner of defaultNetwork ? bridge?.owners() ?? [] : []) {
      if (!this.#d.store.get(owner)) stale.set(`${owner.containerId}/${owner.ifname}`, owner);
    }
    for (const [id, key] of stale) {
      if (valid.has(id)) continue;
      await this.#locks.run(key.containerId, async () => {
        // Looked at again under the lock: an ADD may have recorded it meanwhile.
        const now = this.#d.store.get(key);
        if (now && now.network !== req.config.name) return;
        if (!now && !bridge?.holds(key)) return;
        await this.#release(key, req);
      });
    }
  }
}

/** One ADD as its steps see it. */
interface AddRun extends Selection {
  /** The request. */
  req: CniRequest;
  /** The container and interface. */
  key: AttachmentKey;
  /** The pod's network namespace. */
  netns: string;
  /** The pod the runtime named, if any. */
  ref?: PodRef;
  /** That pod with its UID, once found (what the record names). */
  podRef?: PodRef;
  /** The pod from the registry, once found. */
  pod?: RegisteredPod;
  /** Aborts when the requester has gone. */
  signal?: AbortSignal;
  /** When the request arrived (performance.now()). */
  started: number;
  /** Whether the failure was already said on the pod. */
  reported: boolean;
  /** Extra source prefixes port security lets the default interface send from. */
  allowedSources?: string[];
}

/** The default interface plugged, and its record (staged while the plug went on, if announced). */
interface DefaultPlug {
  /** What will be recorded. */
  record: Attachment;
  /** Its file, written while the plug went on. */
  staging?: Promise<StagedRecord>;
}

/** The attachment record of an ADD that plugged `result` (host end `hostIfname`). */
function recordOf(run: AddRun, result: CniResult, hostIfname?: string): Attachment {
  const r: Attachment = {
    ...run.key,
    netns: run.netns,
    network: run.req.config.name,
    driver: run.driver,
    result,
    createdAt: new Date().toISOString(),
  };
  if (hostIfname) r.hostIfname = hostIfname;
  if (run.driver !== "bridge") {
    r.conf = run.conf;
    r.path = run.req.path;
  }
  if (run.podRef) r.pod = run.podRef;
  if (run.allowedSources?.length) r.allowedSources = run.allowedSources;
  return r;
}
