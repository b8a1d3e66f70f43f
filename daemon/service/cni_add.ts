/**
 * ADD on one node, as its steps: the namespace is judged and a DEL still removing a link there is
 * waited for; the container's turn is taken; the pod is found in the registry (waiting for the
 * watch if the ADD came first); the default interface is plugged and recorded (the record's file
 * written while the plug goes on); the pod's additional networks are plugged (all or nothing);
 * its NetworkPolicy is put in place; the pod is told. A failure is said on the pod, and an ADD
 * whose requester went away is rolled back.
 *
 * @module
 */
import { type PodRef, podRefFromArgs } from "../../lib/cni/args.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { CniResult } from "../../lib/cni/schemas.ts";
import { upgradeResult } from "../../lib/cni/versions.ts";
import type { CniRequest } from "../../lib/envelope.ts";
import type { Attachment, AttachmentKey, StagedRecord } from "../records/attachment_store.ts";
import type { Plugged } from "../drivers/driver.ts";
import { Deadline } from "../runtime/deadline.ts";
import type { RegisteredPod } from "../records/registry.ts";
import type { RequestedAttachment } from "../multivif/drivers.ts";
import { plugChain } from "../multivif/chain.ts";
import { defaultDst } from "../net/link_plan.ts";
import { Abandoned } from "./abandoned.ts";
import { ALLOWED_SOURCES_ANNOTATION, allowedSources } from "../portsec/allowed_sources.ts";
import { timeoutSecondsOf } from "../../lib/cni/ferry_conf.ts";
import type { AllocationWait } from "../ipam/quarantine.ts";
import {
  need,
  selectDriver,
  type Selection,
  type ServiceState,
  type Undelivered,
} from "./service_state.ts";

/** ADD of one node's CNI service. */
export class CniAdd {
  readonly #s: ServiceState;

