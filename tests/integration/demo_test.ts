import { assertEquals } from "deno-std/assert/mod.js";
import { demo } from "../../daemon/dev/demo.ts";
import { demoCluster } from "../../daemon/dev/demo_cluster.ts";
import { IS_ROOT } from "../../daemon/dev/netns.ts";

Deno.test({
  name: "the demo plugs three pods, reaches each, and leaves nothing behind",
  ignore: !IS_ROOT,
  fn: async () => assertEquals(await demo(), true),
});

Deno.test({
  name: "the cluster demo's pods on three nodes reach each other and the outside, masqueraded",
  ignore: !IS_ROOT || !(await Deno.stat("/usr/sbin/nft").then(() => true, () => false)),
  fn: async () => assertEquals(await demoCluster(), true),
});
