import { assertEquals } from "deno-std/assert/mod.js";
import { planBridge, planSublink, planVeth } from "../../../daemon/net/link_plan.ts";
import { parseInspection } from "../../../daemon/net/ip_plumber.ts";
import type { VethSpec } from "../../../daemon/net/plumber.ts";

const spec: VethSpec = {
  netns: "/var/run/netns/p",
  ifname: "eth0",
  hostIfname: "fy000000000001",
  bridge: "ferry0",
  containerMac: "02:00:00:00:00:02",
  hostMac: "02:00:00:00:00:01",
  mtu: 1450,
  addresses: [{ cidr: "10.244.0.5/24", gateway: "10.244.0.1" }],
};

Deno.test("a veth plug is one batch per namespace: pair on the bridge in hairpin mode with learning and unknown-unicast flooding off and the pod's MAC a static, sticky entry, then pod address and default route", () => {
  assertEquals(planVeth(spec), {
    host: {
      sysctls: [],
      lines: [
        "link add fy000000000001 mtu 1450 address 02:00:00:00:00:01 type veth peer name eth0 mtu 1450 address 02:00:00:00:00:02 netns /var/run/netns/p",
        "link set fy000000000001 master ferry0 up",
        "link set fy000000000001 type bridge_slave hairpin on learning off flood off",
      ],
      bridgeLines: ["fdb replace 02:00:00:00:00:02 dev fy000000000001 master static sticky"],
    },
    container: {
      sysctls: [
        ["net/ipv4/conf/all/accept_redirects", "0"],
        ["net/ipv4/conf/eth0/accept_redirects", "0"],
      ],
      lines: [
        "link set lo up",
        "link set eth0 up",
        "addr add 10.244.0.5/24 dev eth0",
        "route add 0.0.0.0/0 via 10.244.0.1 dev eth0",
      ],
    },
  });
});

Deno.test("a port security port is made in its interface group, in the same command as the pair", () => {
  assertEquals(
    planVeth({ ...spec, hostGroup: 0x46000001 }).host.lines[0],
    "link add fy000000000001 mtu 1450 address 02:00:00:00:00:01 group 1174405121 type veth peer name eth0 mtu 1450 address 02:00:00:00:00:02 netns /var/run/netns/p",
  );
});

Deno.test("a dual-stack plug enables IPv6 in the pod, skips DAD, refuses router advertisements and redirects and routes each family via its gateway", () => {
  const plan = planVeth({
    ...spec,
    addresses: [...spec.addresses, { cidr: "fd00::5/64", gateway: "fd00::1" }],
  });
  assertEquals(plan.container.sysctls, [
    ["net/ipv4/conf/all/accept_redirects", "0"],
    ["net/ipv4/conf/eth0/accept_redirects", "0"],
    ["net/ipv6/conf/eth0/disable_ipv6", "0"],
    ["net/ipv6/conf/eth0/accept_dad", "0"],
    ["net/ipv6/conf/eth0/accept_ra", "0"],
    ["net/ipv6/conf/eth0/accept_redirects", "0"],
  ]);
  assertEquals(plan.container.lines.slice(2), [
    "addr add 10.244.0.5/24 dev eth0",
    "addr add fd00::5/64 dev eth0 nodad",
    "route add 0.0.0.0/0 via 10.244.0.1 dev eth0",
    "route add ::/0 via fd00::1 dev eth0",
  ]);
});

Deno.test("the bridge is created only when missing, its MAC set (its own kept when it exists), learns from no link-local group frame; gateways are replaced, forwarding set per family", () => {
  const bridge = { name: "ferry0", mtu: 1450, gateways: ["10.244.0.1/24", "fd00::1/64"] };
  const fresh = planBridge(bridge, false, true, "02:00:00:00:00:0b");
  assertEquals(fresh.create, ["link add ferry0 mtu 1450 address 02:00:00:00:00:0b type bridge"]);
  assertEquals(fresh.configure, {
    sysctls: [
      ["net/ipv6/conf/ferry0/disable_ipv6", "0"],
      ["net/ipv4/ip_forward", "1"],
      ["net/ipv6/conf/all/forwarding", "1"],
    ],
    lines: [
      "link set ferry0 address 02:00:00:00:00:0b",
      "link set ferry0 mtu 1450 up",
      "link set ferry0 type bridge no_linklocal_learn 1",
      "addr replace 10.244.0.1/24 dev ferry0",
      "addr replace fd00::1/64 dev ferry0 nodad",
    ],
  });
  const existing = planBridge({ ...bridge, gateways: ["10.244.0.1/24"] }, true, false);
  assertEquals(existing.create, []);
  assertEquals(existing.configure.sysctls, []);
});

Deno.test("a macvlan is created directly in the pod's namespace with its mode, MTU and MAC", () => {
  const plan = planSublink({
    kind: "macvlan",
    netns: "/var/run/netns/p",
    ifname: "net1",
    master: "eth1",
    mode: "bridge",
    mtu: 1400,
    mac: "02:00:00:00:00:07",
    addresses: [{ cidr: "192.168.1.5/24" }],
    routes: [{ dst: "192.168.0.0/16", gw: "192.168.1.1" }],
  });
  assertEquals(plan.host.lines, [
    "link add link eth1 name net1 mtu 1400 address 02:00:00:00:00:07 netns /var/run/netns/p type macvlan mode bridge",
  ]);
  assertEquals(plan.container.lines, [
    "link set lo up",
    "link set net1 up",
    "addr add 192.168.1.5/24 dev net1",
    "route add 192.168.0.0/16 via 192.168.1.1 dev net1",
  ]);
});

Deno.test("an ipvlan takes its mode and flag and never a MAC", () => {
  const plan = planSublink({
    kind: "ipvlan",
    netns: "/n",
    ifname: "net2",
    master: "eth1",
    mode: "l3",
    flag: "private",
    mac: "02:00:00:00:00:07",
    addresses: [],
    routes: [],
  });
  assertEquals(plan.host.lines, [
    "link add link eth1 name net2 netns /n type ipvlan mode l3 private",
  ]);
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
