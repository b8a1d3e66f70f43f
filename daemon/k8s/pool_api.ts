/**
 * The pool IPAM's use of the API: `IPBlock` reads and writes for {@link BlockIpam}, and the two
 * watches (`IPPool`, `IPBlock`) that feed a {@link PoolMap}.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { BlockApi } from "../ipam/block_ipam.ts";
import type { IpBlockObject, IpPoolObject } from "../ipam/ip_pools.ts";
import { PoolMap } from "../cluster/pool_map.ts";
import type { KubeClient } from "./client.ts";
import { Informer, type InformerOptions } from "./informer.ts";
import { IPBLOCKS, IPPOOLS } from "./resources.ts";

/**
 * `IPBlock` objects through `kube`.
 *
 * @example
 * ```ts
 * const api = kubeBlockApi(client);
 * await api.get("10-244-0-64-26"); // undefined when there is no such block
 * ```
 */
export function kubeBlockApi(kube: KubeClient): BlockApi {
  return {
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
