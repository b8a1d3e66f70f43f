import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import { parseCniArgs, podRefFromArgs } from "../../../lib/cni/args.ts";
import { CniError } from "../../../lib/cni/errors.ts";

const RUNTIME_ARGS =
  "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc123;K8S_POD_UID=1f0e-22";

Deno.test("CNI_ARGS as container runtimes send them yield the pod reference", () => {
  const args = parseCniArgs(RUNTIME_ARGS);
  assertEquals(args.IgnoreUnknown, "1");
  assertEquals(podRefFromArgs(args), {
    namespace: "default",
    name: "web-0",
    uid: "1f0e-22",
    infraContainerId: "abc123",
  });
});

Deno.test("empty CNI_ARGS are no arguments and no pod", () => {
  assertEquals(parseCniArgs(""), {});
  assertEquals(parseCniArgs(undefined), {});
  assertEquals(podRefFromArgs({}), undefined);
});

Deno.test("values may contain '=' and trailing separators are ignored", () => {
  assertEquals(parseCniArgs("A=b=c;"), { A: "b=c" });
});

Deno.test("a pair without '=' is an invalid-environment error", () => {
  assertEquals(assertThrows(() => parseCniArgs("A=1;broken"), CniError).code, 4);
  assertEquals(assertThrows(() => parseCniArgs("=x"), CniError).code, 4);
});
