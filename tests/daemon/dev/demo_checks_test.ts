// The demo's checks: each printed with its result, those that fail named with what was seen, and
// an asynchronous write waited for (bounded) before it is judged.
import { assertEquals } from "deno-std/assert/mod.js";
import { DemoChecks, eventually } from "../../../daemon/dev/demo_checks.ts";

Deno.test("a demo check that does not hold is printed and named with what was seen", () => {
  const printed: string[] = [];
  const checks = new DemoChecks((line) => printed.push(line));
  checks.check("web-0 reaches the host", true);
  checks.check("no record is left", false, "left: c1/eth0");
  assertEquals(printed, [
    "  ok   web-0 reaches the host",
    "  FAIL no record is left (left: c1/eth0)",
  ]);
  assertEquals([checks.ok, checks.made, checks.failed], [false, 2, [
    "no record is left (left: c1/eth0)",
  ]]);
});

Deno.test("eventually waits for a value written later, and gives up at its deadline", async () => {
  let value = "none";
  setTimeout(() => (value = "c1"), 100);
  assertEquals(await eventually(() => Promise.resolve(value), (v) => v === "c1", 5000), "c1");
  const started = Date.now();
  assertEquals(await eventually(() => Promise.resolve("none"), (v) => v === "c2", 200), "none");
  assertEquals(Date.now() - started < 5000, true);
});
