import { assertEquals } from "deno-std/assert/mod.js";
import type { CniEnv } from "../../cni/invocation.ts";
import { runShim, type SendToDaemon } from "../../cni/shim.ts";
import { SUPPORTED_VERSIONS } from "../../lib/cni/versions.ts";
import type { CniRequest } from "../../lib/envelope.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import { SocketUnavailableError } from "../../lib/unix_http.ts";
import { validateCniResult } from "../../lib/_generated/validateCniResult.js";
import { validateCniError } from "../../lib/_generated/validateCniError.js";

const ENV: CniEnv = {
  CNI_COMMAND: "ADD",
  CNI_CONTAINERID: "c1",
  CNI_NETNS: "/var/run/netns/p",
  CNI_IFNAME: "eth0",
  CNI_PATH: "/opt/cni/bin",
};
const RESULT = {
  cniVersion: "1.1.0",
  interfaces: [{ name: "eth0", mac: "02:00:00:00:00:01", sandbox: "/var/run/netns/p" }],
  ips: [{ address: "10.0.0.2/32", gateway: "10.0.0.1", interface: 0 }],
  routes: [{ dst: "0.0.0.0/0", gw: "10.0.0.1" }],
};
const conf = (v: string) => JSON.stringify({ cniVersion: v, name: "ferry", type: "ferry" });

function replying(reply: unknown, seen: CniRequest[] = []): SendToDaemon {
  return (req) => {
    seen.push(req);
    return Promise.resolve(reply);
  };
}

for (const version of SUPPORTED_VERSIONS) {
  Deno.test(`ADD prints the daemon's result as a valid ${version} result`, async () => {
    const out = await runShim(ENV, conf(version), replying({ result: RESULT }));
    assertEquals(out.exitCode, 0);
    const printed = JSON.parse(out.stdout);
    assertEquals(printed.cniVersion, version);
    assertEquals(validateCniResult(printed), true);
  });
}

Deno.test("VERSION is answered without the daemon", async () => {
  const seen: CniRequest[] = [];
  const out = await runShim({ CNI_COMMAND: "VERSION" }, "", replying({}, seen));
  assertEquals(JSON.parse(out.stdout), {
    cniVersion: "1.1.0",
    supportedVersions: [...SUPPORTED_VERSIONS],
  });
  assertEquals(seen.length, 0);
});

Deno.test("DEL, CHECK, STATUS and GC print nothing on success", async () => {
  for (
    const [command, v] of [["DEL", "1.0.0"], ["CHECK", "1.0.0"], ["STATUS", "1.1.0"], [
      "GC",
      "1.1.0",
    ]]
  ) {
    const out = await runShim({ ...ENV, CNI_COMMAND: command }, conf(v), replying({}));
    assertEquals(out, { stdout: "", exitCode: 0 }, command);
  }
});

Deno.test("an error the daemon reports passes through with its code", async () => {
  const out = await runShim(
    ENV,
    conf("1.0.0"),
    replying({ error: { code: 101, msg: "no free address" } }),
  );
  assertEquals(out.exitCode, 1);
  assertEquals(JSON.parse(out.stdout), { cniVersion: "1.0.0", code: 101, msg: "no free address" });
});

Deno.test("a malformed reply, or an ADD reply without result, is an I/O error (5)", async () => {
  const malformed = [
    { result: { ips: "nope" } },
    { result: { cniVersion: "1.1.0", ips: [{ gateway: "10.0.0.1" }] } },
    { result: { cniVersion: "1.1.0", routes: [{}] } },
    { result: { cniVersion: "1.1.0", interfaces: ["eth0"] } },
    { result: { cniVersion: "1.1.0", dns: [] } },
    { error: { code: "11", msg: "x" } },
    { error: { code: 11 } },
    "text",
    null,
    {},
  ];
  for (const reply of malformed) {
    const out = await runShim(ENV, conf("1.0.0"), replying(reply));
    assertEquals([out.exitCode, JSON.parse(out.stdout).code], [1, 5], JSON.stringify(reply));
  }
});

