import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { KeyedMutex } from "../../../daemon/runtime/keyed_mutex.ts";

Deno.test("work for one key runs in order, other keys are not held up", async () => {
  const locks = new KeyedMutex();
  const log: string[] = [];
  const slow = Promise.withResolvers<void>();
  const a1 = locks.run("a", async () => {
    await slow.promise;
    log.push("a1");
  });
  const a2 = locks.run("a", () => Promise.resolve(log.push("a2")));
  await locks.run("b", () => Promise.resolve(log.push("b")));
  slow.resolve();
  await Promise.all([a1, a2]);
  assertEquals(log, ["b", "a1", "a2"]);
});

Deno.test("a failing run does not block the next one", async () => {
  const locks = new KeyedMutex();
  await locks.run("k", () => Promise.reject(new Error("x"))).catch(() => {});
  assertEquals(await locks.run("k", () => Promise.resolve(42)), 42);
});

Deno.test("a run whose signal aborts while it waits never runs, and the queue moves on", async () => {
  const locks = new KeyedMutex();
  const log: string[] = [];
  const slow = Promise.withResolvers<void>();
  const first = locks.run("k", async () => {
    await slow.promise;
    log.push("first");
  });
  const gone = new AbortController();
  const abandoned = locks.run("k", () => Promise.resolve(log.push("abandoned")), gone.signal);
  const third = locks.run("k", () => Promise.resolve(log.push("third")));
  gone.abort(new Error("requester went away"));
  await assertRejects(() => abandoned, Error, "requester went away");
  slow.resolve();
  await Promise.all([first, third]);
  assertEquals(log, ["first", "third"]);
});
