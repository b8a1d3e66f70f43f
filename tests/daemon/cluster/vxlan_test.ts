import { assertEquals } from "deno-std/assert/mod.js";
import { overlayAddress, vtepMac, vxlanPlan } from "../../../daemon/cluster/vxlan.ts";
import { stripNode, VTEP_ANNOTATION } from "../../../daemon/cluster/nodes.ts";

Deno.test("the overlay plan routes each published node's IPv4 range via its network address", () => {
  const vtep = (ip: string) => ({ mac: vtepMac(ip), ip });
  const plan = vxlanPlan([
    {
      name: "n1",
      internalIPs: ["192.0.2.11"],
      podCIDRs: ["10.244.1.0/24"],
      vtep: vtep("192.0.2.11"),
    },
    {
      name: "n2",
      internalIPs: ["192.0.2.12"],
      podCIDRs: ["10.244.2.0/24", "fd00:2::/64"],
      vtep: vtep("192.0.2.12"),
    },
    { name: "n3", internalIPs: ["192.0.2.13"], podCIDRs: ["10.244.3.0/24"] },
  ], "n1");
  assertEquals(plan.routes, [{ dst: "10.244.2.0/24", via: "10.244.2.0" }]);
  assertEquals(plan.peers, [{
    gateway: "10.244.2.0",
    mac: vtepMac("192.0.2.12"),
    ip: "192.0.2.12",
  }]);
  assertEquals(plan.unroutable, [
    { node: "n2", dst: "fd00:2::/64", reason: "the overlay carries IPv4 ranges only" },
    {
      node: "n3",
      dst: "10.244.3.0/24",
      reason: "no VTEP published yet (its daemon has not started)",
    },
  ]);
});

Deno.test("a node's VTEP MAC is stable, locally administered and unicast; the overlay address is the range's first", () => {
  const mac = vtepMac("node-a");
  assertEquals(mac, vtepMac("node-a"));
  assertEquals(parseInt(mac.slice(0, 2), 16) & 0x03, 0x02);
  assertEquals(overlayAddress("10.244.7.0/24"), "10.244.7.0");
});

Deno.test("a malformed VTEP annotation is ignored, a good one is read", () => {
  const node = (value: string) => ({
    metadata: { name: "n", annotations: { [VTEP_ANNOTATION]: value } },
  });
  assertEquals(stripNode(node("{nope")).vtep, undefined);
  assertEquals(stripNode(node('{"mac":"zz","ip":"1.2.3.4"}')).vtep, undefined);
  assertEquals(stripNode(node('{"mac":"02:00:00:00:00:01","ip":"192.0.2.1"}')).vtep, {
    mac: "02:00:00:00:00:01",
    ip: "192.0.2.1",
  });
});
