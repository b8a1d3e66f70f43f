// `deno task demo` as its users run it: every check it makes holds, and one that does not is
// named (the demo prints each check with its result; the test fails listing those that failed).
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { demo } from "../../daemon/dev/demo.ts";
import { demoCluster } from "../../daemon/dev/demo_cluster.ts";
import { IS_ROOT } from "../../daemon/dev/netns.ts";

Deno.test({
  name: "the demo plugs three pods, reaches each, and leaves nothing behind",
  ignore: !IS_ROOT,
  fn: async () => {
    const checks = await demo();
    assertEquals(checks.failed, [], "the demo's checks that did not hold");
    // Three annotations, three pods' reachability three ways, four leftovers, namespaces, bridge.
    assertEquals(checks.made, 3 + 9 + 4 + 2, "every check was made");
  },
});

Deno.test({
  name: "the cluster demo's pods on three nodes reach each other and the outside, masqueraded",
  ignore: !IS_ROOT || !(await Deno.stat("/usr/sbin/nft").then(() => true, () => false)),
  fn: async () => {
    const checks = await demoCluster();
    assertEquals(checks.failed, [], "the cluster demo's checks that did not hold");
    assert(checks.made > 0, "no check was made");
  },
});
