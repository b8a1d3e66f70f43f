// What a tenant's NetworkAttachmentDefinition may ask of the node: checked before any plugin runs.
import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { guardNadPlugins, type NadGuard } from "../../../daemon/multivif/nad_guard.ts";
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
  netdevsUnder: (dir) =>
    Promise.resolve(
      ({
        "/sys/devices/pci0000:00/0000:00:03.0": ["ferry.vxlan"],
        "/sys/bus/pci/devices/0000:00:03.0": ["ferry.vxlan"],
        "/sys/bus/auxiliary/devices/mlx5_core.sf.4": ["vethab12cd"],
        "/sys/bus/pci/devices/0000:00:04.0": ["eth1"],
      } as Record<string, string[]>)[dir] ?? [],
    ),
};
const guard: NadGuard = {
  allowedTypes: ["*"],
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

Deno.test("a NAD naming Ferry's bridge or VXLAN device as its bridge, master or device is refused, naming pod, NAD and device", async () => {
  assertEquals(
    await refused([{ type: "bridge", bridge: "ferry0", isGateway: true }]),
    "pod tenant/p: NetworkAttachmentDefinition tenant/evil refused: plugin 0 (bridge): its bridge " +
      "ferry0 is a device of Ferry's own network",
  );
  await refused([{ type: "macvlan", master: "ferry0" }]);
  await refused([{ type: "vlan", master: "ferry.vxlan" }]);
  await refused([{ type: "host-device", device: "ferry.vxlan" }]);
  // A second plugin of a chain is checked too.
  await refused([{ type: "macvlan", master: "eth0" }, { type: "bridge", bridge: "ferry0" }]);
  assertEquals((await run([{ type: "bridge", bridge: "br-tenant" }])).length, 1);
});

Deno.test("a NAD whose addresses overlap Ferry's pod ranges is refused, whichever IPAM names them", async () => {
  const cases: Record<string, unknown>[] = [
    {
      type: "bridge",
      bridge: "b1",
      ipam: { type: "host-local", ranges: [[{ subnet: "10.244.1.0/25" }]] },
    },
    { type: "bridge", bridge: "b1", ipam: { type: "host-local", subnet: "10.97.3.0/24" } },
    {
      type: "bridge",
      bridge: "b1",
      ipam: { type: "host-local", ranges: [[{ subnet: "10.0.0.0/8" }]] },
    },
    {
      type: "macvlan",
      master: "eth0",
      ipam: { type: "static", addresses: [{ address: "10.97.1.50/24" }] },
    },
    { type: "macvlan", master: "eth0", ipam: { type: "whereabouts", range: "fd00:10:244:1::/64" } },
    {
      type: "macvlan",
      master: "eth0",
      ipam: { type: "static" },
      runtimeConfig: { ips: ["10.244.1.7/24"] },
    },
  ];
  for (const c of cases) {
    const message = await refused([c]);
    assertEquals(message.includes("overlaps Ferry's pod range"), true, message);
  }
  assertEquals(
    (await run([{
      type: "macvlan",
      master: "eth0",
      ipam: { type: "host-local", ranges: [[{ subnet: "192.168.80.0/24" }]] },
    }]))
      .length,
    1,
  );
});

Deno.test("host-local keeps its files under Ferry's state directory: another dataDir is refused, none gets Ferry's", async () => {
  for (
    const dataDir of [
      "/etc",
      "/var/lib/ferry/../../../etc",
      "relative/dir",
      "/var/lib/ferry-other",
      7,
    ]
  ) {
    const message = await refused([{
      type: "bridge",
      bridge: "b1",
      ipam: { type: "host-local", dataDir },
    }]);
    assertEquals(
      message.includes("is outside Ferry's state directory /var/lib/ferry"),
      true,
      message,
    );
  }
  const [kept] = await run([
    {
      type: "bridge",
      bridge: "b1",
      ipam: { type: "host-local", dataDir: "/var/lib/ferry/nads/x" },
    },
  ]);
  assertEquals((kept.ipam as Record<string, unknown>).dataDir, "/var/lib/ferry/nads/x");
  const [given] = await run([
    {
      type: "bridge",
      bridge: "b1",
      ipam: { type: "host-local", ranges: [[{ subnet: "192.168.1.0/24" }]] },
    },
  ]);
  assertEquals((given.ipam as Record<string, unknown>).dataDir, "/var/lib/ferry/host-local");
});

Deno.test("multiNetwork.allowedTypes restricts plugin and IPAM types; * allows all", async () => {
  const narrow = { ...guard, allowedTypes: ["macvlan", "static", "tuning"] };
  assertEquals(
    (await run(
      [{ type: "macvlan", master: "eth0", ipam: { type: "static" } }, { type: "tuning" }],
      narrow,
    ))
      .length,
    2,
  );
  assertEquals(
    (await refused([{ type: "host-device", device: "eth1" }], narrow)).endsWith(
      "plugin type host-device is not allowed (multiNetwork.allowedTypes: macvlan, static, tuning)",
    ),
    true,
  );
  assertEquals(
    (await refused([{ type: "macvlan", master: "eth0", ipam: { type: "host-local" } }], narrow))
      .includes("IPAM type host-local is not allowed"),
    true,
  );
  assertEquals(
    (await refused([{ type: "macvlan" }], { ...guard, allowedTypes: [] })).includes("none"),
    true,
  );
});

/** A static NAD plugin with `ipam` (and whatever else `extra` adds). */
const staticNad = (ipam: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  type: "bridge",
  bridge: "br-tenant",
  ipam: { type: "static", ...ipam },
  ...extra,
});

