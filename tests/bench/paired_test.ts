// Paired ratios on a shared machine: the median's interval is a pair of order statistics with at
// least the coverage asked for, a target is decided only by a whole interval, and ABBA order puts
// each side first as often as the other.
import { assertEquals } from "deno-std/assert/mod.js";
import { abbaFirst, medianInterval, verdictOf } from "../../bench/paired.ts";

Deno.test("the median's interval is the narrowest pair of order statistics covering at least 95 %", () => {
  const ten = [0.99, 1.01, 0.98, 1.02, 1.0, 0.97, 1.03, 0.99, 1.0, 1.01];
  assertEquals(medianInterval(ten), { median: 1, low: 0.98, high: 1.02, n: 10, coverage: 0.979 });
  // Twenty pairs: the 6th and 15th (95.9 %).
  const twenty = Array.from({ length: 20 }, (_, i) => 0.9 + i / 100);
  assertEquals(medianInterval(twenty), {
    median: 0.995,
    low: 0.95,
    high: 1.04,
    n: 20,
    coverage: 0.959,
  });
});

Deno.test("too few pairs for 95 %: the whole range, with the coverage it has", () => {
  assertEquals(medianInterval([1.0, 0.9, 1.1, 0.95, 1.05]), {
    median: 1,
    low: 0.9,
    high: 1.1,
    n: 5,
    coverage: 0.938,
  });
  assertEquals(medianInterval([]).n, 0);
  assertEquals(medianInterval([NaN, 1]).n, 1, "a ratio that is no number is left out");
});

Deno.test("a target is met by an interval wholly at or above it, missed by one wholly below, and otherwise undecided", () => {
  const at = (low: number, high: number) => ({
    median: (low + high) / 2,
    low,
    high,
    n: 10,
    coverage: 0.98,
  });
  assertEquals(verdictOf(at(0.97, 1.02), 0.97), "met");
  assertEquals(verdictOf(at(0.9, 0.969), 0.97), "not met");
  assertEquals(verdictOf(at(0.96, 1.0), 0.97), "undecided");
  assertEquals(verdictOf({ ...at(1, 1), n: 0 }, 0.97), "undecided", "no pairs decide nothing");
});

Deno.test("in ABBA order each side goes first in half the pairs, and never three times in a row", () => {
  const firsts = Array.from({ length: 12 }, (_, i) => abbaFirst(i));
  assertEquals(firsts.filter((x) => x).length, 6);
  assertEquals(firsts.slice(0, 4), [true, false, false, true]);
  for (let i = 2; i < firsts.length; i++) {
    assertEquals(firsts[i] === firsts[i - 1] && firsts[i] === firsts[i - 2], false);
  }
});
