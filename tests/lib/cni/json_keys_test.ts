// JSON keys as a Go plugin reads them: folded for the NAD guard, respelled for Ferry's own readers.
import { assertEquals } from "deno-std/assert/mod.js";
import { foldKey, foldKeys, respelled, type Spelling } from "../../../lib/cni/json_keys.ts";

const SPELLING: Spelling = {
  master: null,
  isGateway: null,
  runtimeConfig: { mac: null },
  ipam: { type: null, ipRanges: { range: null, range_start: null } },
};

Deno.test("keys fold as Go's decoder matches them: case, long s, Kelvin sign, dotless and dotted i", () => {
  assertEquals(
    ["Master", "MASTER", "maſter", "\u212aind", "\u0131pam", "\u0130PAM"].map(foldKey),
    ["master", "master", "master", "kind", "ipam", "ipam"],
  );
});

Deno.test("a known key in any spelling Go reads is respelled as the reader reads it, at every depth and in lists", () => {
  assertEquals(
    respelled({
      MASTER: "eth1",
      ISGATEWAY: true,
      RuntimeConfig: { MAC: "02:00:00:00:00:01" },
      "\u0130PAM": {
        Type: "whereabouts",
        IPRANGES: [{ Range: "192.168.2.0/24", Range_Start: "192.168.2.9" }],
      },
    }, SPELLING).value,
    {
      master: "eth1",
      isGateway: true,
      runtimeConfig: { mac: "02:00:00:00:00:01" },
      ipam: {
        type: "whereabouts",
        ipRanges: [{ range: "192.168.2.0/24", range_start: "192.168.2.9" }],
      },
    },
  );
  assertEquals(respelled({ maſter: "eth2" }, SPELLING).value, { master: "eth2" });
});

Deno.test("keys the reader does not know, and what is below them, stay as written", () => {
  const value = { Vlan: 5, Extra: { MASTER: "x" }, master: "eth1", runtimeConfig: { IPs: ["a"] } };
  assertEquals(respelled(value, SPELLING).value, value);
});

Deno.test("a key __proto__ stays an ordinary key of the copy", () => {
  const parsed = JSON.parse('{"__proto__": {"polluted": true}, "Master": "eth1"}');
  const { value } = respelled(parsed, SPELLING) as { value: Record<string, unknown> };
  assertEquals(Object.keys(value), ["__proto__", "master"]);
  assertEquals(Object.getPrototypeOf(value), Object.prototype);
  assertEquals((value as { polluted?: boolean }).polluted, undefined);
});

Deno.test("two keys of one object that become one key are a clash naming both and where", () => {
  assertEquals(respelled({ master: "eth0", Master: "eth1" }, SPELLING).clash, {
    at: "master",
    keys: ["master", "Master"],
  });
  assertEquals(
    respelled({ ipam: { ipRanges: [{ range: "a" }, { range: "b", RANGE: "c" }] } }, SPELLING).clash,
    { at: "ipam.ipRanges[1].range", keys: ["range", "RANGE"] },
  );
  assertEquals(foldKeys({ master: "eth0", MASTER: "eth1" }).clash?.keys, ["master", "MASTER"]);
});
