/**
 * Every `IPPool`, for NADs whose `ferry` IPAM names one: from the pool watch when it runs and has
 * listed (`ipam.mode` pool, or auto without podCIDRs), else listed from the API and kept for a few
 * seconds (a burst of ADDs on one NAD lists once). A cluster without the IPPool CRD has none, an
 * answer kept as long (not a list per ADD).
 *
 * @module
 */
import type { PoolMap } from "./pool_map.ts";
import type { IpPoolObject } from "./ip_pools.ts";
import type { KubeClient } from "../k8s/client.ts";
import { KubeApiError } from "../k8s/errors.ts";
import { IPPOOLS } from "../k8s/resources.ts";

/**
 * A reader of every pool. A list is kept `keepMs`; once it is older, the next read lists again,
 * and while that list is under way reads get the one it replaces if that one is less than
 * `2 × keepMs` old (the ADDs of a burst never wait for a refresh; an answer is never older than
 * that).
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
  now: () => number = Date.now,
): () => Promise<IpPoolObject[]> {
  let kept: { at: number; items: Promise<IpPoolObject[]> } | undefined;
  /** The newest list that succeeded, and when it was asked for. */
  let last: { at: number; items: IpPoolObject[] } | undefined;
  /** The list under way answers, or (when under way) the one before it, if recent enough. */
  const answer = (k: { at: number; items: Promise<IpPoolObject[]> }) =>
    last && last.at < k.at && now() - last.at < 2 * keepMs ? Promise.resolve(last.items) : k.items;
  return () => {
    if (watched?.synced) return Promise.resolve(watched.allPools());
    if (kept && now() - kept.at < keepMs) return answer(kept);
    const at = now();
    const items = client.listAll<IpPoolObject>(IPPOOLS, {}).then((l) => l.items, (e) => {
      // No IPPool CRD is an answer (no pools), kept as a list is: every NAD ADD of a cluster
      // without Ferry's CRDs would list again otherwise. Any other failure is not kept.
      if (e instanceof KubeApiError && e.isNotFound) return [];
      if (kept?.items === items) kept = undefined;
      throw e;
    }).then((got) => {
      if (!last || last.at < at) last = { at, items: got };
      return got;
    });
    items.catch(() => {}); // a failure is the caller's who waits for it, or the next read's
    kept = { at, items };
    return answer(kept);
  };
}
