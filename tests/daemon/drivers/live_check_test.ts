import { assertEquals } from "deno-std/assert/mod.js";
import { firstDifference } from "../../../daemon/drivers/live_check.ts";
import { vethResult } from "../../../daemon/drivers/bridge.ts";
import type { LiveInterface, VethSpec } from "../../../daemon/net/plumber.ts";

const spec: VethSpec = {
  netns: "/var/run/netns/p",
  ifname: "eth0",
  hostIfname: "fyabc",
  bridge: "ferry0",
  containerMac: "02:00:00:00:00:02",
  hostMac: "02:00:00:00:00:01",
  mtu: 1500,
  addresses: [{ cidr: "10.244.0.5/24", gateway: "10.244.0.1" }],
};
const live: LiveInterface = {
  name: "eth0",
  mac: "02:00:00:00:00:02",
  mtu: 1500,
  up: true,
  addresses: ["10.244.0.5/24"],
  routes: [{ dst: "0.0.0.0/0", gw: "10.244.0.1" }, { dst: "10.244.0.0/24" }],
};

Deno.test("the result names both ends with MTU, the pod address on the pod end, and the default route", () => {
  assertEquals(vethResult(spec, undefined), {
    cniVersion: "1.1.0",
    interfaces: [{ name: "fyabc", mac: "02:00:00:00:00:01", mtu: 1500 }, {
      name: "eth0",
      mac: "02:00:00:00:00:02",
      mtu: 1500,
      sandbox: "/var/run/netns/p",
    }],
    ips: [{ address: "10.244.0.5/24", gateway: "10.244.0.1", interface: 1 }],
    routes: [{ dst: "0.0.0.0/0", gw: "10.244.0.1" }],
  });
});

Deno.test("a dual-stack result has one address and one default route per family", () => {
  const r = vethResult({
    ...spec,
    addresses: [...spec.addresses, { cidr: "fd00::5/64", gateway: "fd00::1" }],
  }, undefined);
  assertEquals(r.ips?.map((ip) => ip.address), ["10.244.0.5/24", "fd00::5/64"]);
  assertEquals(r.routes, [{ dst: "0.0.0.0/0", gw: "10.244.0.1" }, { dst: "::/0", gw: "fd00::1" }]);
});

Deno.test("a previous result is kept and interface indexes continue after it", () => {
  const prev = {
    cniVersion: "1.1.0",
    interfaces: [{ name: "lo0" }],
    ips: [{ address: "192.0.2.1/32", interface: 0 }],
    dns: { nameservers: ["10.96.0.10"] },
  };
  const r = vethResult(spec, prev);
  assertEquals(r.ips?.map((i) => i.interface), [0, 2]);
  assertEquals(r.dns, prev.dns);
});

Deno.test("CHECK agrees with a matching live state and names the first difference otherwise", () => {
  const expected = vethResult(spec, undefined);
  assertEquals(firstDifference(expected, "eth0", spec.netns, live), undefined);
  assertEquals(
    firstDifference(expected, "eth0", spec.netns, null),
    "interface eth0 does not exist in /var/run/netns/p",
  );
  assertEquals(
    firstDifference(expected, "eth0", spec.netns, { ...live, addresses: [] }),
    "interface eth0 lacks address 10.244.0.5/24",
  );
  assertEquals(
    firstDifference(expected, "eth0", spec.netns, { ...live, up: false }),
    "interface eth0 is down",
  );
  assertEquals(
    firstDifference(expected, "eth0", spec.netns, { ...live, mac: "02:00:00:00:00:09" }),
    "interface eth0 has MAC 02:00:00:00:00:09, expected 02:00:00:00:00:02",
  );
  assertEquals(
    firstDifference(expected, "eth0", spec.netns, { ...live, routes: [] }),
    "route to 0.0.0.0/0 via 10.244.0.1 is missing on eth0",
  );
});
