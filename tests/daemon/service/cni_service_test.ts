import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import { selectDriver } from "../../../daemon/service/cni_service.ts";
import { CniError } from "../../../lib/cni/errors.ts";
import type { NetConf } from "../../../lib/cni/schemas.ts";

/** A Ferry config with an `attachment` (an extra field NetConf allows but does not name). */
const withAttachment = (attachment: unknown) => ({ ...base, attachment }) as NetConf;

const base = { cniVersion: "1.0.0", name: "lan", type: "ferry" };

Deno.test("a Ferry config without an attachment is the default network on the bridge", () => {
  assertEquals(selectDriver(base), { driver: "bridge", conf: base });
});

Deno.test("macvlan and ipvlan attachments are native; they inherit version and name", () => {
  for (const type of ["macvlan", "ipvlan"]) {
    const { driver, conf } = selectDriver(withAttachment({ type, master: "eth1" }));
    assertEquals(driver, type);
    assertEquals(conf, { cniVersion: "1.0.0", name: "lan", type, master: "eth1" });
  }
});

Deno.test("any other attachment type is delegated, keeping its own version and name when given", () => {
  const { driver, conf } = selectDriver(
    withAttachment({ cniVersion: "0.4.0", name: "other", type: "vlan", vlanId: 5 }),
  );
  assertEquals(driver, "delegate");
  assertEquals(conf, { cniVersion: "0.4.0", name: "other", type: "vlan", vlanId: 5 });
});

Deno.test("an attachment that is not a typed config, or is Ferry itself, is code 7", () => {
  for (const attachment of [null, [], "macvlan", { master: "eth1" }, { type: "ferry" }]) {
    const e = assertThrows(() => selectDriver(withAttachment(attachment)), CniError);
    assertEquals(e.code, 7, JSON.stringify(attachment));
  }
});
