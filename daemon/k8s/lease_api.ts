/**
 * One `coordination.k8s.io` Lease through the client, for {@link LeaderLease}.
 *
 * @module
 */
import type { LeaseApi, LeaseObject } from "../gc/leader_lease.ts";
import type { KubeClient } from "./client.ts";
import { KubeApiError } from "./errors.ts";
import { LEASES } from "./resources.ts";

/**
 * The Lease `name` in `namespace`.
 *
 * @example
 * ```ts
 * const api = kubeLeaseApi(client, "kube-system", "ferry-ipam-reclaim");
 * ```
 */
export function kubeLeaseApi(kube: KubeClient, namespace: string, name: string): LeaseApi {
  return {
    get: () =>
      kube.get<LeaseObject>(LEASES, namespace, name).catch((e) => {
        if (e instanceof KubeApiError && e.isNotFound) return undefined;
        throw e;
      }),
    create: (lease) =>
      kube.create(LEASES, { ...lease, metadata: { ...lease.metadata, name, namespace } }),
    update: (lease) => kube.update(LEASES, lease),
  };
}
