// Issue #42 probe: what still gets past the fixes, as regression tests. Each test asserts the
// secure behaviour and FAILS on the code as it stands (branch `attack`, from main 56a9aa4); the
// item number of issue #42 is in each test's name.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { guardNadPlugins, type NadGuard } from "../../../daemon/multivif/nad_guard.ts";
import { nadPlugins } from "../../../daemon/multivif/drivers.ts";
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

Deno.test("issue #42 item 3: host-local's runtimeConfig.ipRanges inside Ferry's pod range is refused", async () => {
  // host-local prepends `runtimeConfig.ipRanges` (the `ipRanges` capability, read from the config
  // whatever libcni did) to `ipam.ranges`; nad_addresses.ts never reads that key, and nadPlugins
  // passes a NAD's own `runtimeConfig` through to the plugin untouched.
  const text = JSON.stringify({
    cniVersion: "1.0.0",
    type: "bridge",
    bridge: "br-tenant",
    ipMasq: true, // delegated: the reference bridge plugin runs host-local itself
    ipam: { type: "host-local", ranges: [[{ subnet: "192.168.50.0/24" }]] },
    runtimeConfig: { ipRanges: [[{ subnet: "10.244.1.0/24", rangeStart: "10.244.1.7" }]] },
  });
  const plugins = nadPlugins(text, nad, { namespace: "tenant", name: "evil" }, "tenant/p");
  // What the plugin will be handed still carries the range:
  assertEquals(
    (plugins[0] as unknown as { runtimeConfig: { ipRanges: unknown } }).runtimeConfig.ipRanges,
    [[{ subnet: "10.244.1.0/24", rangeStart: "10.244.1.7" }]],
  );
  const e = await assertRejects(() => guardNadPlugins(plugins, guard, nad, "tenant/p"), CniError);
  assertEquals(e.code, 7);
  // Also with the key spelled as Go finds it in any case.
  await refused([{
    type: "macvlan",
    master: "eth0",
    ipam: { type: "host-local", ranges: [[{ subnet: "192.168.50.0/24" }]] },
    RuntimeConfig: { IPRanges: [[{ Subnet: "10.97.0.0/16" }]] },
  }]);
});

Deno.test("issue #42 item 3: an IPAM whose addresses cannot be checked before ADD (dhcp) is not let through unchecked", async () => {
  // With the default allowedTypes ["*"], `ipam: {type: "dhcp"}` is accepted; the address comes from
  // a DHCP server on the tenant's own network (e.g. a pod of the tenant on the same macvlan), so it
  // can be any address of Ferry's pod ranges, and nothing checks the plugin's result after ADD
  // (the guard runs before; no overlap check on `result.ips`). With the delegated bridge plugin
  // and `isGateway: true`, the DHCP-given gateway (say 10.244.1.1/24) even goes on the tenant's
  // bridge in the node's namespace, a second connected route for Ferry's range. Secure behaviour: refuse an IPAM
  // type the guard cannot read addresses from, or check the result's addresses after ADD (then
  // move this test to the ADD path).
  const message = await refused([{ type: "macvlan", master: "eth0", ipam: { type: "dhcp" } }]);
  assert(message.includes("dhcp"), message);
});