  /** ADD over the service's shared state. */
  constructor(state: ServiceState) {
    this.#s = state;
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
    const key = this.#s.key(req);
    const netns = need(req, "netns");
    const ref = podRefFromArgs(req.args);
    const selection = selectDriver(req.config);
    const started = performance.now();
    await this.#s.d.netns.require(netns);
    await this.#s.finishingAt.get(`${netns}\0${key.ifname}`)?.catch(() => {});
    const run: AddRun = {
      req,
      key,
      netns,
      ref,
      ...selection,
      signal,
      started,
      reported: false,
      addressWait: addressWaitOf(req, signal),
    };
    const result = await this.#s.locks.run(
      key.containerId,
      this.#plugging(key, () => this.#addInTurn(run, undelivered)),
      signal,
    ).catch((e) => {
      this.#reportFailedAdd(run, e);
      throw e;
    });
    this.#s.d.phases?.record("total", performance.now() - started);
    return result;
  }

  /** The ADD, holding its container's turn. */
  async #addInTurn(run: AddRun, undelivered?: Undelivered): Promise<CniResult> {
    const { key, netns, req } = run;
    this.#s.d.phases?.record("turn", performance.now() - run.started);
    const pod = run.pod = await this.#findPod(run);
    const existing = this.#s.d.store.get(key);
    if (existing && existing.netns !== netns) {
      throw new CniError(
        CNI_ERROR.INVALID_ENV,
        `container ${key.containerId} already has ${key.ifname} in ${existing.netns}`,
      );
    }
    // Multi-VIF: one bounded wait for every NAD this ADD needs, which may replace the default
    // network (v1.multus-cni.io/default-network) and add interfaces; a deadline only when
    // multi-VIF drivers will look for NADs (not on every ADD).
    using nadWait = pod && run.driver === "bridge" && this.#s.d.multiVif?.drivers.length
      ? new Deadline(this.#s.d.multiVif.waitMs)
      : undefined;
    const nads = nadWait
      ? AbortSignal.any([nadWait.signal, ...(run.signal ? [run.signal] : [])])
      : undefined;
    if (existing) {
      // A repeated ADD gets the answer already given, unless the first one was cut short (the
      // daemon died after recording the default interface, before every additional one): that
      // one is undone and plugged anew rather than answered without interfaces the pod selects.
      const missing = pod && nads ? await this.#missingExtras(pod, existing, nads) : [];
      if (missing.length === 0) return existing.result;
      this.#s.d.logger.warn(
        "ADD of {containerId}/{ifname} repeated after one cut short ({missing} never plugged): " +
          "undoing it and plugging anew",
        { ...key, missing: missing.join(", ") },
      );
      await this.#s.release(key, req);
    }
    if (pod && run.driver === "bridge") run.allowedSources = this.#allowedSources(pod);
    const record = await this.#record(run, await this.#plugDefault(run, nads));
    if (pod && nads) await this.#plugExtrasOrUndo(run, pod, record, nads);
    if (pod && (this.#s.d.policy || this.#s.d.multiPolicy)) {
      await this.#enforcePolicy(run, pod, record);
    }
    if (pod && run.ref) {
      this.#s.d.pods!.registry.setContainerId(run.ref, key.containerId);
      this.#s.d.pods!.annotate(pod, record);
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
    const ps = this.#s.d.portSecurity;
    if (!ps) return undefined;
    const honoured = ps.allowSourcePrefixesAnnotation;
    const ranges = honoured && pod.annotations?.[ALLOWED_SOURCES_ANNOTATION] !== undefined
      ? ps.podRanges?.() ?? []
      : [];
    const asked = allowedSources(pod.annotations, honoured, ranges);
    if ("invalid" in asked) {
      this.#s.d.pods?.event?.(pod, "Warning", "SourcePrefixesRefused", asked.invalid);
      throw new CniError(CNI_ERROR.INVALID_CONFIG, asked.invalid);
    }
    if ("refused" in asked) {
      this.#s.d.logger.warn("pod {namespace}/{name}: {why}", {
        namespace: pod.namespace,
        name: pod.name,
        why: asked.refused,
      });
      this.#s.d.pods?.event?.(pod, "Warning", "SourcePrefixesRefused", asked.refused);
      return undefined;
    }
    return asked.prefixes;
  }

  /** The ADD's pod, when Kubernetes is on and the runtime named one (its wait timed). */
  async #findPod(run: AddRun): Promise<RegisteredPod | undefined> {
    if (!run.ref) return undefined;
    const waited = performance.now();
    const pod = await this.#podFor(run.ref, run.req.containerId, run.signal);
    if (this.#s.d.pods) this.#s.d.phases?.record("podWait", performance.now() - waited);
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
          this.#s.d.drivers,
          run.key,
          { netns: run.netns, pod: run.podRef, addressWait: run.addressWait },
          replacement,
          run.req,
          `${pod!.namespace}/${pod!.name}`,
        ),
      }
      : await this.#plugFreeing(run);
    this.#s.d.phases?.record("plug", performance.now() - plugging);
    return plug;
  }

  /**
   * Plugs through the selected driver; a range found full while DELs are finishing (answered,
   * their addresses not yet released) is tried once more when they have ended, so an address a
   * DEL gave back is there for the ADD that follows it.
   */
  async #plugFreeing(run: AddRun): Promise<DefaultPlug> {
    const finishing = this.#s.finishing.size ? [...this.#s.finishing] : [];
    try {
      return await this.#plugWithDriver(run);
    } catch (e) {
      const full = e instanceof CniError && e.code === CNI_ERROR.ADDRESSES_EXHAUSTED;
      finishing.push(...this.#s.finishing);
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
      plugged = await (await this.#s.driver(driver, run.signal, true)).add({
        key,
        netns,
        conf,
        args: req.args,
        path: req.path,
        prevResult: req.config.prevResult ? upgradeResult(req.config.prevResult) : undefined,
        allowedSources: run.allowedSources,
        ipamTime: (ms) => this.#s.d.phases?.record("ipam", ms),
        addressWait: run.addressWait,
        resultKnown: (result, hostIfname) => {
          announced = recordOf(run, result, hostIfname);
          staging = this.#s.d.store.stage(announced);
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
      else await this.#s.d.store.put(record);
      this.#s.d.phases?.record("record", performance.now() - recording);
      return record;
    } catch (err) {
      await staging?.then((s) => s.discard(), () => {});
      this.#s.d.logger.warn("ADD of {containerId}/{ifname} could not be recorded, rolling back", {
        ...key,
      });
      await this.#s.unplug(key, record, req).catch((e) =>
        this.#s.d.logger.error("rollback of {containerId}/{ifname} failed: {error}", {
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
      await this.#plugExtras(pod, record, run.req, nads, run.addressWait);
    } catch (e) {
      await this.#s.release(run.key, run.req).catch(() => {});
      if (e instanceof CniError && e.code === CNI_ERROR.INVALID_CONFIG) {
        this.#s.d.pods?.event?.(pod, "Warning", "InvalidNetworkSelection", e.message);
        run.reported = true;
      }
      this.#s.d.logger.warn("ADD of {containerId}: additional networks failed: {error}", {
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
      await this.#s.d.policy?.plugged(
        pod,
        (record.result.ips ?? []).map((ip) => ip.address.split("/")[0]),
        run.signal,
      );
      // The pod's additional interfaces, recorded by now (MultiNetworkPolicy).
      await this.#s.d.multiPolicy?.plugged(pod);
      this.#s.d.phases?.record("policy", performance.now() - started);
    } catch (e) {
      await this.#s.release(run.key, run.req).catch(() => {});
      throw e;
    }
  }

  /** A failed ADD of a known pod is said on the pod too (kubectl describe), with its code. */
  #reportFailedAdd(run: AddRun, e: unknown): void {
    if (!run.pod || run.reported || run.signal?.aborted) return;
    const code = e instanceof CniError ? e.code : CNI_ERROR.INTERNAL;
    const msg = e instanceof Error ? e.message : String(e);
    this.#s.d.pods?.event?.(
      run.pod,
      "Warning",
      "FailedNetworkSetup",
      `Ferry could not plug ${run.key.ifname} of container ${run.key.containerId} (CNI error ${code}): ${msg}`,
    );
  }

  /** `fn`, with `key` counted among the ADDs in flight while it runs (see `ServiceState.adding`). */
  #plugging<T>(key: AttachmentKey, fn: () => Promise<T>): () => Promise<T> {
    const id = `${key.containerId}/${key.ifname}`;
    return async () => {
      this.#s.adding.set(id, key);
      try {
        return await fn();
      } finally {
        this.#s.adding.delete(id);
      }
    };
  }

  /**
   * The requester of an ADD went away (its shim timed out, its connection closed) while the
   * interface was being plugged: nobody will use the result, so it is rolled back rather than
   * left behind unknown to the runtime.
   */
  async #abandon(key: AttachmentKey, req: CniRequest): Promise<never> {
    this.#s.d.logger.warn(
      "ADD of {containerId}/{ifname} finished after its requester had gone; rolling it back",
      { ...key },
    );
    await this.#s.release(key, req);
    throw new Abandoned("ADD", key.containerId, key.ifname);
  }

  /** Rolls back an ADD whose answer never reached its requester, unless it changed since. */
  #undoUndelivered(key: AttachmentKey, record: Attachment, req: CniRequest): Promise<void> {
    return this.#s.locks.run(key.containerId, async () => {
      if (this.#s.d.store.get(key) !== record) return;
      this.#s.d.logger.warn(
        "the answer to ADD {containerId}/{ifname} could not be delivered (its requester is gone); " +
          "rolling it back",
        { ...key },
      );
      await this.#s.release(key, req);
    });
  }

  /** Waits for the request's pod when Kubernetes is on and the runtime named a pod. */
  async #podFor(
    ref: PodRef,
    containerId: string | undefined,
    gone?: AbortSignal,
  ): Promise<RegisteredPod | undefined> {
    if (!this.#s.d.pods) return undefined;
    const { registry, waitMs } = this.#s.d.pods;
    using deadline = new Deadline(waitMs);
    const signal = deadline.signal;
    try {
      return await registry.waitFor(ref, gone ? AbortSignal.any([signal, gone]) : signal);
    } catch (e) {
      if (!signal.aborted) throw e;
      this.#s.d.logger.warn(
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

  /** The NAD that replaces the pod's default network, when a multi-VIF driver names one. */
  async #defaultReplacement(
    pod: RegisteredPod,
    ifname: string,
    wait: AbortSignal,
  ): Promise<RequestedAttachment | undefined> {
    for (const d of this.#s.d.multiVif?.drivers ?? []) {
      const found = await d.defaultNetwork?.(pod, ifname, wait);
      if (found) return found;
    }
    return undefined;
  }

  /** The additional interfaces `pod` selects that `parent`'s container has no record of. */
  async #missingExtras(
    pod: RegisteredPod,
    parent: Attachment,
    wait: AbortSignal,
  ): Promise<string[]> {
    const missing: string[] = [];
    for (const d of this.#s.d.multiVif!.drivers) {
      for (const a of (await d.requested(pod, parent.ifname, wait)).attachments) {
        if (!this.#s.d.store.get({ containerId: parent.containerId, ifname: a.ifname })) {
          missing.push(a.ifname);
        }
      }
    }
    return missing;
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
    addressWait: AllocationWait,
  ): Promise<void> {
    const podName = `${pod.namespace}/${pod.name}`;
    const wanted: RequestedAttachment[] = [];
    for (const d of this.#s.d.multiVif!.drivers) {
      const got = await d.requested(pod, parent.ifname, wait);
      for (const w of got.warnings) {
        this.#s.d.logger.warn("pod {pod}: {warning}", { pod: podName, warning: w });
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
          this.#s.d.drivers,
          key,
          { ...parent, parent: parent.ifname, addressWait },
          a,
          req,
          podName,
        );
        done.push(key);
        await this.#s.d.store.put(record);
        if (a.defaultRoute?.length) await this.#moveDefaultRoute(parent, record, a.defaultRoute);
      }
    } catch (e) {
      for (const key of done.reverse()) await this.#s.release(key, req).catch(() => {});
      throw e;
    }
  }

  /**
   * `default-route`: the pod's default route of each gateway's family goes through `to` instead of
   * the default interface, as Multus does; both records' results say so (CHECK stays true).
   */
  async #moveDefaultRoute(parent: Attachment, to: Attachment, gateways: string[]): Promise<void> {
    const set = this.#s.d.multiVif?.setDefaultRoute;
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
    await this.#s.d.store.put(parent);
    await this.#s.d.store.put(to);
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
  /** How long allocating its addresses may wait for the reuse quarantine. */
  addressWait: AllocationWait;
}

/**
 * What an ADD keeps for plugging, recording and answering once its addresses are known (ms): a
 * wait for an address in the reuse quarantine ends this long before the shim stops waiting.
 */
export const ANSWER_MARGIN_MS = 2000;

/**
 * How long an ADD's allocations may wait for the reuse quarantine: until `ANSWER_MARGIN_MS` before
 * the shim gives up (the config's `timeoutSeconds` from now), or until the requester hangs up.
 */
function addressWaitOf(req: CniRequest, signal: AbortSignal | undefined): AllocationWait {
  const until = Date.now() + timeoutSecondsOf(req.config) * 1000 - ANSWER_MARGIN_MS;
  return signal ? { until, signal } : { until };
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