Deno.test("errors are spec error objects labelled with the requested version", async () => {
  const out = await runShim({ ...ENV, CNI_IFNAME: undefined }, conf("0.4.0"), replying({}));
  const printed = JSON.parse(out.stdout);
  assertEquals([out.exitCode, printed.code, printed.cniVersion], [1, 4, "0.4.0"]);
  assertEquals(validateCniError(printed), true);
});

Deno.test("the request carries parsed CNI_ARGS and the config as given", async () => {
  const seen: CniRequest[] = [];
  await runShim(
    { ...ENV, CNI_ARGS: "K8S_POD_NAME=p;K8S_POD_NAMESPACE=n" },
    conf("1.1.0"),
    replying({ result: RESULT }, seen),
  );
  assertEquals(seen[0].args, { K8S_POD_NAME: "p", K8S_POD_NAMESPACE: "n" });
  assertEquals(seen[0].config.cniVersion, "1.1.0");
});

Deno.test("a timeoutSeconds the shim cannot wait for (1e308, 2^31, 0) is 7 and nothing is sent", async () => {
  for (const t of [1e308, 2 ** 31, 0, "5"]) {
    const seen: CniRequest[] = [];
    const stdin = JSON.stringify({
      cniVersion: "1.0.0",
      name: "ferry",
      type: "ferry",
      timeoutSeconds: t,
    });
    const out = await runShim(ENV, stdin, replying({ result: RESULT }, seen));
    assertEquals([out.exitCode, JSON.parse(out.stdout).code, seen.length], [1, 7, 0], String(t));
  }
});

Deno.test("DEL with no daemon listening succeeds with a note; other commands, and a daemon that does not answer, are 11", async () => {
  const absent = () =>
    Promise.reject(
      new CniError(CNI_ERROR.TRY_AGAIN_LATER, "Ferry daemon is not listening on /x.sock", "", {
        cause: new SocketUnavailableError("/x.sock", { cause: new Deno.errors.NotFound("gone") }),
      }),
    );
  const del = await runShim({ ...ENV, CNI_COMMAND: "DEL" }, conf("1.0.0"), absent);
  assertEquals([del.stdout, del.exitCode], ["", 0]);
  assertEquals(del.note?.includes("releases it when it is back"), true, del.note);
  for (const command of ["ADD", "CHECK"]) {
    const out = await runShim({ ...ENV, CNI_COMMAND: command }, conf("1.0.0"), absent);
    assertEquals([out.exitCode, JSON.parse(out.stdout).code], [1, 11], command);
  }
  const slow = () =>
    Promise.reject(new CniError(CNI_ERROR.TRY_AGAIN_LATER, "did not answer in time"));
  const late = await runShim({ ...ENV, CNI_COMMAND: "DEL" }, conf("1.0.0"), slow);
  assertEquals([late.exitCode, JSON.parse(late.stdout).code], [1, 11]);
});

Deno.test("exec'ed as an IPAM plugin by another plugin (ipam.type ferry), ADD is code 7 naming ipam.type without asking the daemon, DEL succeeds", async () => {
  const stdin = JSON.stringify({
    cniVersion: "1.0.0",
    name: "vlan10",
    type: "vlan",
    master: "eth0",
    ipam: { type: "ferry", pool: "telco" },
  });
  const seen: CniRequest[] = [];
  const add = await runShim(
    { ...ENV, CNI_IFNAME: "net1" },
    stdin,
    replying({ result: RESULT }, seen),
  );
  assertEquals(add.exitCode, 1);
  const err = JSON.parse(add.stdout);
  assertEquals(err.code, CNI_ERROR.INVALID_CONFIG);
  assertEquals(err.msg.startsWith("network vlan10: ipam.type:"), true, err.msg);
  const del = await runShim(
    { ...ENV, CNI_COMMAND: "DEL", CNI_IFNAME: "net1" },
    stdin,
    replying({}, seen),
  );
  assertEquals(del.exitCode, 0, del.stdout);
  assertEquals(seen, [], "the daemon is never asked");
  // Ferry's own network keeps going to the daemon whatever its ipam says.
  const own = await runShim(
    ENV,
    JSON.stringify({ cniVersion: "1.0.0", name: "ferry", type: "ferry", ipam: { type: "ferry" } }),
    replying({ result: RESULT }, seen),
  );
  assertEquals(own.exitCode, 0, own.stdout);
  assertEquals(seen.length, 1);
});