Deno.test("an address of Ferry's pod range is refused in every key and every spelling a plugin reads: selection cni-args and ips, IPv4-mapped, compressed, host bits, ranges, gateways, any key case", async () => {
  const cases: [string, Record<string, unknown>][] = [
    // Issue #42 item 3: the selection's cni-args (args.cni.ips) and an IPv4-mapped address.
    ["args.cni.ips[0] 10.244.1.2/24", staticNad({}, { args: { cni: { ips: ["10.244.1.2/24"] } } })],
    [
      "ipam.addresses[0].address ::ffff:10.244.1.2/120",
      staticNad({ addresses: [{ address: "::ffff:10.244.1.2/120" }] }),
    ],
    [
      "ipam.addresses[0].address ::ffff:af4:102/120", // the same, in hex
      staticNad({ addresses: [{ address: "::ffff:af4:102/120" }] }),
    ],
    [
      "ipam.addresses[0].address 0:0:0:0:0:ffff:0a61:0001/112",
      staticNad({ addresses: [{ address: "0:0:0:0:0:ffff:0a61:0001/112" }] }),
    ],
    ["ipam.addresses[0].address ::/0", staticNad({ addresses: [{ address: "::/0" }] })],
    [
      "runtimeconfig.ips[0] ::ffff:10.244.1.9",
      staticNad({}, { runtimeConfig: { ips: ["::ffff:10.244.1.9"] } }),
    ],
    [
      "ipam.addresses[0].address fd00:10:244:0:0::7/64",
      staticNad({ addresses: [{ address: "fd00:10:244:0:0::7/64" }] }),
    ],
    [
      "ipam.addresses[0].gateway 10.244.1.1",
      staticNad({ addresses: [{ address: "192.168.5.2/24", gateway: "10.244.1.1" }] }),
    ],
    [
      "ipam.routes[0].gw 10.97.0.1",
      staticNad({ routes: [{ dst: "0.0.0.0/0", gw: "10.97.0.1" }] }),
    ],
    [
      "ipam.ranges[0][0].gateway 10.244.1.1",
      {
        type: "bridge",
        bridge: "b1",
        isGateway: true,
        ipam: {
          type: "host-local",
          ranges: [[{ subnet: "192.168.6.0/24", gateway: "10.244.1.1" }]],
        },
      },
    ],
    [
      "ipam.rangestart 10.97.0.10",
      { type: "bridge", bridge: "b1", ipam: { type: "host-local", rangeStart: "10.97.0.10" } },
    ],
    [
      "ipam.range 10.244.1.200-10.244.2.10",
      {
        type: "macvlan",
        master: "eth0",
        ipam: { type: "whereabouts", range: "10.244.1.200-10.244.2.10" },
      },
    ],
    [
      "ipam.range_start 10.97.3.3",
      { type: "macvlan", master: "eth0", ipam: { type: "whereabouts", range_start: "10.97.3.3" } },
    ],
    // Issue #42 item 5: whereabouts ipRanges.
    [
      "ipam.ipranges[1].range 10.0.0.0/8",
      {
        type: "macvlan",
        master: "eth0",
        ipam: {
          type: "whereabouts",
          ipRanges: [{ range: "192.168.7.0/24" }, { range: "10.0.0.0/8", exclude: ["10.0.0.0/9"] }],
        },
      },
    ],
    // Go's encoding/json reads keys in any case (ſ is s, K is k).
    ["ipam.subnet 10.244.1.0/26", {
      type: "bridge",
      bridge: "b1",
      IPAM: { type: "host-local", "ſubnet": "10.244.1.0/26" },
    }],
    [
      "ipam.addresses[0].address 10.97.1.1/16",
      staticNad({ Addresses: [{ ADDRESS: "10.97.1.1/16" }] }),
    ],
  ];
  for (const [named, plugin] of cases) {
    const message = await refused([plugin]);
    assertEquals(
      message.includes(`its ${named} overlaps Ferry's pod range`),
      true,
      `${named}: ${message}`,
    );
  }
  // Outside Ferry's ranges, every spelling is left to the plugin.
  const fine = [
    staticNad({
      addresses: [{ address: "::ffff:192.168.9.2/120", gateway: "::ffff:192.168.9.1" }],
    }),
    staticNad({ routes: [{ dst: "10.244.0.0/16", gw: "192.168.9.1" }] }, {
      args: { cni: { ips: ["192.168.9.3/24"] } },
    }),
    {
      type: "macvlan",
      master: "eth0",
      ipam: { type: "whereabouts", range: "192.168.9.0/24", exclude: ["10.244.1.0/24"] },
    },
    staticNad({ addresses: [{ address: "fd00:99::5/64" }] }),
  ];
  assertEquals((await run(fine)).length, fine.length);
});

