/**
 * DEL on one node: forgiving (a gone namespace or link is success), an old sandbox's DEL never
 * unplugs the running pod, and the answer may go out as soon as the record is off the disk while
 * the kernel finishes removing the link; the DELs still finishing are counted, and an ADD into
 * the same namespace and interface name waits for them.
 *
 * @module
 */
import { podRefFromArgs } from "../../lib/cni/args.ts";
import type { CniRequest } from "../../lib/envelope.ts";
import type { ServiceState } from "./service_state.ts";

/** DEL of one node's CNI service. */
export class CniDel {
  readonly #s: ServiceState;

  /** DEL over the service's shared state. */
  constructor(state: ServiceState) {
    this.#s = state;
  }

  /** Unplugs and releases; anything already gone is success. */
  async del(req: CniRequest, signal?: AbortSignal): Promise<void> {
    const key = this.#s.key(req);
    // The node's own namespace is refused outright; a path that is gone or no namespace at all
    // is treated as gone (nothing is done inside it).
    await this.#s.d.netns.forDel(req.netns);
    // The answer may go out before the lock-held work ends (a driver's `answerNow`); what comes
    // after it is awaited by `idle()` and its failure logged (the reconcile loop then finds the
    // record and releases it).
    let early = false;
    let answer!: () => void;
    const answered = new Promise<void>((resolve) => (answer = () => (early = true, resolve())));
    const work = this.#s.locks.run(key.containerId, async () => {
      const ref = podRefFromArgs(req.args);
      const registry = this.#s.d.pods?.registry;
      const current = ref && registry?.containerIdOf(ref);
      if (ref && current && current !== key.containerId) {
        this.#s.d.logger.warn(
          "DEL for container {containerId} of pod {namespace}/{name}, which runs container {current}: " +
            "an old sandbox; the running pod stays plugged",
          { ...key, ...ref, current },
        );
      } else if (ref && current) {
        registry!.setContainerId(ref, undefined);
      }
      if (ref && !(current && current !== key.containerId)) this.#s.d.policy?.unplugged(ref);
      // Answered early only once the record is off the disk: a daemon killed before the work
      // ends then releases what it held at its next start (it is unrecorded), as the runtime
      // was told; if the file cannot be removed, the answer waits for the whole DEL.
      await this.#s.release(key, req, () => {
        this.#s.d.store.retire(key).then(answer, () => {});
      });
    }, signal);
    const where = `${req.netns ?? ""}\0${key.ifname}`;
    this.#s.finishing.add(work);
    this.#s.finishingAt.set(where, work);
    const forget = () => {
      this.#s.finishing.delete(work);
      if (this.#s.finishingAt.get(where) === work) this.#s.finishingAt.delete(where);
    };
    // Its additional interfaces' records are gone: their namespace's policy table follows.
    if (this.#s.d.multiPolicy) void work.then(() => this.#s.d.multiPolicy!.changed(), () => {});
    work.then(forget, (e) => {
      forget();
      if (!early) return; // the caller gets this error as the answer
      this.#s.d.logger.error(
        "DEL of {containerId}/{ifname}, answered already, failed to finish: {error}",
        { ...key, error: e instanceof Error ? e.message : String(e) },
      );
    });
    await Promise.race([answered, work]);
  }

  /** DELs in progress, answered or not (link removal confirmed, addresses released, …). */
  get finishingDels(): number {
    return this.#s.finishing.size;
  }

  /** Resolves once every DEL answered early has finished its work (for a graceful stop). */
  async idle(): Promise<void> {
    while (this.#s.finishing.size > 0) {
      await Promise.allSettled([...this.#s.finishing]);
    }
  }
}
