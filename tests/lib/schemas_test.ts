import { assertEquals } from "deno-std/assert/mod.js";
import { validateNetConf } from "../../lib/_generated/validateNetConf.js";
import { validateNetConfList } from "../../lib/_generated/validateNetConfList.js";
import { validateCniRequest } from "../../lib/_generated/validateCniRequest.js";
import { validateCniReply } from "../../lib/_generated/validateCniReply.js";
import { validateVersionInfo } from "../../lib/_generated/validateVersionInfo.js";

Deno.test("a 1.1.0 plugin config with prevResult, runtimeConfig and args is valid", () => {
  const conf = {
    cniVersion: "1.1.0",
    name: "ferry",
    type: "ferry",
    runtimeConfig: { portMappings: [] },
    args: { cni: { ips: ["10.0.0.5"] } },
    prevResult: { cniVersion: "1.1.0", ips: [{ address: "10.0.0.5/24" }] },
    customField: true,
  };
  assertEquals(validateNetConf(conf), true);
});

Deno.test("a config without name, with a bad name, or with a malformed prevResult is invalid", () => {
  assertEquals(validateNetConf({ cniVersion: "1.0.0", type: "ferry" }), false);
  assertEquals(validateNetConf({ cniVersion: "1.0.0", name: "-bad name", type: "ferry" }), false);
  assertEquals(
    validateNetConf({
      cniVersion: "1.0.0",
      name: "n",
      type: "t",
      prevResult: { cniVersion: "1.0.0", ips: [{ address: "x" }] },
    }),
    false,
  );
});

Deno.test("a conflist needs at least one plugin with a type", () => {
  assertEquals(validateNetConfList({ cniVersion: "1.0.0", name: "n", plugins: [] }), false);
  assertEquals(
    validateNetConfList({
      cniVersion: "1.0.0",
      name: "n",
      plugins: [{ type: "ferry" }, { type: "portmap" }],
    }),
    true,
  );
});

Deno.test("the envelope rejects unknown commands and unknown fields", () => {
  const ok = {
    command: "ADD",
    containerId: "c",
    netns: "/n",
    ifname: "eth0",
    args: {},
    path: [],
    config: { cniVersion: "1.0.0", name: "n", type: "ferry" },
  };
  assertEquals(validateCniRequest(ok), true);
  assertEquals(validateCniRequest({ ...ok, command: "VERSION" }), false);
  assertEquals(validateCniRequest({ ...ok, extra: 1 }), false);
  assertEquals(validateCniRequest({ ...ok, ifname: "a-very-long-interface-name" }), false);
});

Deno.test("a reply carries a result or an error", () => {
  assertEquals(validateCniReply({}), true);
  assertEquals(validateCniReply({ error: { code: 11, msg: "later" } }), true);
  assertEquals(validateCniReply({ error: { code: "x" } }), false);
  assertEquals(validateVersionInfo({ cniVersion: "1.1.0", supportedVersions: ["1.1.0"] }), true);
});
