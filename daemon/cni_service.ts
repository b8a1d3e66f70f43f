/**
 * What each CNI command does on this node: ADD plugs a veth with an address from the node-local
 * pool, DEL unplugs and releases (forgivingly), CHECK compares the live interface with the
 * recorded result, STATUS tells whether ADD can be served, GC removes what the runtime no longer
 * lists. Collaborators (pool, store, plumber) are handed in.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { type PodRef, podRefFromArgs } from "../lib/cni/args.ts";
import { CNI_ERROR, CniError } from "../lib/cni/errors.ts";
import type { CniResult } from "../lib/cni/schemas.ts";
import { upgradeResult } from "../lib/cni/versions.ts";
import type { CniRequest } from "../lib/envelope.ts";
import type { Attachment, AttachmentKey, AttachmentStore } from "./attachment_store.ts";
import { formatIp } from "./ipam/cidr.ts";
import type { LocalPool } from "./ipam/local_pool.ts";
import { KeyedMutex } from "./keyed_mutex.ts";
import { hostLinkName, stableMac } from "./net/naming.ts";
import type { Plumber, VethSpec } from "./net/plumber.ts";
import { firstDifference, vethResult } from "./result.ts";
import type { PodRegistry, RegisteredPod } from "./registry.ts";

/** The Kubernetes side of the service: where pods are found and attachments recorded. */
export interface PodSource {
  /** The pods of this node, fed by the watch. */
  registry: PodRegistry;
  /** How long ADD waits for its pod to appear (ms). */
  waitMs: number;
  /** Records an attachment on its pod: the one API write of the CNI request path. */
  annotate(pod: RegisteredPod, attachment: Attachment): Promise<void>;
}

