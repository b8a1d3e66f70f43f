/**
 * The pool IPAM's use of the API: `IPBlock` reads and writes for {@link BlockIpam}, and the two
 * watches (`IPPool`, `IPBlock`) that feed a {@link PoolMap}.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { BlockApi, ClaimTurn } from "./block_ipam.ts";
import type { LeaseObject } from "../k8s/leader_lease.ts";
import { KubeApiError } from "../k8s/errors.ts";
import type { IpBlockObject, IpPoolObject } from "./ip_pools.ts";
import { PoolMap } from "./pool_map.ts";
import type { KubeClient } from "../k8s/client.ts";
import { Informer, type InformerOptions } from "../k8s/informer.ts";
import { IPBLOCKS, IPPOOLS, LEASES } from "../k8s/resources.ts";

/** The Lease whose version serializes block claims across the cluster (see {@link ClaimTurn}). */
export const CLAIM_LEASE = { namespace: "kube-system", name: "ferry-ipam-claims" };

/** The annotation holding the number of claims committed. */
const CLAIMS_ANNOTATION = "ferry.dev/claims";

/**
 * Reads the claim Lease `at` (creating it when absent); its `commit` writes the next count with the
 * read resourceVersion as precondition. Every commit changes the object, so every commit moves
 * its resourceVersion on.
 */
export async function claimTurn(
  kube: KubeClient,
  at: { namespace: string; name: string },
): Promise<ClaimTurn> {
  let lease = await kube.find<LeaseObject>(LEASES, at.namespace, at.name);
  if (!lease) {
    try {
      lease = await kube.create<LeaseObject>(LEASES, {
        metadata: {
          name: at.name,
          namespace: at.namespace,
          annotations: { [CLAIMS_ANNOTATION]: "0" },
        },
        spec: {},
      });
    } catch (e) {
      if (!(e instanceof KubeApiError && e.isAlreadyExists)) throw e;
      lease = (await kube.find<LeaseObject>(LEASES, at.namespace, at.name))!;
    }
  }
  const read = lease;
  return {
    async commit() {
      const count = Number(read.metadata?.annotations?.[CLAIMS_ANNOTATION] ?? "0") || 0;
      try {
        await kube.update<LeaseObject>(LEASES, {
          ...read,
          metadata: {
            ...read.metadata,
            annotations: { ...read.metadata?.annotations, [CLAIMS_ANNOTATION]: String(count + 1) },
          },
        });
        return true;
      } catch (e) {
        if (e instanceof KubeApiError && (e.isConflict || e.isNotFound)) return false;
        throw e;
      }
    },
  };
}

/**
 * `IPBlock` objects through `kube`; claims serialized on the Lease `claims`.
 *
 * @example
 * ```ts
 * const api = kubeBlockApi(client);
 * await api.get("10-244-0-64-26"); // undefined when there is no such block
 * ```
 */
export function kubeBlockApi(
  kube: KubeClient,
  claims: { namespace: string; name: string } = CLAIM_LEASE,
): BlockApi {
  return {
    list: async () => (await kube.listAll<IpBlockObject>(IPBLOCKS, {})).items,
    claimTurn: () => claimTurn(kube, claims),
    create: (block) => kube.create(IPBLOCKS, block),
    update: (block) => kube.update(IPBLOCKS, block),
    get: (name) => kube.find<IpBlockObject>(IPBLOCKS, undefined, name),
    delete: async (name, uid, resourceVersion) => {
      await kube.delete(IPBLOCKS, undefined, name, { preconditions: { uid, resourceVersion } });
    },
  };
}

/**
 * The informers of pools and blocks, feeding `map` (a new {@link PoolMap} unless given; marked
 * synced once both first lists are in). Start them (or add them to a `Watcher`) to begin.
 *
 * @example
 * ```ts
 * const { map, informers } = poolInformers(client, logger);
 * for (const i of informers) i.start();
 * ```
 */
export function poolInformers(
  kube: KubeClient,
  logger: Logger,
  options: InformerOptions = {},
  map: PoolMap = new PoolMap(),
): { map: PoolMap; informers: [Informer<IpPoolObject>, Informer<IpBlockObject>] } {
  const pools = new Informer<IpPoolObject>(
    kube,
    IPPOOLS,
    {},
    { upsert: (p) => map.upsertPool(p), remove: (p) => map.removePool(p) },
    logger,
    options,
  );
  const blocks = new Informer<IpBlockObject>(
    kube,
    IPBLOCKS,
    {},
    { upsert: (b) => map.upsertBlock(b), remove: (b) => map.removeBlock(b) },
    logger,
    options,
  );
  Promise.all([pools.synced, blocks.synced]).then(() => map.markSynced(), () => {});
  return { map, informers: [pools, blocks] };
}
