// Issue #42 probe: what got past the first fixes (an independent attacker's findings), as
// regression tests; each asserted the secure behaviour and failed before its fix. The item number
// of issue #42 is in each test's name.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import {
  guardNadPlugins,
  type NadGuard,
  resultRefusal,
  validDeviceName,
} from "../../../daemon/multivif/nad_guard.ts";
import { nadPlugins, type RequestedAttachment } from "../../../daemon/multivif/drivers.ts";
import { plugChain } from "../../../daemon/multivif/chain.ts";
import type { Driver } from "../../../daemon/drivers/driver.ts";
import type { CniRequest } from "../../../lib/envelope.ts";
import type { NodeDevices } from "../../../daemon/multivif/node_devices.ts";
import type { NetConf } from "../../../lib/cni/schemas.ts";
import { CniError } from "../../../lib/cni/errors.ts";

/** The node as the guard sees it: Ferry's bridge (with an altname), VXLAN device, a pod's veth. */
const node: NodeDevices = {
  protectedDevices: () =>
    Promise.resolve([
      { name: "ferry0", altnames: ["ferry-bridge"], mac: "02:fe:00:00:00:01" },
      { name: "ferry.vxlan", altnames: [], mac: "02:fe:00:00:00:02" },
      { name: "vethab12cd", altnames: [], mac: "02:fe:00:00:00:03" },
    ]),
  netdevsUnder: () => Promise.resolve([]),
};
const guard: NadGuard = {
  allowedTypes: ["*"], // the default of multiNetwork.allowedTypes
  devices: ["ferry0", "ferry.vxlan"],
  node,
  ranges: () => ["10.244.1.0/24", "10.97.0.0/16", "fd00:10:244::/56"],
  stateDir: "/var/lib/ferry",
};
const nad = { namespace: "tenant", name: "evil" };
const run = (plugins: Record<string, unknown>[], g: NadGuard = guard) =>
  guardNadPlugins(
    plugins.map((p) => ({ cniVersion: "1.0.0", name: "n", ...p }) as unknown as NetConf),
    g,
    nad,
    "tenant/p",
  );
const refused = async (plugins: Record<string, unknown>[], g: NadGuard = guard) => {
  const e = await assertRejects(() => run(plugins, g), CniError);
  assertEquals(e.code, 7, e.message);
  return e.message;
};

// ---------------------------------------------------------------------------------------------
// Item 5: device keys.
// ---------------------------------------------------------------------------------------------

Deno.test("issue #42 item 5: a device name with a NUL after a protected name is refused (the kernel reads it up to the NUL)", async () => {
  // Go's netlink sends IFLA_IFNAME as the whole Go string plus a NUL; the kernel's nla_strscpy
  // copies it into a C string and __dev_get_by_name stops at the first NUL: "ferry0\0x" IS ferry0
  // (checked on this machine with a raw RTM_GETLINK: "lo\0x" answers ifindex 1). The guard compares
  // the whole string with `===` and lets it through. These types all run as the delegated Go
  // reference plugin (`vlan`, `host-device`, `bridge` with a delegated setting such as `ipMasq`):
  await refused([{ type: "vlan", master: "ferry0\u0000" }]);
  await refused([{ type: "vlan", master: "ferry.vxlan\u0000x" }]);
  await refused([{ type: "host-device", device: "vethab12cd\u0000" }]);
  await refused([{ type: "bridge", bridge: "ferry0\u0000", ipMasq: true }]);
  // The same through an altname (the kernel's lookup by name also matches altnames).
  await refused([{ type: "vlan", master: "ferry-bridge\u0000" }]);
  // A second plugin of a chain (delegated whatever its type) too.
  await refused([{ type: "bridge", bridge: "br-tenant" }, {
    type: "macvlan",
    master: "ferry0\u0000",
  }]);
});

// ---------------------------------------------------------------------------------------------
// Item 3: addresses a NAD may take.
// ---------------------------------------------------------------------------------------------

