import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import { decodeRequest } from "../../../daemon/server/request.ts";
import { CniError } from "../../../lib/cni/errors.ts";

const base = {
  command: "ADD",
  containerId: "c1",
  netns: "/var/run/netns/p",
  ifname: "eth0",
  args: {},
  path: ["/opt/cni/bin"],
  config: { cniVersion: "1.0.0", name: "ferry", type: "ferry" },
};

function codeOf(over: Record<string, unknown>, config: Record<string, unknown> = {}): number {
  const body = JSON.stringify({ ...base, ...over, config: { ...base.config, ...config } });
  return assertThrows(() => decodeRequest(body), CniError).code;
}

Deno.test("a valid request decodes unchanged", () => {
  assertEquals(decodeRequest(JSON.stringify(base)), base);
});

Deno.test("the daemon enforces the version rules itself: unsupported versions and commands a version lacks are 1", () => {
  assertEquals(codeOf({}, { cniVersion: "0.2.0" }), 1, "ADD with 0.2.0");
  assertEquals(codeOf({ command: "DEL" }, { cniVersion: "9.9.9" }), 1, "DEL with 9.9.9");
  assertEquals(codeOf({ command: "CHECK" }, { cniVersion: "0.3.1" }), 1, "CHECK with 0.3.1");
  assertEquals(codeOf({ command: "GC" }, { cniVersion: "1.0.0" }), 1, "GC with 1.0.0");
  assertEquals(codeOf({}, { cniVersion: undefined }), 1, "no version at all");
});

Deno.test("bad CNI variables are 4, bad configs 7, undecodable bodies 6", () => {
  assertEquals(codeOf({ command: "FROB" }), 4);
  assertEquals(codeOf({ netns: "/var/run/netns/a b" }), 4, "netns with a space");
  assertEquals(codeOf({ netns: "/var/run/netns/a\nb" }), 4, "netns with a newline");
  assertEquals(codeOf({ containerId: "a".repeat(5000) }), 4, "a 5000-character container ID");
  assertEquals(codeOf({ ifname: "a-very-long-interface-name" }), 4);
  assertEquals(codeOf({ args: { K: 1 } }), 4);
  assertEquals(codeOf({}, { name: "bad name" }), 7);
  assertEquals(assertThrows(() => decodeRequest("{nope"), CniError).code, 6);
  assertEquals(assertThrows(() => decodeRequest("[1]"), CniError).code, 6);
  assertEquals(assertThrows(() => decodeRequest('{"command":"ADD"}'), CniError).code, 6);
});

Deno.test("timeoutSeconds must be a sane number of seconds: 1e308, 2^31 and 0 are 7", () => {
  for (const t of [1e308, 2 ** 31, 0, -1, "10"]) {
    assertEquals(codeOf({}, { timeoutSeconds: t }), 7, String(t));
  }
  const ok = decodeRequest(
    JSON.stringify({ ...base, config: { ...base.config, timeoutSeconds: 30 } }),
  );
  assertEquals((ok.config as Record<string, unknown>).timeoutSeconds, 30);
});

Deno.test("a prevResult naming a missing interface is 7, one of an unsupported version is 1", () => {
  const prev = (p: Record<string, unknown>) => ({
    prevResult: { cniVersion: "1.0.0", interfaces: [{ name: "eth0" }], ips: [], ...p },
  });
  assertEquals(codeOf({}, prev({ ips: [{ address: "10.0.0.2/24", interface: 99 }] })), 7);
  assertEquals(codeOf({}, prev({ cniVersion: "0.1.0" })), 1);
  const ok = prev({ ips: [{ address: "10.0.0.2/24", interface: 0 }] });
  assertEquals(
    decodeRequest(JSON.stringify({ ...base, config: { ...base.config, ...ok } })).config.prevResult
      ?.ips?.length,
    1,
  );
});

Deno.test("a relative CNI_PATH entry is 4: plugins are looked up only in absolute directories", () => {
  assertEquals(codeOf({ path: ["/opt/cni/bin", "bin"] }), 4);
  assertEquals(codeOf({ path: ["."] }), 4);
});

Deno.test("a request whose config is nested deeper than 64 levels is 7, not a stack overflow; 64 levels pass", () => {
  const body = (depth: number) =>
    JSON.stringify(base).replace(
      '"type":"ferry"',
      `"type":"ferry","x":${"[".repeat(depth - 1)}${"]".repeat(depth - 1)}`,
    );
  const err = assertThrows(() => decodeRequest(body(20_000)), CniError);
  assertEquals(err.code, 7, err.message);
  assertEquals(assertThrows(() => decodeRequest(body(65)), CniError).code, 7, "65 levels");
  assertEquals((decodeRequest(body(64)).config as Record<string, unknown>).type, "ferry");
});
