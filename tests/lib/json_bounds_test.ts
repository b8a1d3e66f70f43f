import { assertEquals } from "deno-std/assert/mod.js";
import { jsonBoundsProblem, jsonDepth } from "../../lib/json_bounds.ts";

Deno.test("jsonDepth counts objects and arrays, not brackets inside strings or after escapes", () => {
  assertEquals(jsonDepth("1"), 0);
  assertEquals(jsonDepth("{}"), 1);
  assertEquals(jsonDepth('{"a":[{"b":"[[{{"}],"c":{}}'), 3);
  assertEquals(jsonDepth('["\\"[[[", []]'), 2, "an escaped quote does not end the string");
});

Deno.test("jsonDepth reads 200,000 levels without recursion", () => {
  assertEquals(jsonDepth("[".repeat(200_000) + "]".repeat(200_000)), 200_000);
});

Deno.test("jsonBoundsProblem names the depth or the size past its bound, and nothing within them", () => {
  const bounds = { maxDepth: 3, maxBytes: 20 };
  assertEquals(jsonBoundsProblem("[[[]]]", bounds), undefined);
  assertEquals(jsonBoundsProblem("[[[[]]]]", bounds), "it is nested 4 levels deep (at most 3)");
  assertEquals(jsonBoundsProblem(`"${"é".repeat(10)}"`, bounds), "it is 22 bytes (at most 20)");
  assertEquals(
    jsonBoundsProblem(`"${"x".repeat(100)}"`, bounds),
    "it is at least 102 bytes (at most 20)",
  );
  assertEquals(
    jsonBoundsProblem("[".repeat(100), { maxDepth: 64 }),
    "it is nested 100 levels deep (at most 64)",
  );
});
