// What a tenant's NetworkAttachmentDefinition may ask of the node: checked before any plugin runs.
import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import { guardNadPlugins, type NadGuard } from "../../../daemon/multivif/nad_guard.ts";
import type { NetConf } from "../../../lib/cni/schemas.ts";
import { CniError } from "../../../lib/cni/errors.ts";

const guard: NadGuard = {
  allowedTypes: ["*"],
  devices: ["ferry0", "ferry.vxlan"],
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
const refused = (plugins: Record<string, unknown>[], g: NadGuard = guard) => {
  const e = assertThrows(() => run(plugins, g), CniError);
  assertEquals(e.code, 7, e.message);
  return e.message;
};

Deno.test("a NAD naming Ferry's bridge or VXLAN device as its bridge, master or device is refused, naming pod, NAD and device", () => {
  assertEquals(
    refused([{ type: "bridge", bridge: "ferry0", isGateway: true }]),
    "pod tenant/p: NetworkAttachmentDefinition tenant/evil refused: plugin 0 (bridge): its bridge " +
      "ferry0 is a device of Ferry's own network",
  );
  refused([{ type: "macvlan", master: "ferry0" }]);
  refused([{ type: "vlan", master: "ferry.vxlan" }]);
  refused([{ type: "host-device", device: "ferry.vxlan" }]);
  // A second plugin of a chain is checked too.
  refused([{ type: "macvlan", master: "eth0" }, { type: "bridge", bridge: "ferry0" }]);
  assertEquals(run([{ type: "bridge", bridge: "br-tenant" }]).length, 1);
});

Deno.test("a NAD whose addresses overlap Ferry's pod ranges is refused, whichever IPAM names them", () => {
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
    const message = refused([c]);
    assertEquals(message.includes("overlaps Ferry's pod range"), true, message);
  }
  assertEquals(
    run([{
      type: "macvlan",
      master: "eth0",
      ipam: { type: "host-local", ranges: [[{ subnet: "192.168.80.0/24" }]] },
    }])
      .length,
    1,
  );
});

Deno.test("host-local keeps its files under Ferry's state directory: another dataDir is refused, none gets Ferry's", () => {
  for (
    const dataDir of [
      "/etc",
      "/var/lib/ferry/../../../etc",
      "relative/dir",
      "/var/lib/ferry-other",
      7,
    ]
  ) {
    const message = refused([{
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
  const [kept] = run([
    {
      type: "bridge",
      bridge: "b1",
      ipam: { type: "host-local", dataDir: "/var/lib/ferry/nads/x" },
    },
  ]);
  assertEquals((kept.ipam as Record<string, unknown>).dataDir, "/var/lib/ferry/nads/x");
  const [given] = run([
    {
      type: "bridge",
      bridge: "b1",
      ipam: { type: "host-local", ranges: [[{ subnet: "192.168.1.0/24" }]] },
    },
  ]);
  assertEquals((given.ipam as Record<string, unknown>).dataDir, "/var/lib/ferry/host-local");
});

Deno.test("multiNetwork.allowedTypes restricts plugin and IPAM types; * allows all", () => {
  const narrow = { ...guard, allowedTypes: ["macvlan", "static", "tuning"] };
  assertEquals(
    run([{ type: "macvlan", master: "eth0", ipam: { type: "static" } }, { type: "tuning" }], narrow)
      .length,
    2,
  );
  assertEquals(
    refused([{ type: "host-device", device: "eth1" }], narrow).endsWith(
      "plugin type host-device is not allowed (multiNetwork.allowedTypes: macvlan, static, tuning)",
    ),
    true,
  );
  assertEquals(
    refused([{ type: "macvlan", master: "eth0", ipam: { type: "host-local" } }], narrow)
      .includes("IPAM type host-local is not allowed"),
    true,
  );
  assertEquals(
    refused([{ type: "macvlan" }], { ...guard, allowedTypes: [] }).includes("none"),
    true,
  );
});

Deno.test("whereabouts ranges in every form are held to Ferry's pod ranges: start-end, ipRanges, IPv4-mapped", () => {
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
    const msg = refused(wa(ipam));
    assertEquals(
      msg.includes("overlaps Ferry's pod range"),
      true,
      `${JSON.stringify(ipam)}: ${msg}`,
    );
  }
  assertEquals(
    run(wa({ range: "192.168.7.5-192.168.7.9/24", ipRanges: [{ range: "fd00:99::/64" }] })).length,
    1,
  );
});