Deno.test("issue #42 item 3: a NAD's own runtimeConfig (host-local's ipRanges) never reaches a plugin, and the guard refuses ranges there", async () => {
  // host-local prepends `runtimeConfig.ipRanges` (the `ipRanges` capability, read from the config
  // whatever libcni did) to `ipam.ranges`. The runtimeConfig is the runtime's to give: nadPlugins
  // drops a NAD's own (and its prevResult), in any case, and keeps only what the selection gives
  // for the capabilities a plugin declares.
  const text = JSON.stringify({
    cniVersion: "1.0.0",
    type: "bridge",
    bridge: "br-tenant",
    ipMasq: true, // delegated: the reference bridge plugin runs host-local itself
    ipam: { type: "host-local", ranges: [[{ subnet: "192.168.50.0/24" }]] },
    runtimeConfig: { ipRanges: [[{ subnet: "10.244.1.0/24", rangeStart: "10.244.1.7" }]] },
    RuntimeConfig: { portMappings: [{ hostPort: 22, containerPort: 22, protocol: "tcp" }] },
    prevResult: { ips: [{ address: "10.244.1.9/24" }] },
    capabilities: { ips: true },
  });
  const plugins = nadPlugins(text, nad, {
    namespace: "tenant",
    name: "evil",
    ips: ["192.168.50.9/24"],
  }, "tenant/p");
  const handed = plugins[0] as unknown as Record<string, unknown>;
  assertEquals(handed.runtimeConfig, { ips: ["192.168.50.9/24"] }, "only the selection's ips");
  assertEquals(
    Object.keys(handed).filter((k) => /^(runtimeconfig|prevresult)$/i.test(k)),
    ["runtimeConfig"],
    "no second spelling of runtimeConfig, no prevResult",
  );
  assertEquals((await guardNadPlugins(plugins, guard, nad, "tenant/p")).length, 1);
  // The guard itself reads host-local's ipRanges too, in any case (a plugin config from
  // elsewhere than nadPlugins).
  await refused([{
    type: "macvlan",
    master: "eth0",
    ipam: { type: "host-local", ranges: [[{ subnet: "192.168.50.0/24" }]] },
    RuntimeConfig: { IPRanges: [[{ Subnet: "10.97.0.0/16" }]] },
  }]);
});

Deno.test("issue #42 item 3: an address an IPAM decides only at ADD (dhcp) in Ferry's pod range is undone, code 7", async () => {
  // With the default allowedTypes ["*"], `ipam: {type: "dhcp"}` passes the guard (nothing to read
  // before ADD); a DHCP server on the tenant's own network can then hand out any address of
  // Ferry's pod ranges. The chain's result is checked after ADD: such an attachment is undone
  // (every plugin that ran gets its DEL) and the ADD fails with code 7 naming the address.
  const plugins = await run([{ type: "macvlan", master: "eth0", ipam: { type: "dhcp" } }]);
  const attachment: RequestedAttachment = {
    network: "tenant/evil",
    ifname: "net1",
    plugins,
    checkResult: (result) => resultRefusal(result, guard.ranges),
  };
  for (
    const leased of [
      { ips: [{ address: "10.244.1.2/24" }] },
      { ips: [{ address: "192.168.50.2/24", gateway: "10.244.1.1" }] },
      { ips: [{ address: "192.168.50.2/24" }], routes: [{ dst: "0.0.0.0/0", gw: "10.97.3.3" }] },
      { ip4: { ip: "::ffff:10.244.1.2/120" } },
    ]
  ) {
    const calls: string[] = [];
    const driver = {
      add:
        () => (calls.push("add"), Promise.resolve({ result: { cniVersion: "1.0.0", ...leased } })),
      del: () => (calls.push("del"), Promise.resolve()),
      check: () => Promise.resolve(),
    } as unknown as Driver;
    const drivers = { macvlan: driver, ipvlan: driver, delegate: driver, "nad-bridge": driver };
    const e = await assertRejects(
      () =>
        plugChain(
          drivers,
          { containerId: "c1", ifname: "net1" },
          { netns: "/x", parent: "eth0" },
          attachment,
          {
            command: "ADD",
            args: {},
            path: "/opt/cni/bin",
          } as unknown as CniRequest,
          "tenant/p",
        ),
      CniError,
    );
    assertEquals(e.code, 7, e.message);
    assert(e.message.includes("overlaps Ferry's pod range"), e.message);
    assertEquals(calls, ["add", "del"], `undone: ${JSON.stringify(leased)}`);
  }
  // An address outside Ferry's ranges stands.
  assertEquals(resultRefusal({ ips: [{ address: "192.168.50.2/24" }] }, guard.ranges), undefined);
});

Deno.test("issue #42 item 5: device names the kernel would not take whole are not device names", () => {
  for (const ok of ["eth0", "ferry.vxlan", "br-tenant", "a".repeat(127), "enp0s31f6"]) {
    assert(validDeviceName(ok), ok);
  }
  for (const bad of ["", "ferry0\u0000", "a b", "a/b", "a:b", ".", "..", "a".repeat(128), "x\n"]) {
    assert(!validDeviceName(bad), JSON.stringify(bad));
  }
});
