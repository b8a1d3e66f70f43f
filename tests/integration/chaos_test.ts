// The short version of `deno task chaos` that CI runs: the daemon (its own process) killed with
// SIGKILL four times while 40 pods churn through the shim, and the API stand-in gone for 4 s
// in the middle. Every ADD must answer a result or code 11, no address may go to two live pods,
// plugged pods keep passing CHECK while the API is gone, readiness turns false and back, and
// after a final restart no allocation, record or Ferry link is left. Needs root.
import { assertEquals } from "deno-std/assert/mod.js";
import { runChaos } from "../../daemon/dev/chaos.ts";
import { IS_ROOT } from "../../daemon/dev/netns.ts";

Deno.test({
  name: "kill -9 during churn and an API outage lose, double and leak nothing",
  ignore: !IS_ROOT,
  fn: async () => {
    const report = await runChaos({ pods: 40, concurrency: 8, kills: 4, apiOutageSeconds: 4 });
    assertEquals(report.violations, []);
    assertEquals(report.duplicateAddresses, []);
    assertEquals(report.leaked, { allocations: [], records: [], hostLinks: [] });
    assertEquals(report.adds.other, 0);
    assertEquals(report.adds.ok + report.podsGivenUp, 40);
    assertEquals(report.kills, 4);
    assertEquals(report.apiOutage?.readyWentFalse, true);
    assertEquals(report.apiOutage?.readyCameBack, true);
    assertEquals(report.apiOutage?.checksPassed, true);
    assertEquals((report.apiOutage?.checks ?? 0) > 0, true, "CHECKs ran during the outage");
    assertEquals(report.ok, true);
  },
});
