// The node's links as the macvlan parent checks read them, from a real namespace playing the
// node: addresses (IPv6 link-local left out), lower devices (a macvlan's parent, a VXLAN device's
// underlay; never a veth's peer), masters, the default routes' devices, a parent's neighbours; and
// the links the node uses computed from them. Needs root.
import { assertEquals } from "deno-std/assert/mod.js";
import { SystemNodeLinks } from "../../../daemon/multivif/node_links.ts";
import { usedLinks } from "../../../daemon/multivif/parent_guard.ts";
import { SpawningIpRunner } from "../../../daemon/net/ip_runner.ts";
import { IS_ROOT, run, withNetns } from "../../../daemon/dev/netns.ts";

Deno.test({
  name:
    "the node's links are read with their addresses, lower devices, masters, default routes and neighbours; the used ones follow",
  ignore: !IS_ROOT,
  fn: () =>
    withNetns(1, async ([ns]) => {
      const ip = (...args: string[]) => run("ip", "-n", ns.name, ...args);
      // eth0 the uplink (an address, the default routes), its host macvlan, a VXLAN on eth2,
      // eth1 a port of br-mgmt (an address), eth3 a spare NIC with only an IPv6 link-local.
      for (const n of ["0", "1", "2", "3"]) {
        await ip("link", "add", `eth${n}`, "type", "veth", "peer", "name", `peer${n}`);
      }
      await ip("link", "add", "mv-host", "link", "eth0", "type", "macvlan", "mode", "bridge");
      await ip(
        "link",
        "add",
        "fyvx0",
        "type",
        "vxlan",
        "id",
        "42",
        "dstport",
        "4789",
        "dev",
        "eth2",
      );
      await ip("link", "add", "br-mgmt", "type", "bridge");
      await ip("link", "set", "eth1", "master", "br-mgmt");
      await ip("link", "property", "add", "dev", "eth0", "altname", "enp0s3");
      await ip("addr", "add", "192.0.2.10/24", "dev", "eth0");
      await ip("addr", "add", "2001:db8::10/64", "dev", "eth0", "nodad");
      await ip("addr", "add", "198.51.100.2/24", "dev", "br-mgmt");
      await ip("addr", "add", "fe80::33/64", "dev", "eth3", "nodad");
      for (const dev of ["lo", "eth0", "peer0", "eth3", "peer3", "br-mgmt"]) {
        await ip("link", "set", dev, "up");
      }
      await ip("route", "add", "default", "via", "192.0.2.1", "dev", "eth0");
      await ip("-6", "route", "add", "default", "via", "2001:db8::1", "dev", "eth0");
      await ip("neigh", "add", "192.0.2.1", "lladdr", "02:00:5e:00:01:01", "dev", "eth0");

      const links = new SystemNodeLinks(new SpawningIpRunner(), ns.path);
      const all = await links.links();
      const byName = Object.fromEntries(all.map((l) => [l.name, l]));
      const mac = JSON.parse(await ip("-j", "link", "show", "eth0"))[0].address;
      assertEquals(byName.eth0.altnames, ["enp0s3"]);
      assertEquals(byName.eth0.macs, [mac]);
      assertEquals(byName.eth0.addresses, ["192.0.2.10", "2001:db8::10"]);
      assertEquals(byName.eth0.lower, undefined, "a veth's peer is not its lower device");
      assertEquals(byName["mv-host"].lower, "eth0");
      assertEquals(byName.fyvx0.lower, "eth2");
      assertEquals(byName.eth1.master, "br-mgmt");
      assertEquals(byName.eth3.addresses, [], "an IPv6 link-local is no address of the node");
      assertEquals(await links.defaultRouteDevices(), [
        { family: 4, dev: "eth0" },
        { family: 6, dev: "eth0" },
      ]);
      assertEquals(await links.neighbourMacs("eth0"), ["02:00:5e:00:01:01"]);
      assertEquals(await links.neighbourMacs("nosuchdev0"), []);

      const used = usedLinks(all, ["eth0"], ["fyvx0"]);
      assertEquals([...used.keys()].sort(), ["br-mgmt", "eth0", "eth1", "eth2", "fyvx0", "lo"]);
    }),
});
