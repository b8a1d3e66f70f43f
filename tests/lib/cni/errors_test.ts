import { assertEquals } from "deno-std/assert/mod.js";
import {
  CNI_ERROR,
  CniError,
  cniErrorFromWire,
  cniErrorToWire,
  toCniError,
} from "../../../lib/cni/errors.ts";
import { validateCniError } from "../../../lib/_generated/validateCniError.js";

Deno.test("a CniError becomes the spec's error object with its code", () => {
  const wire = cniErrorToWire(
    new CniError(CNI_ERROR.INVALID_CONFIG, "bad config", "name missing"),
    "1.0.0",
  );
  assertEquals(wire, { cniVersion: "1.0.0", code: 7, msg: "bad config", details: "name missing" });
  assertEquals(validateCniError(wire), true);
});

Deno.test("an unexpected exception becomes an internal error that keeps its message", () => {
  const wire = cniErrorToWire(new TypeError("boom"), "1.1.0");
  assertEquals(wire.code, CNI_ERROR.INTERNAL);
  assertEquals(wire.details, "boom");
});

Deno.test("empty details are left out of the wire form", () => {
  assertEquals("details" in cniErrorToWire(new CniError(11, "later"), "1.1.0"), false);
});

Deno.test("a wire error round-trips to a CniError with the same code", () => {
  const err = cniErrorFromWire({ code: 3, msg: "unknown container", details: "abc" });
  assertEquals([err.code, err.message, err.details], [3, "unknown container", "abc"]);
  assertEquals(toCniError(err), err);
});
