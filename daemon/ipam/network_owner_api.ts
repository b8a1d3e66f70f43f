/**
 * The owners of NAD networks' ranges in the API: `NetworkOwner` objects
 * (`deploy/base/crds/networkowners.yaml`) for {@link import("./nad_space_owners.ts").SpaceOwners},
 * their claims serialized on a Lease of their own (an owner's claim never waits on block claims).
 *
 * @module
 */
import type { KubeClient } from "../k8s/client.ts";
import { NETWORKOWNERS } from "../k8s/resources.ts";
import { networkHash } from "./nad_blocks.ts";
import {
  type NetworkOwnerApi,
  type NetworkOwnerObject,
  spaceOfNetwork,
} from "./nad_space_owners.ts";
import { claimTurn } from "./pool_api.ts";

/** The Lease whose version serializes the claims of NAD ranges' owners across the cluster. */
export const OWNER_CLAIM_LEASE = { namespace: "kube-system", name: "ferry-nad-owner-claims" };

/**
 * `NetworkOwner` objects through `kube`; a network's owners (of every space of it) are listed
 * (from storage) by their `ferry.dev/network` label, the hash of the network.
 *
 * @example
 * ```ts
 * const api = kubeNetworkOwnerApi(client);
 * await api.list("blue/v4"); // blue/v4's owners and blue/range-…'s of IPv4
 * ```
 */
export function kubeNetworkOwnerApi(
  kube: KubeClient,
  claims: { namespace: string; name: string } = OWNER_CLAIM_LEASE,
): NetworkOwnerApi {
  return {
    async list(network) {
      const { items } = await kube.listAll<NetworkOwnerObject>(NETWORKOWNERS, {
        labelSelector: `ferry.dev/network=${networkHash(network)}`,
      });
      // The label is a hash: keep only the network's own owners.
      return items.filter((o) => spaceOfNetwork(o.spec?.network ?? "", network));
    },
    claimTurn: () => claimTurn(kube, claims),
    create: (owner) => kube.create(NETWORKOWNERS, owner),
    delete: async (name, uid) => {
      await kube.delete(NETWORKOWNERS, undefined, name, { preconditions: { uid } });
    },
  };
}
