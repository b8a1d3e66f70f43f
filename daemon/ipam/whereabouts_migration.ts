/**
 * The migration from whereabouts: the addresses whereabouts' own `IPPool`s record for pods that
 * still live, kept in memory and refreshed now and then, so that Ferry's NAD IPAM never hands one
 * out ({@link import("./nad_network_ipam.ts").NadNetworkIpamDeps.foreign}). An allocation whose pod
 * is gone is not kept: whereabouts would have released it itself.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { type WhereaboutsPoolObject, whereaboutsReservations } from "./whereabouts_pools.ts";

/** What {@link WhereaboutsReservations} needs. */
export interface WhereaboutsReservationsDeps {
  /** Every whereabouts IPPool (none when its CRD is not installed). */
  list: () => Promise<WhereaboutsPoolObject[]>;
  /** Whether pod `namespace/name` exists (a read of the server). */
  podExists: (namespace: string, name: string) => Promise<boolean>;
  /** Where to log. */
  logger: Logger;
}

/**
 * The live pods' whereabouts addresses.
 *
 * @example
 * ```ts
 * const wa = new WhereaboutsReservations({ list, podExists, logger });
 * await wa.refresh();
 * wa.holder("192.168.2.5"); // { namespace: "default", name: "a" } while that pod lives
 * ```
 */
export class WhereaboutsReservations {
  readonly #d: WhereaboutsReservationsDeps;
  #byIp = new Map<string, { namespace: string; name: string }>();
  #timer?: ReturnType<typeof setInterval>;

  /** Creates it empty: call {@link WhereaboutsReservations.refresh} before use. */
  constructor(deps: WhereaboutsReservationsDeps) {
    this.#d = deps;
  }

  /** Reads the pools and the pods again. */
  async refresh(): Promise<void> {
    const reservations = whereaboutsReservations(await this.#d.list());
    const alive = new Map<string, boolean>();
    const next = new Map<string, { namespace: string; name: string }>();
    for (const r of reservations) {
      const slash = r.podRef.indexOf("/");
      if (slash < 0) continue;
      const namespace = r.podRef.slice(0, slash);
      const name = r.podRef.slice(slash + 1);
      if (!alive.has(r.podRef)) alive.set(r.podRef, await this.#d.podExists(namespace, name));
      if (alive.get(r.podRef)) next.set(r.ip, { namespace, name });
    }
    if (next.size !== this.#byIp.size) {
      this.#d.logger.info("whereabouts records {n} addresses of live pods: Ferry leaves them", {
        n: next.size,
      });
    }
    this.#byIp = next;
  }

  /** The live pod whereabouts gave `ip`, if any. */
  holder(ip: string): { namespace: string; name: string } | undefined {
    return this.#byIp.get(ip);
  }

  /** Every address whereabouts gives a live pod, with the pod's namespace. */
  all(): { ip: string; namespace: string }[] {
    return [...this.#byIp].map(([ip, pod]) => ({ ip, namespace: pod.namespace }));
  }

  /** Refreshes every `intervalMs` (a failure is logged and tried again next time). */
  start(intervalMs: number): void {
    this.#timer = setInterval(() => {
      this.refresh().catch((e) =>
        this.#d.logger.warn("reading whereabouts' IPPools failed: {error}", { error: String(e) })
      );
    }, intervalMs);
    Deno.unrefTimer(this.#timer as unknown as number);
  }

  /** Stops refreshing. */
  stop(): void {
    clearInterval(this.#timer);
  }
}
