// What a tenant's macvlan may ask of its parent (daemon/multivif/parent_guard.ts), through the NAD
// guard as an ADD runs it: no mode that gives the pod the traffic of a link the node uses, no MAC
// that is someone else's; what an operator allows per device. The node is a fake here;
// node_links_test.ts reads a real one, nad_parent_guard_test.ts (integration) plugs on one.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { guardNadPlugins, type NadGuard } from "../../../daemon/multivif/nad_guard.ts";
import type { NodeLink, NodeLinks } from "../../../daemon/multivif/node_links.ts";
import {
  type ParentAllowances,
  podMacsOf,
  usedLinks,
} from "../../../daemon/multivif/parent_guard.ts";
import type { Attachment } from "../../../daemon/records/attachment_store.ts";
import type { NetConf } from "../../../lib/cni/schemas.ts";
import { CniError } from "../../../lib/cni/errors.ts";

const link = (name: string, more: Partial<NodeLink> = {}): NodeLink => ({
  name,
  altnames: [],
  macs: [],
  addresses: [],
  ...more,
});

/**
 * The node: eth0 its uplink (address, default route, an altname), the host macvlan mv-host on it;
 * eth1 a port of br-mgmt (which holds an address); eth2 the underlay of Ferry's VXLAN device; eth3
 * a spare NIC with nothing on it; the router 02:00:5e:00:01:01 in eth0's neighbour table.
 */
const LINKS: NodeLink[] = [
  link("lo", { macs: ["00:00:00:00:00:00"], addresses: ["127.0.0.1", "::1"] }),
  link("eth0", { altnames: ["enp0s3"], macs: ["52:54:00:12:34:56"], addresses: ["192.0.2.10"] }),
  link("mv-host", { macs: ["02:aa:00:00:00:01"], lower: "eth0" }),
  link("br-mgmt", { macs: ["02:aa:00:00:00:02"], addresses: ["198.51.100.2"] }),
  link("eth1", { macs: ["52:54:00:00:00:11"], master: "br-mgmt" }),
  link("eth2", { macs: ["52:54:00:00:00:22"] }),
  link("ferry.vxlan", { macs: ["02:aa:00:00:00:03"], lower: "eth2" }),
  link("ferry0", { macs: ["02:aa:00:00:00:04"], addresses: ["10.244.1.1"] }),
  link("eth3", { altnames: ["enp0s9"], macs: ["52:54:00:00:00:33"] }),
];
const ROUTER = "02:00:5e:00:01:01";
const links: NodeLinks = {
  links: () => Promise.resolve(LINKS),
  defaultRouteDevices: () => Promise.resolve([{ family: 4, dev: "eth0" }]),
  neighbourMacs: (dev) => Promise.resolve(dev === "eth0" ? [ROUTER] : []),
};
const OTHER_POD_MAC = "0a:58:0a:f4:01:07";

function guardWith(allow: Partial<ParentAllowances> = {}): NadGuard {
  return {
    allowedTypes: ["*"],
    devices: ["ferry0", "ferry.vxlan"],
    node: { protectedDevices: () => Promise.resolve([]), netdevsUnder: () => Promise.resolve([]) },
    ranges: () => ["10.244.1.0/24"],
    stateDir: "/var/lib/ferry",
    parents: {
      links,
      ferryDevices: ["ferry0", "ferry.vxlan"],
      allow: { passthru: [], anyMac: [], ...allow },
      podMacs: () => [
        { mac: OTHER_POD_MAC, pod: "tenant-a/web-0" },
        { mac: "0a:58:0a:f4:01:09", pod: "tenant/p" },
      ],
    },
  };
}

const run = (plugins: Record<string, unknown>[], g = guardWith()) =>
  guardNadPlugins(
    plugins.map((p) => ({ cniVersion: "1.0.0", name: "n", ...p }) as unknown as NetConf),
    g,
    { namespace: "tenant", name: "uplink" },
    "tenant/p",
  );
