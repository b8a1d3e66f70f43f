/**
 * NAD networks' use of the API: `NetworkBlock` reads and writes for
 * {@link import("./nad_network_ipam.ts").NadNetworkIpam}, claims serialized on a Lease of
 * their own (NAD blocks never overlap the pools' blocks: claims of one never wait on the other's).
 *
 * @module
 */
import type { NetworkBlockApi } from "./nad_network_ipam.ts";
import { type NetworkBlockObject, networkHash } from "./nad_blocks.ts";
import type { KubeClient } from "../k8s/client.ts";
import { claimTurn } from "./pool_api.ts";
import { NETWORKBLOCKS } from "../k8s/resources.ts";

/** The Lease whose version serializes NAD block claims across the cluster. */
export const NAD_CLAIM_LEASE = { namespace: "kube-system", name: "ferry-nad-ipam-claims" };

/**
 * `NetworkBlock` objects through `kube`; a space's blocks are listed by their
 * `ferry.dev/network` label, a node's by `ferry.dev/node`.
 *
 * @example
 * ```ts
 * const api = kubeNetworkBlockApi(client);
 * await api.list({ node: "n1" });
 * ```
 */
export function kubeNetworkBlockApi(
  kube: KubeClient,
  claims: { namespace: string; name: string } = NAD_CLAIM_LEASE,
): NetworkBlockApi {
  return {
    async list(filter) {
      const labels: string[] = [];
      if (filter.network !== undefined) {
        labels.push(`ferry.dev/network=${networkHash(filter.network)}`);
      }
      if (filter.node !== undefined) labels.push(`ferry.dev/node=${filter.node}`);
      const { items } = await kube.listAll<NetworkBlockObject>(NETWORKBLOCKS, {
        ...(labels.length ? { labelSelector: labels.join(",") } : {}),
        ...(filter.cached ? { resourceVersion: "0" as const } : {}),
      });
      // The label is a hash: keep only the space's own blocks.
      return items.filter((b) =>
        (filter.network === undefined || b.spec?.network === filter.network) &&
        (filter.node === undefined || b.spec?.node === filter.node)
      );
    },
    claimTurn: () => claimTurn(kube, claims),
    create: (block) => kube.create(NETWORKBLOCKS, block),
    update: (block) => kube.update(NETWORKBLOCKS, block),
    get: (name) => kube.find<NetworkBlockObject>(NETWORKBLOCKS, undefined, name),
    delete: async (name, uid, resourceVersion) => {
      await kube.delete(NETWORKBLOCKS, undefined, name, {
        preconditions: { uid, resourceVersion },
      });
    },
  };
}
