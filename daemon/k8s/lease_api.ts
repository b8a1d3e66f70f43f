/**
 * One `coordination.k8s.io` Lease through the client, for {@link LeaderLease}.
 *
 * @module
 */
import type { LeaseApi, LeaseObject } from "./leader_lease.ts";
import type { KubeClient } from "./client.ts";
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
    get: () => kube.find<LeaseObject>(LEASES, namespace, name),
    create: (lease) =>
      kube.create(LEASES, { ...lease, metadata: { ...lease.metadata, name, namespace } }),
    update: (lease) => kube.update(LEASES, lease),
  };
}
