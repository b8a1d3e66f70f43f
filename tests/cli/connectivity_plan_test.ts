import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import { parseHostPort, planChecks, type TestPod } from "../../cli/connectivity/plan.ts";

const pods = (nodes: number, dual: boolean): TestPod[] =>
  Array.from({ length: nodes }, (_, i) =>
    [
      { role: "a", ip: 2 },
      { role: "b", ip: 3 },
    ].map(({ role, ip }) => ({
      name: `ct-${i}-${role}`,
      node: `n${i}`,
      hostNetwork: false,
      ips: [`10.244.${i}.${ip}`, ...(dual ? [`fd00:${i}::${ip}`] : [])],
    })).concat({
      name: `ct-${i}-host`,
      node: `n${i}`,
      hostNetwork: true,
      ips: [`192.0.2.${i}`, ...(dual ? [`2001:db8::${i}`] : [])],
    })).flat();

Deno.test("a dual-stack cluster gets every check once per family, the policy checks last", () => {
  const checks = planChecks({
    pods: pods(2, true),
    clusterIPs: ["10.96.0.1", "fd00:96::1"],
    nodePort: 30080,
    tests: [],
    external: [],
  });
  assertEquals(checks.length, 2 * 2 * 8 + 2, "and one forged-source check per node (IPv4)");
  assertEquals(checks.filter((c) => c.family === 6).length, 16);
  assertEquals(checks.slice(-10).map((c) => c.test), [
    ...Array(2).fill("forged-source"),
    ...Array(4).fill("policy-deny"),
    ...Array(4).fill("policy-allow"),
  ]);
  const across = checks.find((c) => c.test === "pod-pod-cross-node" && c.family === 6)!;
  assertEquals([across.from.name, across.to.address, across.nodes], ["ct-0-a", "fd00:1::2", [
    "n0",
    "n1",
  ]]);
});

Deno.test("one node has no across-nodes check; --test and --external shape the plan", () => {
  const one = planChecks({ pods: pods(1, false), clusterIPs: [], tests: [], external: [] });
  assertEquals(one.filter((c) => c.test === "pod-pod-cross-node"), []);
  const some = planChecks({
    pods: pods(3, false),
    clusterIPs: [],
    tests: ["external"],
    external: ["198.51.100.7:443", "[2001:db8::7]:443"],
  });
  assertEquals(some.map((c) => `${c.from.name}→${c.to.address}:${c.to.port}`), [
    "ct-0-a→198.51.100.7:443",
    "ct-1-a→198.51.100.7:443",
    "ct-2-a→198.51.100.7:443",
  ], "an IPv6 outside address on an IPv4-only cluster is not planned");
  assertThrows(() => parseHostPort("198.51.100.7"), Error, "IP:PORT");
});

Deno.test("the forged-source check sends from each node's -a to its -b as the next node's -a, as the node's own hostNetwork pod on one node", () => {
  const forged = planChecks({ pods: pods(2, true), clusterIPs: [], tests: [], external: [] })
    .filter((c) => c.test === "forged-source");
  assertEquals(
    forged.map((c) => [c.from.name, c.to.label, c.to.address, c.to.port, c.spoofAs, c.nodes]),
    [
      ["ct-0-a", "ct-0-b", "10.244.0.3", 19081, { address: "10.244.1.2", label: "ct-1-a" }, ["n0"]],
      ["ct-1-a", "ct-1-b", "10.244.1.3", 19081, { address: "10.244.0.2", label: "ct-0-a" }, ["n1"]],
    ],
  );
  assertEquals(forged.map((c) => [c.family, c.expect]), [[4, "blocked"], [4, "blocked"]]);
  const one = planChecks({
    pods: pods(1, false),
    clusterIPs: [],
    tests: ["forged-source"],
    external: [],
  });
  assertEquals(one.map((c) => c.spoofAs), [{ address: "192.0.2.0", label: "ct-0-host" }]);
});