const refused = async (plugins: Record<string, unknown>[], g = guardWith()) => {
  const e = await assertRejects(() => run(plugins, g), CniError);
  assertEquals(e.code, 7, e.message);
  return e.message;
};
const allowed = async (plugins: Record<string, unknown>[], g = guardWith()) =>
  assertEquals((await run(plugins, g)).length, plugins.length);

Deno.test("the links the node uses: an address, a default route, Ferry's devices, and down the chain their lower devices and ports", () => {
  const used = usedLinks(LINKS, ["eth0"], ["ferry0", "ferry.vxlan"]);
  assertEquals(used.get("eth0"), "holds the node's address 192.0.2.10");
  assertEquals(used.get("br-mgmt"), "holds the node's address 198.51.100.2");
  assertEquals(
    used.get("eth1"),
    "is a port of br-mgmt, which holds the node's address 198.51.100.2",
  );
  assertEquals(
    used.get("eth2"),
    "is the lower device of ferry.vxlan, which is a device of Ferry's own network",
  );
  assertEquals(used.has("mv-host"), false, "a macvlan of the node without an address");
  assertEquals(used.has("eth3"), false, "a spare NIC");
  // Without an address a default route's device is used all the same, and what it is built on.
  const bare = usedLinks(
    [link("bond0", { lower: "eth5" }), link("eth5"), link("eth6", { master: "bond0" })],
    ["bond0"],
    [],
  );
  assertEquals([...bare.keys()].sort(), ["bond0", "eth5", "eth6"]);
});

Deno.test("macvlan passthru or source on a link the node uses is refused, code 7, naming the device and why", async () => {
  assertEquals(
    await refused([{ type: "macvlan", master: "eth0", mode: "passthru" }]),
    "pod tenant/p: NetworkAttachmentDefinition tenant/uplink refused: plugin 0 (macvlan): its " +
      "mode passthru gives the pod the traffic of eth0, which the node uses: eth0 holds the " +
      "node's address 192.0.2.10 (an operator allows it on eth0 with multiNetwork.passthruParents)",
  );
  await refused([{ type: "macvlan", master: "eth0", mode: "source" }]);
  // No master: the default route's device, the uplink itself.
  await refused([{ type: "macvlan", mode: "passthru" }]);
  // By an altname, in another case, through a port, a VXLAN underlay, a second plugin.
  await refused([{ type: "macvlan", master: "enp0s3", mode: "passthru" }]);
  await refused([{ type: "macvlan", master: "eth0", Mode: "PassThru" }]);
  assert((await refused([{ type: "macvlan", master: "eth1", mode: "passthru" }])).includes(
    "eth1 is a port of br-mgmt",
  ));
  await refused([{ type: "macvlan", master: "eth2", mode: "source" }]);
  await refused([{ type: "tuning" }, { type: "macvlan", master: "eth0", mode: "passthru" }]);
  // The other modes, and passthru on a NIC the node does not use, are a tenant's to use.
  for (const mode of ["bridge", "private", "vepa", undefined]) {
    await allowed([{ type: "macvlan", master: "eth0", ...(mode ? { mode } : {}) }]);
  }
  await allowed([{ type: "macvlan", master: "eth3", mode: "passthru" }]);
  await allowed([{ type: "ipvlan", master: "eth0", mode: "l2" }]);
});

Deno.test("an operator allows passthru and source on a device it lists, by name or altname, and only there", async () => {
  await allowed(
    [{ type: "macvlan", master: "eth0", mode: "passthru" }],
    guardWith({ passthru: ["eth0"] }),
  );
  await allowed(
    [{ type: "macvlan", master: "eth0", mode: "source" }],
    guardWith({ passthru: ["enp0s3"] }),
  );
  await refused(
    [{ type: "macvlan", master: "br-mgmt", mode: "passthru" }],
    guardWith({ passthru: ["eth0"] }),
  );
});

