/**
 * Whereabouts' own `IPPool` objects (`whereabouts.cni.cncf.io/v1alpha1`), read for the migration to
 * Ferry's NAD IPAM (pure): each pool records its allocations as offsets from the address of its
 * `spec.range` (`{"allocations": {"5": {"id": "<container>", "podref": "ns/name", "ifname":
 * "net1"}}}`); {@link whereaboutsReservations} turns them into addresses, so that Ferry never hands
 * out an address whereabouts gave a pod that still lives.
 *
 * @module
 */
import type { KubeObject } from "../k8s/client.ts";
import { formatIp, parseIp } from "./cidr.ts";

/** A whereabouts `IPPool`. */
export interface WhereaboutsPoolObject extends KubeObject {
  /** Its range and allocations. */
  spec?: {
    /** `address/prefix`: offsets count from this address. */
    range?: string;
    /** Offset (decimal) → the pod holding that address. */
    allocations?: Record<string, { id?: string; podref?: string; ifname?: string }>;
  };
}

/** An address whereabouts recorded as a pod's. */
export interface WhereaboutsReservation {
  /** The address. */
  ip: string;
  /** The pod, as `namespace/name`. */
  podRef: string;
  /** The container ID. */
  containerId: string;
  /** The interface. */
  ifname: string;
}

/**
 * Every allocation the pools record, as addresses; entries that do not parse are left out.
 *
 * @example
 * ```ts
 * whereaboutsReservations([{ spec: { range: "10.0.0.0/24",
 *   allocations: { "5": { id: "c1", podref: "default/a", ifname: "net1" } } } }]);
 * // [{ ip: "10.0.0.5", podRef: "default/a", containerId: "c1", ifname: "net1" }]
 * ```
 */
export function whereaboutsReservations(pools: WhereaboutsPoolObject[]): WhereaboutsReservation[] {
  const out: WhereaboutsReservation[] = [];
  for (const pool of pools) {
    const range = pool.spec?.range ?? "";
    let first;
    try {
      first = parseIp(range.slice(0, range.indexOf("/") < 0 ? range.length : range.indexOf("/")));
    } catch {
      continue;
    }
    const max = first.family === 4 ? (1n << 32n) - 1n : (1n << 128n) - 1n;
    for (const [offset, a] of Object.entries(pool.spec?.allocations ?? {})) {
      if (!/^\d{1,39}$/.test(offset) || typeof a?.podref !== "string") continue;
      const value = first.value + BigInt(offset);
      if (value > max) continue;
      out.push({
        ip: formatIp({ family: first.family, value }),
        podRef: a.podref,
        containerId: a.id ?? "",
        ifname: a.ifname ?? "",
      });
    }
  }
  return out;
}
