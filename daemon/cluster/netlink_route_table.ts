/**
 * Ferry's routes to other nodes' pods through rtnetlink in-process (the default; the iproute2
 * table is the fallback where FFI cannot load): a route dump filtered on Ferry's protocol number
 * lists them, RTM_NEWROUTE with NLM_F_REPLACE sets one, RTM_DELROUTE removes one; each is
 * acknowledged on its own, so one the kernel refuses does not stop the others. Runs in the
 * daemon's own namespace, off the CNI request path.
 *
 * @module
 */
import type { NetlinkSys } from "../net/netlink/libc.ts";
import { dumpRoutes, getLink, getLinkByIndex, NL, routeRequest } from "../net/netlink/messages.ts";
import { NetlinkRefusal, type RouteSocket, withRouteSocket } from "../net/netlink/route_socket.ts";
import {
  FERRY_ROUTE_PROTOCOL,
  reasonOf,
  type RouteFailure,
  type RouteTable,
} from "./route_table.ts";
import type { NodeRoute } from "./routes.ts";

const ESRCH = 3;
const ENOENT = 2;
const RT_TABLE_MAIN = 254;

/**
 * The netlink route table.
 *
 * @example
 * ```ts
 * const table = new NetlinkRouteTable(Libc.open());
 * await table.apply([{ dst: "10.244.2.0/24", via: "192.0.2.12" }], []);
 * ```
 */
export class NetlinkRouteTable implements RouteTable {
  readonly #sys: NetlinkSys;

  /** Creates the table on `sys`. */
  constructor(sys: NetlinkSys) {
    this.#sys = sys;
  }

  #with<T>(fn: (sock: RouteSocket) => T): T {
    return withRouteSocket(this.#sys, fn);
  }

  /** Ferry's routes in the main table, both families. */
  list(): Promise<NodeRoute[]> {
    return Promise.resolve(this.#with((sock) => {
      const names = new Map<number, string>();
      const out: NodeRoute[] = [];
      for (const family of [4, 6] as const) {
        for (const reply of sock.dump("list routes", (seq) => dumpRoutes(seq, family))) {
          const r = reply.route;
          if (!r || r.protocol !== FERRY_ROUTE_PROTOCOL || r.table !== RT_TABLE_MAIN || !r.via) {
            continue;
          }
          if (r.onlink && r.oif !== undefined) {
            if (!names.has(r.oif)) {
              names.set(
                r.oif,
                sock.linkName("find route device", (seq) => getLinkByIndex(seq, r.oif!)),
              );
            }
            out.push({ dst: r.dst, via: r.via, dev: names.get(r.oif)! });
          } else {
            out.push({ dst: r.dst, via: r.via });
          }
        }
      }
      return out;
    }));
  }

  /**
   * Sets `replace` (add or replace) and removes `remove`, each on its own: a route the kernel
   * refuses is returned with why, the others are set; a route already gone is fine.
   */
  apply(replace: NodeRoute[], remove: NodeRoute[]): Promise<RouteFailure[]> {
    try {
      return Promise.resolve(this.#with((sock) => {
        const failures: RouteFailure[] = [];
        const indexes = new Map<string, number>();
        for (const route of replace) {
          try {
            let oif: number | undefined;
            if (route.dev) {
              if (!indexes.has(route.dev)) {
                indexes.set(
                  route.dev,
                  sock.linkIndex(`find ${route.dev}`, (seq) => getLink(seq, route.dev!)),
                );
              }
              oif = indexes.get(route.dev);
            }
            sock.ack(
              `route ${route.dst} via ${route.via}`,
              (seq) =>
                routeRequest(NL.RTM_NEWROUTE, seq, {
                  dst: route.dst,
                  via: route.via,
                  oif,
                  onlink: route.dev !== undefined,
                  protocol: FERRY_ROUTE_PROTOCOL,
                }),
            );
          } catch (e) {
            if (!(e instanceof NetlinkRefusal)) throw e;
            failures.push({ route, op: "replace", reason: reasonOf(e) });
          }
        }
        for (const route of remove) {
          try {
            sock.ack(
              `delete route ${route.dst}`,
              (seq) =>
                routeRequest(NL.RTM_DELROUTE, seq, {
                  dst: route.dst,
                  protocol: FERRY_ROUTE_PROTOCOL,
                }),
            );
          } catch (e) {
            if (!(e instanceof NetlinkRefusal)) throw e;
            if (e.errno === ESRCH || e.errno === ENOENT) continue;
            failures.push({ route, op: "remove", reason: reasonOf(e) });
          }
        }
        return failures;
      }));
    } catch (e) {
      return Promise.reject(e);
    }
  }
}
