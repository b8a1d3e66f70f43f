/**
 * What each CNI command does on this node: ADD plugs the interface through its driver (the node
 * bridge for the default network; macvlan, ipvlan or a delegated plugin when the config names an
 * `attachment`), DEL unplugs and releases (forgivingly), CHECK compares the live state with the
 * recorded result, STATUS tells whether ADD can be served, GC removes what the runtime no longer
 * lists. Collaborators (drivers, store, pods) are handed in.
 *
 * The commands live in their own modules: ADD (`cni_add.ts`), DEL (`cni_del.ts`), CHECK, STATUS,
 * GC and the releases of the reconcile loop and the sweep (`cni_upkeep.ts`), over the state they
 * share (`service_state.ts`).
 *
 * @module
 */
import type { CniResult } from "../../lib/cni/schemas.ts";
import type { CniRequest } from "../../lib/envelope.ts";
import type { Attachment, AttachmentKey } from "../records/attachment_store.ts";
import { asAbandoned } from "./abandoned.ts";
import { CniAdd } from "./cni_add.ts";
import { CniDel } from "./cni_del.ts";
import { CniUpkeep } from "./cni_upkeep.ts";
import { type CniServiceDeps, ServiceState, type Undelivered } from "./service_state.ts";

export type { CniServiceDeps, PodSource, Selection, Undelivered } from "./service_state.ts";
export { selectDriver } from "./service_state.ts";

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
  readonly #add: CniAdd;
  readonly #del: CniDel;
  readonly #upkeep: CniUpkeep;

  /** Creates the service. */
  constructor(deps: CniServiceDeps) {
    const state = new ServiceState(deps);
    this.#add = new CniAdd(state);
    this.#del = new CniDel(state);
    this.#upkeep = new CniUpkeep(state);
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

  /** ADD: see `cni_add.ts`. */
  add(req: CniRequest, signal?: AbortSignal, undelivered?: Undelivered): Promise<CniResult> {
    return this.#add.add(req, signal, undelivered);
  }

  /** DEL: see `cni_del.ts`. */
  del(req: CniRequest, signal?: AbortSignal): Promise<void> {
    return this.#del.del(req, signal);
  }

  /** DELs in progress, answered or not (link removal confirmed, addresses released, …). */
  get finishingDels(): number {
    return this.#del.finishingDels;
  }

  /** Resolves once every DEL answered early has finished its work (for a graceful stop). */
  idle(): Promise<void> {
    return this.#del.idle();
  }

  /** Releases an attachment the runtime never DELeted: see `CniUpkeep.releaseStale`. */
  releaseStale(
    key: AttachmentKey,
    stale: (record: Attachment | undefined) => boolean | Promise<boolean>,
  ): Promise<Attachment | undefined> {
    return this.#upkeep.releaseStale(key, stale);
  }

  /** Removes links and addresses no attachment names: see `CniUpkeep.sweepOrphans`. */
  sweepOrphans(
    seen: Map<string, number>,
    graceMs: number,
  ): Promise<{ links: string[]; addresses: string[] }> {
    return this.#upkeep.sweepOrphans(seen, graceMs);
  }

  /** CHECK: compares the live interface with the previous result (or the recorded one). */
  check(req: CniRequest, signal?: AbortSignal): Promise<void> {
    return this.#upkeep.check(req, signal);
  }

  /** STATUS: throws code 50 when ADD cannot be served now. */
  status(): void {
    this.#upkeep.status();
  }

  /** GC: releases every attachment of this network that the runtime's valid list does not name. */
  gc(req: CniRequest): Promise<void> {
    return this.#upkeep.gc(req);
  }
}
