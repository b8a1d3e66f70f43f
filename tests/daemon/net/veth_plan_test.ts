import { assertEquals } from "deno-std/assert/mod.js";
import { planVeth } from "../../../daemon/net/veth_plan.ts";
import { parseInspection } from "../../../daemon/net/ip_plumber.ts";

const spec = {
  netns: "/var/run/netns/p",
  ifname: "eth0",
  hostIfname: "fy000000000001",
  containerMac: "02:00:00:00:00:02",
  hostMac: "02:00:00:00:00:01",
  mtu: 1450,
  address: "10.244.0.5",
  gateway: "10.244.0.1",
};

Deno.test("a veth plug is one batch per namespace: pair and host route, then pod address and routes", () => {
  assertEquals(planVeth(spec), {
    host: [
      "link add fy000000000001 mtu 1450 address 02:00:00:00:00:01 type veth peer name eth0 mtu 1450 address 02:00:00:00:00:02 netns /var/run/netns/p",
      "link set fy000000000001 up",
      "addr add 10.244.0.1/32 dev fy000000000001 scope link",
      "route add 10.244.0.5/32 dev fy000000000001 scope link src 10.244.0.1",
    ],
    container: [
      "link set lo up",
      "link set eth0 up",
      "addr add 10.244.0.5/32 dev eth0",
      "route add 10.244.0.1/32 dev eth0 scope link",
      "route add 0.0.0.0/0 via 10.244.0.1 dev eth0",
    ],
  });
});

Deno.test("an IPv6 plug uses -6 lines and /128 addresses", () => {
  const plan = planVeth({ ...spec, address: "fd00::5", gateway: "fd00::1" });
  assertEquals(plan.container.at(-1), "-6 route add ::/0 via fd00::1 dev eth0");
  assertEquals(
    plan.host.at(-1),
    "-6 route add fd00::5/128 dev fy000000000001 scope link src fd00::1",
  );
});

Deno.test("ip -j output becomes a live interface without link-local noise", () => {
  const addrs = JSON.stringify([{
    ifname: "eth0",
    address: "02:00:00:00:00:02",
    mtu: 1450,
    flags: ["BROADCAST", "UP", "LOWER_UP"],
    addr_info: [
      { family: "inet", local: "10.244.0.5", prefixlen: 32, scope: "global" },
      { family: "inet6", local: "fe80::1", prefixlen: 64, scope: "link" },
    ],
  }]);
  const routes = JSON.stringify([{ dst: "default", gateway: "10.244.0.1" }, { dst: "10.244.0.1" }]);
  assertEquals(parseInspection("eth0", addrs, routes, "[]"), {
    name: "eth0",
    mac: "02:00:00:00:00:02",
    mtu: 1450,
    up: true,
    addresses: ["10.244.0.5/32"],
    routes: [{ dst: "0.0.0.0/0", gw: "10.244.0.1" }, { dst: "10.244.0.1/32" }],
  });
  assertEquals(parseInspection("eth0", "[]", "[]", "[]"), null);
});
