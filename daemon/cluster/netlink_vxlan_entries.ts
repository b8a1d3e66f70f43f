/**
 * The VXLAN device's per-peer entries through rtnetlink in-process (the default; iproute2 is the
 * fallback where FFI cannot load): RTM_NEWNEIGH with replace sets a permanent neighbour entry
 * (peer's overlay gateway → its MAC) and a forwarding-database entry (`NTF_SELF`: MAC → the peer's
 * underlay address), each peer acknowledged on its own so one the kernel refuses does not stop
 * the others; RTM_DELNEIGH removes those of peers that are gone; dumps filtered on the
 * device list what is there. Runs in the daemon's own namespace, off the CNI request path.
 *
 * @module
 */
import type { NetlinkSys } from "../net/netlink/libc.ts";
import { dumpNeigh, getLink, neighRequest, NL } from "../net/netlink/messages.ts";
import { NetlinkRefusal, type RouteSocket, withRouteSocket } from "../net/netlink/route_socket.ts";
import { reasonOf } from "./route_table.ts";
import type { EntryFailure, VxlanEntries, VxlanPeer } from "./vxlan.ts";

const ENOENT = 2;
const ZERO_MAC = "00:00:00:00:00:00";

/**
 * The netlink entries.
 *
 * @example
 * ```ts
 * const entries = new NetlinkVxlanEntries(Libc.open());
 * await entries.apply("ferry.vxlan", peers, await entries.neighbours("ferry.vxlan"));
 * ```
 */
export class NetlinkVxlanEntries implements VxlanEntries {
  readonly #sys: NetlinkSys;

  /** Creates the entries on `sys`. */
  constructor(sys: NetlinkSys) {
    this.#sys = sys;
  }

  #with<T>(fn: (sock: RouteSocket) => T): T {
    return withRouteSocket(this.#sys, fn);
  }

  /** The permanent IPv4 neighbour entries of `device`. */
  neighbours(device: string): Promise<Map<string, string>> {
    try {
      return Promise.resolve(this.#with((sock) => {
        const index = sock.linkIndex(`find ${device}`, (seq) => getLink(seq, device));
        const out = new Map<string, string>();
        for (const r of sock.dump("list neighbours", (seq) => dumpNeigh(seq, "neigh"))) {
          const n = r.neigh;
          if (n?.ifindex === index && n.permanent && n.dst && n.mac) out.set(n.dst, n.mac);
        }
        return out;
      }));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Replaces the entries of `peers`, each peer on its own (one the kernel refuses is returned with
   * why, the others are set); removes the neighbour and forwarding entries of others.
   */
  apply(device: string, peers: VxlanPeer[], live: Map<string, string>): Promise<EntryFailure[]> {
    try {
      return Promise.resolve(this.#with((sock) => {
        const failures: EntryFailure[] = [];
        const ifindex = sock.linkIndex(`find ${device}`, (seq) => getLink(seq, device));
        const gone = (e: unknown) => e instanceof NetlinkRefusal && e.errno === ENOENT;
        const refused = (peer: VxlanPeer | undefined, e: unknown) => {
          if (!(e instanceof NetlinkRefusal)) throw e;
          failures.push({ peer, reason: reasonOf(e) });
        };
        const want = new Set(peers.map((p) => p.gateway));
        for (const [gateway] of live) {
          if (want.has(gateway)) continue;
          try {
            sock.ack(
              `delete neighbour ${gateway}`,
              (seq) => neighRequest(NL.RTM_DELNEIGH, seq, { kind: "neigh", ifindex, dst: gateway }),
            );
          } catch (e) {
            if (!gone(e)) refused(undefined, e);
          }
        }
        const macs = new Map(peers.map((p) => [p.mac, p.ip]));
        const fdb = sock.dump("list forwarding entries", (seq) => dumpNeigh(seq, "fdb"))
          .map((r) => r.neigh!)
          .filter((n) => n?.ifindex === ifindex && n.dst && n.mac && n.mac !== ZERO_MAC);
        for (const e of fdb) {
          if (macs.get(e.mac!) === e.dst) continue;
          try {
            sock.ack(
              `delete forwarding entry ${e.mac} → ${e.dst}`,
              (seq) =>
                neighRequest(NL.RTM_DELNEIGH, seq, {
                  kind: "fdb",
                  ifindex,
                  mac: e.mac,
                  dst: e.dst,
                }),
            );
          } catch (err) {
            if (!gone(err)) refused(undefined, err);
          }
        }
        const set = new Set(fdb.map((e) => `${e.mac} ${e.dst}`));
        for (const p of peers) {
          try {
            sock.ack(
              `neighbour ${p.gateway} → ${p.mac}`,
              (seq) =>
                neighRequest(NL.RTM_NEWNEIGH, seq, {
                  kind: "neigh",
                  ifindex,
                  dst: p.gateway,
                  mac: p.mac,
                }),
            );
            // One forwarding entry per MAC and address (a node with two ranges is two peers).
            if (set.has(`${p.mac} ${p.ip}`)) continue;
            sock.ack(
              `forwarding entry ${p.mac} → ${p.ip}`,
              (seq) =>
                neighRequest(NL.RTM_NEWNEIGH, seq, { kind: "fdb", ifindex, mac: p.mac, dst: p.ip }),
            );
            set.add(`${p.mac} ${p.ip}`);
          } catch (e) {
            refused(p, e);
          }
        }
        return failures;
      }));
    } catch (e) {
      return Promise.reject(e);
    }
  }
}
