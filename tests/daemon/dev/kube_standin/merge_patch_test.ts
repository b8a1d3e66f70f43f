import { assertEquals } from "deno-std/assert/mod.js";
import { applyMergePatch } from "../../../../daemon/dev/kube_standin/merge_patch.ts";

Deno.test("a merge patch changes only the named keys, null removes one, arrays are replaced", () => {
  const target = {
    metadata: { annotations: { a: "1", b: "2" }, labels: { x: "y" } },
    list: [1, 2],
  };
  assertEquals(
    applyMergePatch(target, { metadata: { annotations: { a: null, c: "3" } }, list: [3] }),
    {
      metadata: { annotations: { b: "2", c: "3" }, labels: { x: "y" } },
      list: [3],
    },
  );
  assertEquals(target.metadata.annotations.a, "1", "the target is not modified");
});
