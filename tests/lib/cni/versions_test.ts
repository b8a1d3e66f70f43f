import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import { CniError } from "../../../lib/cni/errors.ts";
import type { CniResult } from "../../../lib/cni/schemas.ts";
import {
  assertCommandAllowed,
  compareVersions,
  convertResult,
  SUPPORTED_VERSIONS,
  upgradeResult,
} from "../../../lib/cni/versions.ts";
import { validateCniResult } from "../../../lib/_generated/validateCniResult.js";

const current: CniResult = {
  cniVersion: "1.1.0",
  interfaces: [{ name: "fyabc", mac: "02:00:00:00:00:01", mtu: 1500 }, {
    name: "eth0",
    sandbox: "/var/run/netns/p",
  }],
  ips: [{ address: "10.0.0.2/32", gateway: "10.0.0.1", interface: 1 }, {
    address: "fd00::2/128",
    interface: 1,
  }],
  routes: [{ dst: "0.0.0.0/0", gw: "10.0.0.1", mtu: 1400, priority: 10 }],
  dns: { nameservers: ["10.96.0.10"] },
};

for (const version of SUPPORTED_VERSIONS) {
  Deno.test(`a current result converts to a valid ${version} result`, () => {
    const out = convertResult(current, version);
    assertEquals(out.cniVersion, version);
    assertEquals(validateCniResult(out), true);
    const legacy = compareVersions(version, "1.0.0") < 0;
    assertEquals(out.ips?.map((ip) => ip.version), legacy ? ["4", "6"] : [undefined, undefined]);
    const expectedRoute = version === "1.1.0"
      ? current.routes![0]
      : { dst: "0.0.0.0/0", gw: "10.0.0.1" };
    assertEquals(out.routes, [expectedRoute]);
    assertEquals(upgradeResult(out).ips?.map((ip) => ip.address), ["10.0.0.2/32", "fd00::2/128"]);
  });
}

Deno.test("interface fields new in 1.1.0 are dropped for older versions", () => {
  assertEquals(convertResult(current, "1.0.0").interfaces?.[0], {
    name: "fyabc",
    mac: "02:00:00:00:00:01",
  });
  assertEquals(convertResult(current, "1.1.0").interfaces?.[0].mtu, 1500);
});

Deno.test("converting to an unsupported version is an incompatible-version error", () => {
  const err = assertThrows(() => convertResult(current, "0.2.0"), CniError);
  assertEquals(err.code, 1);
});

Deno.test("CHECK needs 0.4.0, STATUS and GC need 1.1.0", () => {
  assertEquals(assertThrows(() => assertCommandAllowed("CHECK", "0.3.1"), CniError).code, 1);
  assertCommandAllowed("CHECK", "0.4.0");
  for (const cmd of ["STATUS", "GC"] as const) {
    assertEquals(assertThrows(() => assertCommandAllowed(cmd, "1.0.0"), CniError).code, 1);
    assertCommandAllowed(cmd, "1.1.0");
  }
  assertCommandAllowed("ADD", "0.3.0");
});

Deno.test("versions compare numerically, not as text", () => {
  assertEquals(compareVersions("0.10.0", "0.4.0") > 0, true);
  assertEquals(compareVersions("1.0.0", "1.0.0"), 0);
});
