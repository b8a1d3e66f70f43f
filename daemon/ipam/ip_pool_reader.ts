/**
 * Every `IPPool`, for NADs whose `ferry` IPAM names one: from the pool watch when it runs and has
 * listed (`ipam.mode` pool, or auto without podCIDRs), else listed from the API and kept for a few
 * seconds (a burst of ADDs on one NAD lists once). A cluster without the IPPool CRD has none.
 *
 * @module
 */
import type { PoolMap } from "./pool_map.ts";
import type { IpPoolObject } from "./ip_pools.ts";
import type { KubeClient } from "../k8s/client.ts";
import { KubeApiError } from "../k8s/errors.ts";
import { IPPOOLS } from "../k8s/resources.ts";

/**
 * A reader of every pool.
 *
 * @example
 * ```ts
 * const pools = ipPoolReader(kube.client, kube.pools);
 * (await pools()).map((p) => p.metadata?.name); // ["default", "telco-vlan10"]
 * ```
 */
export function ipPoolReader(
  client: Pick<KubeClient, "listAll">,
  watched?: Pick<PoolMap, "synced" | "allPools">,
  keepMs = 5000,
): () => Promise<IpPoolObject[]> {
  let kept: { at: number; items: Promise<IpPoolObject[]> } | undefined;
  return () => {
    if (watched?.synced) return Promise.resolve(watched.allPools());
    if (kept && Date.now() - kept.at < keepMs) return kept.items;
    const items = client.listAll<IpPoolObject>(IPPOOLS, {}).then((l) => l.items, (e) => {
      kept = undefined; // a failure is not kept
      if (e instanceof KubeApiError && e.isNotFound) return [];
      throw e;
    });
    kept = { at: Date.now(), items };
    return items;
  };
}
