/**
 * Which routes this node needs to reach the pods of the others. Pure.
 *
 * `host-gw`: for every other node, one route per pod range via that node's InternalIP of the same
 * family (nodes on one L2 segment). A node without a pod range, or without an address of the
 * range's family, gets no route (and is reported).
 *
 * @module
 */
import type { ClusterNode } from "./nodes.ts";
import type { UnroutableRange } from "./unroutable.ts";

/** A route to another node's pods. */
export interface NodeRoute {
  /** The pod range, e.g. `10.244.2.0/24`. */
  dst: string;
  /** The node's address it goes through. */
  via: string;
  /** The device, when the next hop is reached through one (the overlay's, onlink). */
  dev?: string;
}

const isV6 = (s: string) => s.includes(":");

/**
 * The host-gw routes to every node but `self`.
 *
 * @example
 * ```ts
 * hostGwRoutes([{ name: "n2", internalIPs: ["192.0.2.12"], podCIDRs: ["10.244.2.0/24"] }], "n1");
 * // { routes: [{ dst: "10.244.2.0/24", via: "192.0.2.12" }], unroutable: [] }
 * ```
 */
export function hostGwRoutes(
  nodes: ClusterNode[],
  self: string,
): { routes: NodeRoute[]; unroutable: UnroutableRange[] } {
  const routes: NodeRoute[] = [];
  const unroutable: UnroutableRange[] = [];
  for (const node of nodes) {
    if (node.name === self) continue;
    for (const dst of node.podCIDRs) {
      const via = node.internalIPs.find((ip) => isV6(ip) === isV6(dst));
      if (via) routes.push({ dst, via });
      else {
        unroutable.push({
          node: node.name,
          dst,
          reason: `the node has no IPv${isV6(dst) ? 6 : 4} InternalIP`,
        });
      }
    }
  }
  routes.sort((a, b) => a.dst.localeCompare(b.dst));
  return { routes, unroutable };
}

/**
 * What to change to go from `live` to `desired`: routes to add or replace (new, or another next
 * hop), and routes to delete (no node has that range any more).
 */
export function routeChanges(
  live: NodeRoute[],
  desired: NodeRoute[],
): { replace: NodeRoute[]; remove: NodeRoute[] } {
  const key = (r: NodeRoute) => `${r.via}@${r.dev ?? ""}`;
  const now = new Map(live.map((r) => [r.dst, key(r)]));
  const want = new Set(desired.map((r) => r.dst));
  return {
    replace: desired.filter((r) => now.get(r.dst) !== key(r)),
    remove: live.filter((r) => !want.has(r.dst)),
  };
}
