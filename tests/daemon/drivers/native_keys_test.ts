// What a native driver acts on is what the NAD guard checked: every key Ferry's macvlan, ipvlan and
// bridge drivers (and the IPAM served in the daemon) read, written by a tenant in another case as
// Go's decoder reads it (`Master`, `maſter`, `MTU`, `IPAM`), goes from the NAD through the guard
// to the driver with the value the guard saw. The node and the kernel are fakes here;
// tests/integration/nad_key_spelling_test.ts plugs on a simulated node.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import type { TObject, TSchema } from "@sinclair/typebox";
import { nadPlugins } from "../../../daemon/multivif/drivers.ts";
import { guardNadPlugins, type NadGuard } from "../../../daemon/multivif/nad_guard.ts";
import { pluginDriver } from "../../../daemon/multivif/plugin_driver.ts";
import type { NodeLink } from "../../../daemon/multivif/node_links.ts";
import { SublinkDriver } from "../../../daemon/drivers/sublink.ts";
import { bridgeOf, NadBridgeDriver } from "../../../daemon/drivers/nad_bridge.ts";
import type { NativeNadIpam } from "../../../daemon/drivers/nad_native_ipam.ts";
import { IPAM_KEYS, NATIVE_KEYS, nativeSpelled } from "../../../daemon/drivers/native_keys.ts";
import { IpvlanConfSchema, MacvlanConfSchema } from "../../../daemon/drivers/sublink_schema.ts";
import { NadBridgeConfSchema } from "../../../daemon/drivers/nad_bridge_schema.ts";
import { parseWhereabouts } from "../../../daemon/ipam/nad_ipam.ts";
import type { BridgeSpec, Plumber, SublinkSpec, VethSpec } from "../../../daemon/net/plumber.ts";
import type { Spelling } from "../../../lib/cni/json_keys.ts";
import type { NetConf } from "../../../lib/cni/schemas.ts";
import { CniError } from "../../../lib/cni/errors.ts";

/** Records what a driver asks of the kernel. */
class FakePlumber implements Plumber {
  sublinks: SublinkSpec[] = [];
  bridges: BridgeSpec[] = [];
  veths: VethSpec[] = [];
  ensureBridge = (spec: BridgeSpec) => (this.bridges.push(spec), Promise.resolve());
  plugVeth = (spec: VethSpec) => (this.veths.push(spec), Promise.resolve());
  unplugVeth = () => Promise.resolve();
  securePort = () => Promise.resolve();
  plugSublink = (spec: SublinkSpec) => (this.sublinks.push(spec), Promise.resolve());
  unplugIn = () => Promise.resolve();
  inspect = () => Promise.resolve(null);
  /** The node's uplink: where a macvlan without a master would go. */
  defaultRouteInterface = () => Promise.resolve("eth0");
  bridgePorts = () => Promise.resolve([]);
  removeBridgeAddress = () => Promise.resolve();
}

/** IPAM served in the daemon for any type: records the config it was handed. */
function fakeIpam(seen: NetConf[]): NativeNadIpam {
  return {
    serves: (conf: NetConf) => conf.ipam?.type !== undefined,
    add: (call: { conf: NetConf }) => (seen.push(call.conf),
      Promise.resolve({
        cniVersion: "1.0.0",
        ips: [{ address: "192.168.60.5/24", gateway: "192.168.60.1" }],
      })),
  } as unknown as NativeNadIpam;
}

/** The node: eth0 its uplink (address, default route); eth3 and br-t with nothing on them. */
const LINKS: NodeLink[] = ["eth0", "eth3", "br-t"].map((name) => ({
  name,
  altnames: [],
  macs: [],
  addresses: name === "eth0" ? ["192.0.2.10"] : [],
}));

/** A guard that records the parent devices the macvlan check looked at. */
function guardSeeing(parents: string[]): NadGuard {
  return {
    allowedTypes: ["*"],
    devices: ["ferry0", "ferry.vxlan"],
    node: { protectedDevices: () => Promise.resolve([]), netdevsUnder: () => Promise.resolve([]) },
    ranges: () => ["10.244.1.0/24"],
    stateDir: "/var/lib/ferry",
    parents: {
      links: {
        links: () => Promise.resolve(LINKS),
        defaultRouteDevices: () => Promise.resolve([{ family: 4, dev: "eth0" }]),
        neighbourMacs: (dev) => (parents.push(dev), Promise.resolve([])),
      },
      ferryDevices: ["ferry0", "ferry.vxlan"],
      allow: { passthru: [], anyMac: [] },
      podMacs: () => [],
    },
  };
}

const nad = { namespace: "tenant", name: "spelled" };

