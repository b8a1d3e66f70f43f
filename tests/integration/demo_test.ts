import { assertEquals } from "deno-std/assert/mod.js";
import { demo } from "../../daemon/dev/demo.ts";
import { IS_ROOT } from "../../daemon/dev/netns.ts";

Deno.test({
  name: "the demo plugs three pods, reaches each, and leaves nothing behind",
  ignore: !IS_ROOT,
  fn: async () => assertEquals(await demo(), true),
});
