import { assertEquals } from "deno-std/assert/mod.js";
import { GENERATED_DIR, renderValidators } from "../../lib/validator_source.ts";

Deno.test("the committed generated validators match the schemas (run `deno task gen` if not)", async () => {
  const expected = renderValidators();
  const onDisk = new Set<string>();
  for await (const e of Deno.readDir(GENERATED_DIR)) onDisk.add(e.name);
  assertEquals([...onDisk].sort(), [...expected.keys()].sort(), "generated file set is stale");
  for (const [name, text] of expected) {
    assertEquals(await Deno.readTextFile(new URL(name, GENERATED_DIR)), text, `${name} is stale`);
  }
});