/** What the service needs. */
export interface CniServiceDeps {
  /** The node-local address pool. */
  pool: LocalPool;
  /** The record of plugged interfaces. */
  store: AttachmentStore;
  /** The kernel side. */
  plumber: Plumber;
  /** MTU of pod interfaces. */
  mtu: number;
  /** Whether the daemon can serve ADD (STATUS reports it). */
  isReady: () => boolean;
  /** Where to log. */
  logger: Logger;
  /** Pods from Kubernetes; absent in standalone mode (no pod lookup, no annotation). */
  pods?: PodSource;
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
 * const service = new CniService({ pool, store, plumber, mtu: 1500, isReady: () => true, logger });
 * const result = await service.handle(request);
 * ```
 */
export class CniService {
  readonly #d: CniServiceDeps;
  readonly #locks = new KeyedMutex();

  /** Creates the service. */
  constructor(deps: CniServiceDeps) {
    this.#d = deps;
  }

  /** Runs one request; resolves to a result for ADD, undefined otherwise. */
  handle(req: CniRequest): Promise<CniResult | undefined> {
    switch (req.command) {
      case "ADD":
        return this.add(req);
      case "DEL":
        return this.del(req).then(() => undefined);
      case "CHECK":
        return this.check(req).then(() => undefined);
      case "STATUS":
        return Promise.resolve(this.status()).then(() => undefined);
      case "GC":
        return this.gc(req).then(() => undefined);
    }
  }

  #key(req: CniRequest): AttachmentKey {
    return { containerId: need(req, "containerId"), ifname: need(req, "ifname") };
  }

  /** Plugs the interface, or returns the recorded result of an earlier identical ADD. */
  add(req: CniRequest): Promise<CniResult> {
    const key = this.#key(req);
    const netns = need(req, "netns");
    const ref = podRefFromArgs(req.args);
    return this.#locks.run(key.containerId, async () => {
      const pod = ref && await this.#podFor(ref, req.containerId);
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
      const address = await this.#d.pool.allocate(key);
      const spec: VethSpec = {
        netns,
        ifname: key.ifname,
        hostIfname: hostLinkName(key.containerId, key.ifname),
        containerMac: stableMac(key.containerId, key.ifname, "container"),
        hostMac: stableMac(key.containerId, key.ifname, "host"),
        mtu: this.#d.mtu,
        address,
        gateway: formatIp(this.#d.pool.range.gateway),
      };
      try {
        await this.#d.plumber.plugVeth(spec);
        const prev = req.config.prevResult ? upgradeResult(req.config.prevResult) : undefined;
        const record: Attachment = {
          ...key,
          netns,
          network: req.config.name,
          hostIfname: spec.hostIfname,
          result: vethResult(spec, prev),
          createdAt: new Date().toISOString(),
        };
        if (ref) record.pod = pod ? { ...ref, uid: pod.uid } : ref;
        await this.#d.store.put(record);
        if (pod && ref) {
          this.#d.pods!.registry.setContainerId(ref, key.containerId);
          await this.#annotate(pod, record);
        }
        return record.result;
      } catch (err) {
        await this.#rollback(key, spec.hostIfname, err);
        throw err;
      }
    });
  }

  /** Waits for the request's pod when Kubernetes is on and the runtime named a pod. */
  async #podFor(ref: PodRef, containerId: string | undefined): Promise<RegisteredPod | undefined> {
    if (!this.#d.pods) return undefined;
    const { registry, waitMs } = this.#d.pods;
    const signal = AbortSignal.timeout(waitMs);
    try {
      return await registry.waitFor(ref, signal);
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

  /** The one API write of ADD; a failure is logged, not fatal (node-local state has the record). */
  async #annotate(pod: RegisteredPod, record: Attachment): Promise<void> {
    try {
      await this.#d.pods!.annotate(pod, record);
    } catch (e) {
      this.#d.logger.warn("could not record the attachment on pod {namespace}/{name}: {error}", {
        namespace: pod.namespace,
        name: pod.name,
        error: e instanceof Error ? e.message : String(e),
      });
    }
  }

  async #rollback(key: AttachmentKey, hostIfname: string, cause: unknown): Promise<void> {
    this.#d.logger.warn("ADD of {containerId}/{ifname} failed, rolling back: {cause}", {
      ...key,
      cause: String(cause),
    });
    await this.#d.plumber.unplugVeth(hostIfname).catch((e) =>
      this.#d.logger.error("rollback could not remove {hostIfname}: {error}", {
        hostIfname,
        error: String(e),
      })
    );
    await this.#d.store.delete(key);
    await this.#d.pool.release(key);
  }

  /** Unplugs and releases; anything already gone is success. */
  del(req: CniRequest): Promise<void> {
    const key = this.#key(req);
    return this.#locks.run(key.containerId, async () => {
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
      await this.#release(key);
    });
  }

  async #release(key: AttachmentKey): Promise<void> {
    const record = this.#d.store.get(key);
    await this.#d.plumber.unplugVeth(
      record?.hostIfname ?? hostLinkName(key.containerId, key.ifname),
    );
    const ip = await this.#d.pool.release(key);
    await this.#d.store.delete(key);
    this.#d.logger.info("released {containerId}/{ifname} ({ip})", { ...key, ip: ip ?? "none" });
  }

  /** Compares the live interface with the previous result (or the recorded one). */
  check(req: CniRequest): Promise<void> {
    const key = this.#key(req);
    const netns = need(req, "netns");
    return this.#locks.run(key.containerId, async () => {
      const record = this.#d.store.get(key);
      if (!record) {
        throw new CniError(
          CNI_ERROR.UNKNOWN_CONTAINER,
          `no interface ${key.ifname} recorded for ${key.containerId}`,
        );
      }
      const expected = req.config.prevResult ? upgradeResult(req.config.prevResult) : record.result;
      const live = await this.#d.plumber.inspect(netns, key.ifname);
      const diff = firstDifference(expected, key.ifname, netns, live);
      if (diff) throw new CniError(CNI_ERROR.CHECK_MISMATCH, diff);
    });
  }

  /** Throws code 50 when ADD cannot be served now. */
  status(): void {
    if (!this.#d.isReady()) {
      throw new CniError(CNI_ERROR.PLUGIN_NOT_AVAILABLE, "the Ferry daemon is not ready");
    }
    if (this.#d.pool.free <= 0) {
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
    for (const { owner } of this.#d.pool.allocations()) {
      if (!this.#d.store.get(owner)) stale.set(`${owner.containerId}/${owner.ifname}`, owner);
    }
    for (const [id, key] of stale) {
      if (valid.has(id)) continue;
      await this.#locks.run(key.containerId, async () => {
        // Looked at again under the lock: an ADD may have recorded it meanwhile.
        const now = this.#d.store.get(key);
        if (now && now.network !== req.config.name) return;
        if (!now && !this.#d.pool.addressOf(key)) return;
        await this.#release(key);
      });
    }
  }
}
