import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { readPods } from "../../../daemon/dev/dev.ts";

Deno.test("dev mode reads pods from YAML documents, JSON lists and the shipped example", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(
      `${dir}/list.json`,
      JSON.stringify({ kind: "List", items: [{ kind: "Pod", metadata: { name: "a" } }] }),
    );
    assertEquals((await readPods(`${dir}/list.json`)).map((p) => p.metadata?.name), ["a"]);
    const example = new URL("../../../daemon/dev/examples/pods.yaml", import.meta.url).pathname;
    assertEquals((await readPods(example)).map((p) => p.metadata?.name), ["web-0", "db-0"]);
    await Deno.writeTextFile(`${dir}/svc.yaml`, "kind: Service\nmetadata: {name: s}\n");
    await assertRejects(() => readPods(`${dir}/svc.yaml`), Error, "only pods");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