/** A tenant's NAD config as an ADD reads it: its plugins, through the guard. */
async function guarded(
  config: Record<string, unknown>,
  parents: string[] = [],
  selection: Record<string, unknown> = {},
): Promise<NetConf[]> {
  const s = { namespace: "tenant", name: "spelled", ...selection };
  const plugins = nadPlugins(JSON.stringify(config), nad, s, "tenant/p");
  return await guardNadPlugins(plugins, guardSeeing(parents), nad, "tenant/p");
}

const ctx = (conf: NetConf) => ({
  key: { containerId: "c1", ifname: "net1" },
  netns: "/var/run/netns/p",
  conf,
  args: {},
  path: [],
});

Deno.test("a macvlan NAD's master, mode, MTU, IPAM and MAC capability in any case Go reads reach the driver as the guard saw them, never the uplink", async () => {
  for (
    const [master, mode, mtu, ipam, type, caps] of [
      ["Master", "Mode", "MTU", "IPAM", "Type", "Capabilities"],
      ["MASTER", "MODE", "Mtu", "\u0130PAM", "TYPE", "CAPABILITIES"],
      ["maſter", "mOde", "mtU", "ipAM", "tyPE", "capabilitieſ"],
    ]
  ) {
    const parents: string[] = [];
    const ipamSeen: NetConf[] = [];
    const plugins = await guarded(
      {
        type: "macvlan",
        [master]: "eth3",
        [mode]: "passthru",
        [mtu]: 1400,
        [ipam]: { [type]: "static", addresses: [{ address: "192.168.60.5/24" }] },
        [caps]: { mac: true },
      },
      parents,
      { mac: "02:00:00:00:60:05" },
    );
    assertEquals(pluginDriver(plugins[0], 0), "macvlan");
    const plumber = new FakePlumber();
    await new SublinkDriver("macvlan", plumber, 1000, undefined, fakeIpam(ipamSeen))
      .add(ctx(plugins[0]));
    const [spec] = plumber.sublinks;
    assertEquals(parents, ["eth3"], `${master}: the guard looked at eth3`);
    assertEquals(
      { master: spec.master, mode: spec.mode, mtu: spec.mtu, mac: spec.mac },
      { master: "eth3", mode: "passthru", mtu: 1400, mac: "02:00:00:00:60:05" },
      master,
    );
    assertEquals(ipamSeen[0].ipam?.type, "static", `${ipam}.${type}: the IPAM ran`);
  }
});

Deno.test("a macvlan NAD asking passthru on the uplink in another case is refused by the guard, as a Go plugin would get it", async () => {
  const e = await assertRejects(
    () => guarded({ type: "macvlan", MASTER: "eth0", Mode: "passthru" }),
    CniError,
  );
  assertEquals(e.code, 7);
  assert(e.message.includes("mode passthru gives the pod the traffic of eth0"), e.message);
});

Deno.test("an ipvlan NAD's master, mode and MTU in any case Go reads reach the driver", async () => {
  const plugins = await guarded({ type: "ipvlan", maſter: "eth3", MODE: "l3", Mtu: 1300 });
  assertEquals(pluginDriver(plugins[0], 0), "ipvlan");
  const plumber = new FakePlumber();
  await new SublinkDriver("ipvlan", plumber, 1000).add(ctx(plugins[0]));
  const [spec] = plumber.sublinks;
  assertEquals({ master: spec.master, mode: spec.mode, mtu: spec.mtu }, {
    master: "eth3",
    mode: "l3",
    mtu: 1300,
  });
});

Deno.test("a bridge NAD's bridge, gateway flags, MTU and IPAM in any case Go reads reach the driver; its bridge is the one the guard checked", async () => {
  const ipamSeen: NetConf[] = [];
  const plugins = await guarded({
    type: "bridge",
    BRİDGE: "br-t",
    ISGATEWAY: true,
    IsDefaultGateway: true,
    MTU: 1450,
    Ipam: { Type: "static", addresses: [{ address: "192.168.60.5/24" }] },
  });
  assertEquals(pluginDriver(plugins[0], 0), "nad-bridge");
  assertEquals(bridgeOf(plugins[0]), "br-t");
  const plumber = new FakePlumber();
  await new NadBridgeDriver(plumber, 1000, undefined, fakeIpam(ipamSeen)).add(ctx(plugins[0]));
  assertEquals(plumber.bridges, [{ name: "br-t", mtu: 1450, gateways: ["192.168.60.1/24"] }]);
  assertEquals(plumber.veths[0].bridge, "br-t");
  assertEquals(plumber.veths[0].mtu, 1450);
  assertEquals(plumber.veths[0].addresses, [{ cidr: "192.168.60.5/24", gateway: "192.168.60.1" }]);
  assertEquals(ipamSeen[0].ipam?.type, "static");
  // The guard reads the bridge folded too: Ferry's bridge by another spelling is refused.
  const e = await assertRejects(() => guarded({ type: "bridge", Bridge: "ferry0" }), CniError);
  assert(e.message.includes("its bridge ferry0 is a device of Ferry's own network"), e.message);
});

