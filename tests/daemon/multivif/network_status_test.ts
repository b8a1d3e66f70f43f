// Reading a pod's network-status back (daemon/multivif/network_status.ts): what any pod may write
// there is trusted only for networks of its own namespace, and only as parsed addresses.
import { assertEquals } from "deno-std/assert/mod.js";
import { readNetworkStatus } from "../../../daemon/multivif/network_status.ts";

/** The forged "address" of issue #42: nftables text closing the set it is written into. */
const INJECTION =
  "192.168.77.99 }; }\n  chain in-0 { accept; }\n  set pzz { type ipv4_addr; elements = { 192.168.77.98";

Deno.test("network-status addresses are parsed and canonical; text that is no address is dropped and said", () => {
  const read = readNetworkStatus(
    JSON.stringify([
      { name: "eth0-net", ips: ["10.0.0.5"], default: true },
      { name: "a/vnet", ips: ["192.168.77.5", INJECTION, "2001:DB8:0:0::7", 42, "192.168.77.5"] },
    ]),
    "a",
  );
  assertEquals(read.networks, { "a/vnet": ["192.168.77.5", "2001:db8::7"] });
  assertEquals(read.dropped.map((d) => d.reason), ["not an IP address", "not an IP address"]);
  assertEquals(read.dropped[0].value, INJECTION.slice(0, 80));
});

Deno.test("a pod's network-status counts only for networks of its own namespace", () => {
  const read = readNetworkStatus(
    JSON.stringify([
      { name: "prb3a/vnet", ips: ["192.168.77.99"] },
      { name: "vnet", ips: ["192.168.88.9"] },
      { name: "prb3b/own", ips: ["192.168.99.9"] },
    ]),
    "prb3b",
  );
  assertEquals(read.networks, { "prb3b/vnet": ["192.168.88.9"], "prb3b/own": ["192.168.99.9"] });
  assertEquals(read.dropped.map((d) => d.value), ["prb3a/vnet"]);
});

Deno.test("a network-status that is not JSON, or not a list, claims nothing", () => {
  assertEquals(readNetworkStatus("{", "a").networks, {});
  assertEquals(readNetworkStatus('{"name":"a/x","ips":["10.0.0.1"]}', "a").networks, {});
  assertEquals(readNetworkStatus(undefined, "a"), { networks: {}, dropped: [] });
});