Deno.test("a value in an address key that is not an address or range is refused with code 7 naming the key", async () => {
  const cases: [string, Record<string, unknown>][] = [
    [
      'ipam.addresses[0].address "10.244.1.2/33"',
      staticNad({ addresses: [{ address: "10.244.1.2/33" }] }),
    ],
    ['args.cni.ips[0] "ten.0.0.1"', staticNad({}, { args: { cni: { ips: ["ten.0.0.1"] } } })],
    ['args.cni.ips "10.244.1.2/24"', staticNad({}, { args: { cni: { ips: "10.244.1.2/24" } } })],
    ["ipam.subnet 7", { type: "bridge", bridge: "b1", ipam: { type: "host-local", subnet: 7 } }],
    [
      'ipam.range "10.0.0.9-10.0.0.1"',
      {
        type: "macvlan",
        master: "eth0",
        ipam: { type: "whereabouts", range: "10.0.0.9-10.0.0.1" },
      },
    ],
    ['ipam.exclude[0] "x"', {
      type: "macvlan",
      master: "eth0",
      ipam: { type: "whereabouts", range: "192.168.2.0/24", exclude: ["x"] },
    }],
  ];
  for (const [named, plugin] of cases) {
    const message = await refused([plugin]);
    assertEquals(
      message.includes(`its ${named} is not an address or range`),
      true,
      `${named}: ${message}`,
    );
  }
});

Deno.test("a plugin naming Ferry's devices by altname, MAC, kernel path, PCI address or device ID is refused; so is a port of Ferry's bridge", async () => {
  const cases: [string, Record<string, unknown>][] = [
    [
      "its master ferry-bridge is an altname of ferry0, a device of Ferry's own network",
      { type: "macvlan", master: "ferry-bridge" },
    ],
    [
      "its bridge ferry-bridge is an altname of ferry0",
      { type: "bridge", bridge: "ferry-bridge" },
    ],
    ["its device vethab12cd is a device of Ferry's own network", {
      type: "host-device",
      device: "vethab12cd",
    }],
    // Issue #42 item 5: hwaddr, in each form Go's net.ParseMAC reads.
    [
      "its hwaddr 02:FE:00:00:00:02 is the MAC of ferry.vxlan",
      { type: "host-device", hwaddr: "02:FE:00:00:00:02" },
    ],
    ["its hwaddr 02-fe-00-00-00-01 is the MAC of ferry0", {
      type: "host-device",
      hwaddr: "02-fe-00-00-00-01",
    }],
    ["its hwaddr 02fe.0000.0003 is the MAC of vethab12cd", {
      type: "host-device",
      hwaddr: "02fe.0000.0003",
    }],
    [
      "its kernelpath /sys/devices/pci0000:00/./0000:00:03.0 is the device ferry.vxlan",
      { type: "host-device", kernelpath: "/sys/devices/pci0000:00/./0000:00:03.0" },
    ],
    [
      "its pciBusID 0000:00:03.0 is the device ferry.vxlan",
      { type: "host-device", pciBusID: "0000:00:03.0" },
    ],
    [
      "its pciBusID ../devices/0000:00:03.0 is the device ferry.vxlan",
      { type: "host-device", PCIBUSID: "../devices/0000:00:03.0" },
    ],
    [
      "its runtimeConfig.deviceID mlx5_core.sf.4 is the device vethab12cd",
      { type: "host-device", runtimeConfig: { deviceID: "mlx5_core.sf.4" } },
    ],
    ['its hwaddr "02:fe" is not a MAC address', { type: "host-device", hwaddr: "02:fe" }],
    ["its master ferry0 is a device of Ferry", { type: "macvlan", Master: "ferry0" }],
    [
      'its keys "master" and "MASTER" (master) are one key to a Go plugin',
      { type: "macvlan", master: "eth0", MASTER: "ferry0" },
    ],
  ];
  for (const [why, plugin] of cases) {
    const message = await refused([plugin]);
    assertEquals(message.includes(why), true, `${why}: ${message}`);
  }
  const fine = [
    { type: "host-device", device: "eth1" },
    { type: "host-device", pciBusID: "0000:00:04.0" },
    { type: "host-device", hwaddr: "02:fe:00:00:00:99" },
  ];
  assertEquals((await run(fine)).length, fine.length);
});