Deno.test("a bridge NAD with a setting the native driver lacks, in any case, goes to the reference plugin", async () => {
  for (
    const setting of [
      { VLAN: 5 },
      { IPMasq: true },
      { PromiscMode: true },
      { ipam: { type: "static", ROUTES: [{ dst: "0.0.0.0/0" }] } },
    ]
  ) {
    const plugins = await guarded({ type: "bridge", bridge: "br-t", ...setting });
    assertEquals(pluginDriver(plugins[0], 0), "delegate", JSON.stringify(setting));
  }
});

Deno.test("whereabouts keys in any case Go reads reach the IPAM served in the daemon as whereabouts reads them", async () => {
  const written = {
    TYPE: "whereabouts",
    Range: "192.168.70.0/24",
    RANGE_START: "192.168.70.10",
    Range_End: "192.168.70.20",
    Exclude: ["192.168.70.12/32"],
    Network_Name: "blue",
    Enable_Overlapping_Ranges: false,
    Gateway: "192.168.70.1",
    Routes: [{ Dst: "10.9.0.0/16", GW: "192.168.70.1" }],
    IPRanges: [{ RANGE: "fd00:70::/120", Range_Start: "fd00:70::10" }],
  };
  const canonical = {
    type: "whereabouts",
    range: "192.168.70.0/24",
    range_start: "192.168.70.10",
    range_end: "192.168.70.20",
    exclude: ["192.168.70.12/32"],
    network_name: "blue",
    enable_overlapping_ranges: false,
    gateway: "192.168.70.1",
    routes: [{ dst: "10.9.0.0/16", gw: "192.168.70.1" }],
    ipRanges: [{ range: "fd00:70::/120", range_start: "fd00:70::10" }],
  };
  const ipamSeen: NetConf[] = [];
  const plugins = await guarded({ type: "macvlan", master: "eth3", IPAM: written });
  await new SublinkDriver("macvlan", new FakePlumber(), 1000, undefined, fakeIpam(ipamSeen))
    .add(ctx(plugins[0]));
  assertEquals(ipamSeen[0].ipam, canonical);
  assertEquals(parseWhereabouts(ipamSeen[0].ipam, "n"), parseWhereabouts(canonical, "n"));
});

Deno.test("an operator's config (not a NAD) reaching a native driver is read the same way", async () => {
  const plumber = new FakePlumber();
  await new SublinkDriver("macvlan", plumber, 1000).add(
    ctx({ cniVersion: "1.0.0", name: "lan", type: "macvlan", Master: "eth3" } as NetConf),
  );
  assertEquals(plumber.sublinks[0].master, "eth3");
});

Deno.test("two keys a Go plugin reads as one are refused with code 7, by the NAD reader and by a driver", async () => {
  const e = await assertRejects(
    () => guarded({ type: "macvlan", master: "eth3", Master: "eth0" }),
    CniError,
  );
  assertEquals(e.code, 7);
  assert(e.message.includes('"master" and "Master"'), e.message);
  const d = await assertRejects(
    () =>
      new SublinkDriver("macvlan", new FakePlumber(), 1000).add(
        ctx(
          { cniVersion: "1.0.0", name: "lan", type: "macvlan", master: "a", MASTER: "b" } as never,
        ),
      ),
    CniError,
  );
  assertEquals(d.code, 7);
});

/** Every property of `schema`, as paths (`runtimeConfig.mac`). */
function schemaPaths(schema: TSchema, at = ""): string[] {
  const props = (schema as TObject).properties ?? {};
  return Object.entries(props).flatMap(([k, s]) => {
    const path = at ? `${at}.${k}` : k;
    return (s as TObject).properties ? [path, ...schemaPaths(s, path)] : [path];
  });
}

/** Every key `spelling` respells, as paths. */
function spellingPaths(spelling: Spelling, at = ""): string[] {
  return Object.entries(spelling).flatMap(([k, s]) => {
    const path = at ? `${at}.${k}` : k;
    return s ? [path, ...spellingPaths(s, path)] : [path];
  });
}

Deno.test("every setting the native drivers' schemas name is a key Ferry respells, spelled as the schema spells it", () => {
  const known = new Set(spellingPaths(NATIVE_KEYS));
  for (const schema of [MacvlanConfSchema, IpvlanConfSchema, NadBridgeConfSchema]) {
    for (const path of schemaPaths(schema)) assert(known.has(path), `${path} is respelled`);
  }
  assert(spellingPaths(IPAM_KEYS).every((p) => known.has(`ipam.${p}`)));
  // A config already spelled so is left as it is.
  const conf = { cniVersion: "1.0.0", name: "n", type: "macvlan", master: "eth3" } as NetConf;
  assertEquals(nativeSpelled(conf), conf);
});
