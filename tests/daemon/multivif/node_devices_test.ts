// The devices the NAD guard protects, read from a real namespace: Ferry's bridge and VXLAN device
// with their altnames and MACs, and every port of the bridge (a pod's host veth). Needs root.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { SystemNodeDevices } from "../../../daemon/multivif/node_devices.ts";
import { SpawningIpRunner } from "../../../daemon/net/ip_runner.ts";
import { IS_ROOT, run, withNetns } from "../../../daemon/dev/netns.ts";

Deno.test({
  name:
    "the protected devices are Ferry's bridge and VXLAN device and the bridge's ports, each with its altnames and MAC; nothing else",
  ignore: !IS_ROOT,
  fn: () =>
    withNetns(1, async ([ns]) => {
      const ip = (...args: string[]) => run("ip", "-n", ns.name, ...args);
      await ip("link", "add", "fyb0", "type", "bridge");
      await ip("link", "property", "add", "dev", "fyb0", "altname", "fyb-bridge-alt");
      await ip("link", "add", "fyx0", "type", "vxlan", "id", "42", "dstport", "4789");
      await ip("link", "add", "fyvh0", "type", "veth", "peer", "name", "fyvp0");
      await ip("link", "set", "fyvh0", "master", "fyb0");
      await ip("link", "add", "fyother0", "type", "bridge");
      const macs = Object.fromEntries(
        (JSON.parse(await ip("-j", "link", "show")) as { ifname: string; address: string }[])
          .map((l) => [l.ifname, l.address]),
      );
      const devices = new SystemNodeDevices(
        new SpawningIpRunner(),
        ["fyb0", "fyx0"],
        "fyb0",
        ns.path,
      );
      const found = (await devices.protectedDevices()).sort((a, b) => a.name.localeCompare(b.name));
      assertEquals(found, [
        { name: "fyb0", altnames: ["fyb-bridge-alt"], mac: macs.fyb0 },
        { name: "fyvh0", altnames: [], mac: macs.fyvh0 },
        { name: "fyx0", altnames: [], mac: macs.fyx0 },
      ]);
      assert(found.every((d) => /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/.test(d.mac ?? "")), "MACs read");
    }),
});

Deno.test("a sysfs device directory's interfaces are the names under its net/; none when it has none", async () => {
  const dir = await Deno.makeTempDir({ prefix: "ferry-sysfs-" });
  try {
    await Deno.mkdir(`${dir}/0000:00:03.0/net/ens3`, { recursive: true });
    await Deno.mkdir(`${dir}/0000:00:04.0`, { recursive: true });
    const devices = new SystemNodeDevices(new SpawningIpRunner(), [], "fyb0");
    assertEquals(await devices.netdevsUnder(`${dir}/0000:00:03.0`), ["ens3"]);
    assertEquals(await devices.netdevsUnder(`${dir}/0000:00:04.0`), []);
    assertEquals(await devices.netdevsUnder(`${dir}/missing`), []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
