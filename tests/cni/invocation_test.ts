import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import { type CniEnv, parseInvocation } from "../../cni/invocation.ts";
import { CniError } from "../../lib/cni/errors.ts";

const ENV: CniEnv = {
  CNI_COMMAND: "ADD",
  CNI_CONTAINERID: "a1b2c3",
  CNI_NETNS: "/var/run/netns/pod",
  CNI_IFNAME: "eth0",
  CNI_ARGS: "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p",
  CNI_PATH: "/opt/cni/bin:/usr/lib/cni",
};
const CONF = JSON.stringify({ cniVersion: "1.0.0", name: "ferry", type: "ferry" });

function codeOf(env: CniEnv, stdin = CONF): number {
  return assertThrows(() => parseInvocation(env, stdin), CniError).code;
}

Deno.test("a complete ADD environment becomes one request", () => {
  const inv = parseInvocation(ENV, CONF);
  assertEquals(inv.command, "ADD");
  if (inv.command === "VERSION") throw new Error("unreachable");
  assertEquals(inv.request, {
    command: "ADD",
    containerId: "a1b2c3",
    netns: "/var/run/netns/pod",
    ifname: "eth0",
    args: { IgnoreUnknown: "1", K8S_POD_NAMESPACE: "ns", K8S_POD_NAME: "p" },
    path: ["/opt/cni/bin", "/usr/lib/cni"],
    config: JSON.parse(CONF),
  });
});

const missingTable: [string, keyof CniEnv][] = [
  ["ADD", "CNI_CONTAINERID"],
  ["ADD", "CNI_NETNS"],
  ["ADD", "CNI_IFNAME"],
  ["ADD", "CNI_PATH"],
  ["CHECK", "CNI_NETNS"],
  ["DEL", "CNI_CONTAINERID"],
  ["DEL", "CNI_IFNAME"],
];
for (const [command, name] of missingTable) {
  Deno.test(`${command} without ${name} is an invalid-environment error (4)`, () => {
    const env = { ...ENV, CNI_COMMAND: command };
    delete env[name];
    assertEquals(codeOf(env), 4);
  });
}

Deno.test("DEL needs no network namespace", () => {
  const env = { ...ENV, CNI_COMMAND: "DEL" };
  delete env.CNI_NETNS;
  assertEquals(parseInvocation(env, CONF).command, "DEL");
});

Deno.test("a missing or unknown CNI_COMMAND is 4", () => {
  assertEquals(codeOf({ ...ENV, CNI_COMMAND: undefined }), 4);
  assertEquals(codeOf({ ...ENV, CNI_COMMAND: "UPDATE" }), 4);
});

Deno.test("invalid container IDs, interface names and namespaces are 4", () => {
  assertEquals(codeOf({ ...ENV, CNI_CONTAINERID: "-bad id" }), 4);
  assertEquals(codeOf({ ...ENV, CNI_IFNAME: "a-name-longer-than-15" }), 4);
  assertEquals(codeOf({ ...ENV, CNI_IFNAME: "eth/0" }), 4);
  assertEquals(codeOf({ ...ENV, CNI_NETNS: "relative/ns" }), 4);
  assertEquals(codeOf({ ...ENV, CNI_ARGS: "novalue" }), 4);
});

Deno.test("stdin that is not JSON, or not an object, is a decoding error (6)", () => {
  assertEquals(codeOf(ENV, "{not json"), 6);
  assertEquals(codeOf(ENV, "[1,2]"), 6);
  assertEquals(codeOf(ENV, ""), 6);
});

Deno.test("an unsupported or missing cniVersion is incompatible (1)", () => {
  assertEquals(codeOf(ENV, JSON.stringify({ cniVersion: "0.2.0", name: "n", type: "ferry" })), 1);
  assertEquals(codeOf(ENV, JSON.stringify({ name: "n", type: "ferry" })), 1);
});

Deno.test("the config's schema is left to the daemon: the shim forwards it as given", () => {
  // The daemon answers code 7 for it (tests/daemon/server/request_test.ts, and the bad-input corpus
  // through the real shim); the shim compiles no schema validator at its start.
  const conf = { cniVersion: "1.0.0", type: "ferry", ipam: { type: 3 } };
  const inv = parseInvocation(ENV, JSON.stringify(conf));
  if (inv.command === "VERSION") throw new Error("unreachable");
  assertEquals(inv.request.config, conf as never);
});

Deno.test("CHECK with a 0.3.1 config is incompatible (1)", () => {
  assertEquals(
    codeOf(
      { ...ENV, CNI_COMMAND: "CHECK" },
      JSON.stringify({ cniVersion: "0.3.1", name: "n", type: "ferry" }),
    ),
    1,
  );
});

Deno.test("STATUS and GC need only CNI_PATH and a 1.1.0 config", () => {
  const conf = JSON.stringify({ cniVersion: "1.1.0", name: "n", type: "ferry" });
  for (const command of ["STATUS", "GC"]) {
    assertEquals(
      parseInvocation({ CNI_COMMAND: command, CNI_PATH: "/opt/cni/bin" }, conf).command,
      command,
    );
    assertEquals(codeOf({ CNI_COMMAND: command }, conf), 4);
  }
});

Deno.test("VERSION needs neither environment nor a valid config", () => {
  assertEquals(parseInvocation({ CNI_COMMAND: "VERSION" }, "").command, "VERSION");
});

Deno.test("a container ID over the documented limit is 4 before anything is sent", () => {
  assertEquals(codeOf({ ...ENV, CNI_CONTAINERID: "a".repeat(5000) }), 4);
  assertEquals(codeOf({ ...ENV, CNI_CONTAINERID: "a".repeat(201) }), 4);
  const ok = parseInvocation({ ...ENV, CNI_CONTAINERID: "a".repeat(200) }, CONF);
  assertEquals(ok.command, "ADD");
});

Deno.test("a CNI_NETNS with whitespace is 4", () => {
  assertEquals(codeOf({ ...ENV, CNI_NETNS: "/var/run/netns/a b" }), 4);
  assertEquals(codeOf({ ...ENV, CNI_NETNS: "/var/run/netns/a\n" }), 4);
  assertEquals(codeOf({ ...ENV, CNI_NETNS: "relative" }), 4);
});

Deno.test("stdin nested deeper than 64 levels is an invalid config (7) before it is walked; 64 levels pass", () => {
  const nested = (depth: number) =>
    `{"cniVersion":"1.0.0","name":"n","type":"ferry","x":${"[".repeat(depth - 1)}${
      "]".repeat(depth - 1)
    }}`;
  const err = assertThrows(() => parseInvocation(ENV, nested(20_000)), CniError);
  assertEquals(err.code, 7, err.message);
  assertEquals(codeOf(ENV, nested(65)), 7, "65 levels");
  assertEquals(parseInvocation(ENV, nested(64)).command, "ADD", "64 levels are accepted");
});