Deno.test("a bridge NAD naming no bridge joins cni0: refused where cni0 is Ferry's bridge", async () => {
  const cni0 = { ...guard, devices: ["cni0", "ferry.vxlan"] };
  assertEquals(
    (await refused([{ type: "bridge", ipam: { type: "static" } }], cni0))
      .endsWith("its bridge cni0 is a device of Ferry's own network"),
    true,
  );
  assertEquals((await run([{ type: "bridge" }])).length, 1);
});

Deno.test("whereabouts ranges in every form are held to Ferry's pod ranges: start-end, ipRanges, IPv4-mapped", async () => {
  const wa = (ipam: Record<string, unknown>) => [
    { type: "macvlan", master: "eth0", ipam: { type: "whereabouts", ...ipam } },
  ];
  const cases = [
    { range: "10.244.1.5-10.244.1.9/24" },
    { range: "192.168.7.0/24", ipRanges: [{ range: "10.97.3.0/24" }] },
    { ipRanges: [{ range: "192.168.7.0/24" }, { range: "fd00:10:244:5::/64" }] },
    { range: "::ffff:10.244.1.0/120" },
    { ipRanges: [{ range: "10.244.1.1-::ffff:10.244.1.9/120" }] },
  ];
  for (const ipam of cases) {
    const msg = await refused(wa(ipam));
    assertEquals(
      msg.includes("overlaps Ferry's pod range"),
      true,
      `${JSON.stringify(ipam)}: ${msg}`,
    );
  }
  assertEquals(
    (await run(wa({ range: "192.168.7.5-192.168.7.9/24", ipRanges: [{ range: "fd00:99::/64" }] })))
      .length,
    1,
  );
});

Deno.test("a NAD whose addresses overlap an IPPool for networks is refused naming the pool, whichever IPAM names them, but Ferry's own type naming it", async () => {
  const pools = () =>
    Promise.resolve([{ name: "telco", cidrs: ["192.168.50.0/28", "fd00:50::/120"] }]);
  const g: NadGuard = { ...guard, networkPools: pools };
  const cases: Record<string, unknown>[] = [
    {
      type: "macvlan",
      master: "eth0",
      ipam: { type: "host-local", ranges: [[{ subnet: "192.168.50.0/24" }]] },
    },
    {
      type: "macvlan",
      master: "eth0",
      ipam: { type: "static", addresses: [{ address: "::ffff:192.168.50.3/128" }] },
    },
    { type: "macvlan", master: "eth0", ipam: { type: "whereabouts", range: "fd00:50::/64" } },
    {
      type: "macvlan",
      master: "eth0",
      ipam: { type: "static" },
      runtimeConfig: { ips: ["192.168.50.7/24"] },
    },
    // A type Ferry does not serve (the binary would be exec'ed), spelt like its own.
    { type: "macvlan", master: "eth0", ipam: { type: "Ferry", range: "192.168.50.0/28" } },
  ];
  for (const c of cases) {
    const message = await refused([c], g);
    assertEquals(
      message.includes("overlaps IPPool telco"),
      true,
      `${JSON.stringify(c)}: ${message}`,
    );
  }
  // Ferry's own type checks its addresses itself (a pod's ips against the pool it names).
  const own = {
    type: "macvlan",
    master: "eth0",
    ipam: { type: "ferry", pool: "telco" },
    runtimeConfig: { ips: ["192.168.50.7/28"] },
  };
  assertEquals((await run([own], g)).length, 1);
  const beside = {
    type: "macvlan",
    master: "eth0",
    ipam: { type: "host-local", ranges: [[{ subnet: "192.168.50.16/28" }]] },
  };
  assertEquals((await run([beside], g)).length, 1, "a range beside the pool");
  // Pools that cannot be read: code 11 from the reader, passed on as it is.
  const failing: NadGuard = {
    ...guard,
    networkPools: () => Promise.reject(new CniError(11, "cannot read the IPPools")),
  };
  const e = await assertRejects(() => run([cases[0]], failing), CniError);
  assertEquals(e.code, 11, e.message);
});
