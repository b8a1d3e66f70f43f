// Ferry's route table, through in-process netlink (the JS thread switches into a namespace of
// the test's own for each call) and through iproute2 (batches run in that namespace): set,
// list, replace, remove, and routes of other protocols left alone. Needs root.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { NetlinkRouteTable } from "../../daemon/cluster/netlink_route_table.ts";
import {
  FERRY_ROUTE_PROTOCOL,
  IpRouteTable,
  type RouteTable,
} from "../../daemon/cluster/route_table.ts";
import { type IpRunner, SpawningIpRunner } from "../../daemon/net/ip_runner.ts";
import { ipIn, IS_ROOT, run, withNetns } from "../../daemon/dev/netns.ts";
import { Libc } from "../../daemon/net/netlink/libc.ts";

for (const kind of ["netlink", "iproute2"] as const) {
  Deno.test({
    name: `${kind} routes: set, listed, replaced, removed, and only Ferry's protocol is touched`,
    ignore: !IS_ROOT,
    fn: () =>
      withNetns(1, async ([ns]) => {
        await ipIn(ns, "link", "add", "u0", "type", "veth", "peer", "name", "u1");
        await ipIn(ns, "link", "set", "u0", "up");
        await ipIn(ns, "link", "set", "u1", "up");
        await ipIn(ns, "addr", "add", "192.0.2.1/24", "dev", "u0");
        await ipIn(ns, "route", "add", "10.99.9.0/24", "via", "192.0.2.9"); // an operator's route
        const libc = Libc.open();
        const home = libc.openRead("/proc/thread-self/ns/net");
        const nsFd = libc.openRead(ns.path);
        const runner = new SpawningIpRunner();
        const inNamespace: IpRunner = {
          batch: (lines, options = {}) => runner.batch(lines, { ...options, netns: ns.path }),
        };
        const table: RouteTable = kind === "netlink"
          ? new NetlinkRouteTable(libc)
          : new IpRouteTable(inNamespace);
        const inNs = <T>(fn: () => Promise<T>) =>
          kind === "netlink" ? libc.inNetns(nsFd, home, fn) : fn();
        const ferryRoutes = async () =>
          (await ipIn(ns, "route", "show", "proto", String(FERRY_ROUTE_PROTOCOL)))
            .split("\n").map((l) => l.trim()).filter(Boolean).join("\n");
        try {
          await inNs(() =>
            table.apply([
              { dst: "10.244.2.0/24", via: "192.0.2.12" },
              { dst: "10.244.3.0/24", via: "10.244.3.0", dev: "u0" },
            ], [])
          );
          assertEquals(
            (await ferryRoutes()).split("\n"),
            ["10.244.2.0/24 via 192.0.2.12 dev u0 ", "10.244.3.0/24 via 10.244.3.0 dev u0 onlink "]
              .map((l) => l.trim()),
          );
          assertEquals(await inNs(() => table.list()), [
            { dst: "10.244.2.0/24", via: "192.0.2.12" },
            { dst: "10.244.3.0/24", via: "10.244.3.0", dev: "u0" },
          ]);
          await inNs(() =>
            table.apply([{ dst: "10.244.2.0/24", via: "192.0.2.22" }], [
              { dst: "10.244.3.0/24", via: "10.244.3.0", dev: "u0" },
              { dst: "10.244.4.0/24", via: "192.0.2.14" }, // already gone: fine
            ])
          );
          assertEquals(await ferryRoutes(), "10.244.2.0/24 via 192.0.2.22 dev u0");
          const all = await ipIn(ns, "route", "show");
          assertEquals(all.includes("10.99.9.0/24 via 192.0.2.9"), true, all);
        } finally {
          libc.close(nsFd);
          libc.close(home);
        }
        await run("true");
      }),
  });
}

for (const kind of ["netlink", "iproute2"] as const) {
  Deno.test({
    name:
      `${kind} routes: a next hop off the segment is refused on its own, with why; the others are set`,
    ignore: !IS_ROOT,
    fn: () =>
      withNetns(1, async ([ns]) => {
        await ipIn(ns, "link", "add", "u0", "type", "veth", "peer", "name", "u1");
        await ipIn(ns, "link", "set", "u0", "up");
        await ipIn(ns, "link", "set", "u1", "up");
        await ipIn(ns, "addr", "add", "192.0.2.1/24", "dev", "u0");
        const libc = Libc.open();
        const home = libc.openRead("/proc/thread-self/ns/net");
        const nsFd = libc.openRead(ns.path);
        const runner = new SpawningIpRunner();
        const table: RouteTable = kind === "netlink"
          ? new NetlinkRouteTable(libc)
          : new IpRouteTable({
            batch: (lines, options = {}) => runner.batch(lines, { ...options, netns: ns.path }),
          });
        const inNs = <T>(fn: () => Promise<T>) =>
          kind === "netlink" ? libc.inNetns(nsFd, home, fn) : fn();
        try {
          // The bad one first: the ones after it must still be set.
          const failures = await inNs(() =>
            table.apply([
              { dst: "10.244.4.0/24", via: "198.18.9.11" },
              { dst: "10.244.2.0/24", via: "192.0.2.12" },
              { dst: "10.244.3.0/24", via: "192.0.2.13" },
            ], [])
          );
          assertEquals(
            failures.map((f) => [f.route.dst, f.op]),
            [["10.244.4.0/24", "replace"]],
          );
          assert(
            /10\.244\.4\.0\/24/.test(failures[0].reason) &&
              /unreachable|invalid gateway|ENETUNREACH/i.test(failures[0].reason),
            failures[0].reason,
          );
          assertEquals(await inNs(() => table.list()), [
            { dst: "10.244.2.0/24", via: "192.0.2.12" },
            { dst: "10.244.3.0/24", via: "192.0.2.13" },
          ]);
        } finally {
          libc.close(nsFd);
          libc.close(home);
        }
      }),
  });
}