Deno.test("a MAC a tenant picks must be unicast and locally administered", async () => {
  const rc = (mac: string) => [{ type: "macvlan", master: "eth0", runtimeConfig: { mac } }];
  assert((await refused(rc("01:00:5e:00:00:01"))).includes("is a multicast MAC"));
  assert((await refused(rc("ff:ff:ff:ff:ff:ff"))).includes("is a multicast MAC"));
  assert((await refused(rc("00:16:3e:11:22:33"))).includes("is not locally administered"));
  assert((await refused(rc("00:00:00:00:00:00"))).includes("is not locally administered"));
  assert((await refused(rc("not-a-mac"))).includes("is not a MAC address"));
  await allowed(rc("02:42:ac:11:00:02"));
  await allowed(rc("0A-58-0A-F4-01-08"));
  // Every key a plugin takes a MAC by: the config's mac, cni-args, a tuning plugin after it.
  await refused([{ type: "macvlan", master: "eth0", mac: "00:16:3e:11:22:33" }]);
  await refused([{ type: "macvlan", master: "eth0", args: { cni: { mac: "01:00:00:00:00:01" } } }]);
  const msg = await refused([
    { type: "macvlan", master: "eth0" },
    { type: "tuning", mac: "00:16:3e:11:22:33" },
  ]);
  assert(msg.includes("plugin 1 (tuning): its mac 00:16:3e:11:22:33"), msg);
});

Deno.test("a MAC already on the parent's segment is refused: a node link's, a neighbour's, another pod's", async () => {
  const rc = (
    mac: string,
    master = "eth0",
  ) => [{ type: "macvlan", master, runtimeConfig: { mac } }];
  assert(
    (await refused(rc("02:aa:00:00:00:01"))).includes("is the MAC of the node's link mv-host"),
  );
  const router = await refused(rc(ROUTER));
  assert(router.includes("is in eth0's neighbour table: a host on its segment has it"), router);
  assert((await refused(rc(OTHER_POD_MAC))).includes("an interface of pod tenant-a/web-0"));
  // Through the default route's device when the NAD names no master.
  await refused([{ type: "macvlan", runtimeConfig: { mac: ROUTER } }]);
  // The pod's own interfaces (an earlier sandbox of it) are not another pod's.
  await allowed(rc("0a:58:0a:f4:01:09"));
  // eth3's neighbours are not eth0's.
  await allowed(rc(ROUTER, "eth3"));
});

Deno.test("an operator allows any unicast MAC on a device it lists, never a multicast one", async () => {
  const g = guardWith({ anyMac: ["enp0s3"] });
  const rc = (mac: string) => [{ type: "macvlan", master: "eth0", runtimeConfig: { mac } }];
  await allowed(rc("00:16:3e:11:22:33"), g);
  await allowed(rc(ROUTER), g);
  await refused(rc("01:00:5e:00:00:01"), g);
  await refused(
    [{ type: "macvlan", master: "eth3", runtimeConfig: { mac: "00:16:3e:01:02:03" } }],
    g,
  );
});

Deno.test("the pods' MACs are their attachments' sandbox interfaces, with their pods", () => {
  const record = (pod: string, interfaces: Record<string, string>[]) =>
    ({
      containerId: "c",
      ifname: "eth0",
      netns: "/n",
      network: "n",
      pod: { namespace: pod.split("/")[0], name: pod.split("/")[1] },
      result: { cniVersion: "1.0.0", interfaces },
      createdAt: "",
    }) as unknown as Attachment;
  assertEquals(
    podMacsOf([
      record("a/p", [{ name: "vethx", mac: "02:00:00:00:00:01" }, {
        name: "eth0",
        mac: "0A:58:00:00:00:02",
        sandbox: "/n",
      }]),
    ]),
    [{ mac: "0a:58:00:00:00:02", pod: "a/p" }],
  );
});
