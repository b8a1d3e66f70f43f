import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import { interfaceNames, parseSelections } from "../../../daemon/multivif/selections.ts";
import { nadPlugins } from "../../../daemon/multivif/drivers.ts";
import { CniError } from "../../../lib/cni/errors.ts";

const POD = "default/web-0";

Deno.test("the comma form: net, ns/net, net@ifname, ns/net@ifname", () => {
  const { selections } = parseSelections(
    "macvlan-conf, other/sriov-net ,tuned@data0, other/b@net9",
    "default",
    POD,
  );
  assertEquals(selections, [
    { namespace: "default", name: "macvlan-conf" },
    { namespace: "other", name: "sriov-net" },
    { namespace: "default", name: "tuned", interface: "data0" },
    { namespace: "other", name: "b", interface: "net9" },
  ]);
});

Deno.test("the JSON form keeps every selection field; infiniband-guid and unknown keys are warned about", () => {
  const { selections, warnings } = parseSelections(
    JSON.stringify([
      {
        name: "mv",
        namespace: "other",
        interface: "data1",
        ips: ["192.168.1.10/24", "fd00::10/64"],
        mac: "02:23:45:67:89:AB",
        "default-route": ["192.168.1.1"],
        "cni-args": { foo: "bar" },
        portMappings: [{ hostPort: 8080, containerPort: 80, protocol: "tcp" }],
        bandwidth: { ingressRate: 1000 },
        "infiniband-guid": "c2:11:22:33:44:55:66:77",
        surprise: 1,
      },
      { name: "plain" },
    ]),
    "default",
    POD,
  );
  assertEquals(selections[0], {
    namespace: "other",
    name: "mv",
    interface: "data1",
    ips: ["192.168.1.10/24", "fd00::10/64"],
    mac: "02:23:45:67:89:ab",
    defaultRoute: ["192.168.1.1"],
    cniArgs: { foo: "bar" },
    portMappings: [{ hostPort: 8080, containerPort: 80, protocol: "tcp" }],
    bandwidth: { ingressRate: 1000 },
  });
  assertEquals(selections[1], { namespace: "default", name: "plain" });
  assertEquals(warnings.length, 2);
});

Deno.test("bad annotations are code 7 naming the pod and the problem", () => {
  const bad: [string, string][] = [
    ["[{", "not valid JSON"],
    ['{"name":"x"}', "must be a list"],
    ['[{"name":"x","mac":"zz"}]', "not a MAC"],
    ['[{"name":"x","ips":["300.1.1.1"]}]', "not an address"],
    ['[{"interface":"eth1"}]', "network undefined"],
    ["Bad_Name", "not a valid object name"],
    ["a@way-too-long-interface-name", "not a valid interface name"],
    ["a@x/y", "not a valid interface name"],
  ];
  for (const [annotation, why] of bad) {
    const e = assertThrows(() => parseSelections(annotation, "default", POD), CniError);
    assertEquals(e.code, 7);
    assertEquals(e.message.includes(POD), true, e.message);
    assertEquals(e.message.includes(why), true, `${e.message} should say ${why}`);
  }
});

Deno.test("interface names: explicit ones win, the rest are net1, net2, … skipping taken names; duplicates are code 7", () => {
  const sel = (iface?: string) => ({
    namespace: "d",
    name: "n",
    ...(iface ? { interface: iface } : {}),
  });
  assertEquals(interfaceNames([sel(), sel("net2"), sel(), sel()], "eth0", "net", POD), [
    "net1",
    "net2",
    "net3",
    "net4",
  ]);
  assertEquals(interfaceNames([sel(), sel()], "eth0", "eth", POD), ["eth1", "eth2"]);
  for (const clash of [[sel("x"), sel("x")], [sel("eth0")]]) {
    const e = assertThrows(() => interfaceNames(clash, "eth0", "net", POD), CniError);
    assertEquals(e.code, 7);
  }
});

Deno.test("a NAD's plugins inherit version and name, get runtimeConfig only for declared capabilities, and cni-args as args.cni", () => {
  const conflist = JSON.stringify({
    cniVersion: "0.4.0",
    name: "mv-net",
    plugins: [
      { type: "macvlan", master: "eth0", capabilities: { ips: true, mac: true } },
      { type: "tuning", sysctl: { "net.ipv4.conf.net1.arp_notify": "1" } },
    ],
  });
  const plugins = nadPlugins(conflist, { namespace: "d", name: "mv" }, {
    namespace: "d",
    name: "mv",
    ips: ["10.1.1.5/24"],
    mac: "02:00:00:00:00:01",
    bandwidth: { ingressRate: 1 },
    cniArgs: { k: "v" },
  }, POD);
  assertEquals(plugins.map((p) => [p.cniVersion, p.name, p.type]), [
    ["0.4.0", "mv-net", "macvlan"],
    ["0.4.0", "mv-net", "tuning"],
  ]);
  assertEquals(plugins[0].runtimeConfig, { ips: ["10.1.1.5/24"], mac: "02:00:00:00:00:01" });
  assertEquals(plugins[1].runtimeConfig, undefined);
  assertEquals((plugins[0] as { args?: unknown }).args, { cni: { k: "v" } });
  const single = nadPlugins('{"type":"ipvlan","master":"eth0"}', { namespace: "d", name: "iv" }, {
    namespace: "d",
    name: "iv",
  }, POD);
  assertEquals(single.map((p) => [p.cniVersion, p.name, p.type]), [["1.0.0", "iv", "ipvlan"]]);
  for (const bad of ["nope", "[]", '{"plugins":[]}', '{"plugins":[{}]}', '{"type":"ferry"}']) {
    const e = assertThrows(
      () => nadPlugins(bad, { namespace: "d", name: "x" }, { namespace: "d", name: "x" }, POD),
      CniError,
    );
    assertEquals(e.code, 7);
  }
});
