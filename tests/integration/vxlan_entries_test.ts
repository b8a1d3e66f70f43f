// The VXLAN device's per-peer entries (neighbour and forwarding database), through in-process
// netlink (the JS thread switches into a namespace of the test's own for each call) and through
// iproute2: set, listed, moved to another endpoint, removed with their peer, and entries of other
// devices left alone. Needs root.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { NetlinkVxlanEntries } from "../../daemon/cluster/netlink_vxlan_entries.ts";
import { bridgeCmd, IpVxlanEntries, type VxlanEntries } from "../../daemon/cluster/vxlan.ts";
import { type IpRunner, SpawningIpRunner } from "../../daemon/net/ip_runner.ts";
import { ipIn, IS_ROOT, run, withNetns } from "../../daemon/dev/netns.ts";
import { Libc } from "../../daemon/net/netlink/libc.ts";

const MAC_A = "0e:fe:00:00:00:0a";
const MAC_B = "0e:fe:00:00:00:0b";

for (const kind of ["netlink", "iproute2"] as const) {
  Deno.test({
    name:
      `${kind} VXLAN entries: neighbours and forwarding entries set, moved, removed with their peer`,
    ignore: !IS_ROOT,
    fn: () =>
      withNetns(1, async ([ns]) => {
        await ipIn(ns, "link", "add", "u0", "type", "veth", "peer", "name", "u1");
        await ipIn(ns, "addr", "add", "192.0.2.1/24", "dev", "u0");
        await ipIn(ns, "link", "set", "u0", "up");
        await ipIn(ns, "link", "set", "u1", "up");
        for (const dev of ["vx0", "vx1"]) {
          const id = dev === "vx0" ? "7" : "8";
          await ipIn(
            ns,
            "link",
            "add",
            dev,
            "type",
            "vxlan",
            "id",
            id,
            "local",
            "192.0.2.1",
            "dstport",
            "8472",
            "nolearning",
          );
          await ipIn(ns, "link", "set", dev, "up");
        }
        // Another device's entries, which must stay.
        await ipIn(
          ns,
          "neigh",
          "replace",
          "10.9.9.9",
          "lladdr",
          MAC_A,
          "dev",
          "vx1",
          "nud",
          "permanent",
        );
        const libc = Libc.open();
        const home = libc.openRead("/proc/thread-self/ns/net");
        const nsFd = libc.openRead(ns.path);
        const runner = new SpawningIpRunner();
        const inNamespace: IpRunner = {
          batch: (lines, options = {}) => runner.batch(lines, { ...options, netns: ns.path }),
        };
        const entries: VxlanEntries = kind === "netlink"
          ? new NetlinkVxlanEntries(libc)
          : new IpVxlanEntries(
            inNamespace,
            (args) => bridgeCmd(["-netns", ns.name, ...args]),
          );
        const inNs = <T>(fn: () => Promise<T>) =>
          kind === "netlink" ? libc.inNetns(nsFd, home, fn) : fn();
        const fdb = async () =>
          (JSON.parse(
            await run("ip", "netns", "exec", ns.name, "bridge", "-j", "fdb", "show", "dev", "vx0"),
          ) as { mac: string; dst?: string; state?: string }[])
            .filter((e) => e.dst).map((e) => `${e.mac} ${e.dst} ${e.state ?? ""}`.trim()).sort();
        const neigh = async (dev = "vx0") =>
          (await ipIn(ns, "neigh", "show", "dev", dev)).split("\n").map((l) => l.trim()).filter(
            Boolean,
          ).sort();
        const apply = async (peers: { gateway: string; mac: string; ip: string }[]) => {
          const live = await inNs(() => entries.neighbours("vx0"));
          await inNs(() => entries.apply("vx0", peers, live));
        };
        try {
          await apply([
            { gateway: "10.244.2.0", mac: MAC_A, ip: "192.0.2.12" },
            { gateway: "10.244.3.0", mac: MAC_B, ip: "192.0.2.13" },
          ]);
          assertEquals(await neigh(), [
            `10.244.2.0 lladdr ${MAC_A} PERMANENT`,
            `10.244.3.0 lladdr ${MAC_B} PERMANENT`,
          ]);
          assertEquals(await fdb(), [
            `${MAC_A} 192.0.2.12 permanent`,
            `${MAC_B} 192.0.2.13 permanent`,
          ]);
          assertEquals(
            await inNs(() => entries.neighbours("vx0")),
            new Map([["10.244.2.0", MAC_A], ["10.244.3.0", MAC_B]]),
          );
          // Peer B moved to another underlay address; peer A is gone.
          await apply([{ gateway: "10.244.3.0", mac: MAC_B, ip: "192.0.2.23" }]);
          assertEquals(await neigh(), [`10.244.3.0 lladdr ${MAC_B} PERMANENT`]);
          assertEquals(await fdb(), [`${MAC_B} 192.0.2.23 permanent`]);
          // Applying the same again changes nothing.
          await apply([{ gateway: "10.244.3.0", mac: MAC_B, ip: "192.0.2.23" }]);
          assertEquals(await fdb(), [`${MAC_B} 192.0.2.23 permanent`]);
          // A peer whose underlay address the IPv4 device cannot carry is refused on its own.
          const bad = { gateway: "10.244.4.0", mac: MAC_A, ip: "2001:db8::14" };
          const live = await inNs(() => entries.neighbours("vx0"));
          const refused = await inNs(() =>
            entries.apply(
              "vx0",
              // Peer B with two ranges: two peers, one forwarding entry.
              [
                bad,
                { gateway: "10.244.3.0", mac: MAC_B, ip: "192.0.2.33" },
                { gateway: "10.244.5.0", mac: MAC_B, ip: "192.0.2.33" },
              ],
              live,
            )
          );
          assertEquals(refused.map((f) => f.peer), [bad]);
          assert(/family|errno 97/i.test(refused[0].reason), refused[0].reason);
          assertEquals(await fdb(), [`${MAC_B} 192.0.2.33 permanent`]);
          assert(
            (await neigh()).includes(`10.244.3.0 lladdr ${MAC_B} PERMANENT`),
            String(await neigh()),
          );
          await apply([]);
          assertEquals(await neigh(), []);
          assertEquals(await fdb(), []);
          assertEquals(await neigh("vx1"), [`10.9.9.9 lladdr ${MAC_A} PERMANENT`]);
        } finally {
          libc.close(nsFd);
          libc.close(home);
        }
      }),
  });
}
