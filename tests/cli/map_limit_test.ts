import { assertEquals } from "deno-std/assert/mod.js";
import { mapLimit } from "../../cli/map_limit.ts";

Deno.test("mapLimit keeps at most the limit in flight and the results in the items' order", async () => {
  let inFlight = 0, most = 0;
  const gates: (() => void)[] = [];
  const done = mapLimit([5, 4, 3, 2, 1, 0], 2, async (n) => {
    inFlight++;
    most = Math.max(most, inFlight);
    await new Promise<void>((r) => gates.push(r));
    inFlight--;
    return n * 10;
  });
  // Release the calls one by one as they arrive (each waits for its gate): no timers.
  for (let released = 0; released < 6; released++) {
    for (let turns = 0; !gates.length; turns++) {
      if (turns > 1000) throw new Error(`call ${released + 1} never started`);
      await Promise.resolve();
    }
    gates.shift()!();
    await Promise.resolve();
  }
  assertEquals(await done, [50, 40, 30, 20, 10, 0]);
  assertEquals(most, 2);
});
