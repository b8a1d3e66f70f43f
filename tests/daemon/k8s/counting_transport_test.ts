import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { CountingTransport, type KubeTransport } from "../../../daemon/k8s/transport.ts";
import { KubeApiError, KubeUnreachableError } from "../../../daemon/k8s/errors.ts";

Deno.test("API requests are counted by verb, and their answers by verb and outcome", async () => {
  const answers: (() => Promise<unknown>)[] = [
    () => Promise.resolve({}),
    () => Promise.reject(new KubeApiError(409, "Conflict", "stale")),
    () => Promise.reject(new KubeUnreachableError("refused")),
    () => Promise.resolve({}),
  ];
  const inner: KubeTransport = {
    json: <T>() => answers.shift()!() as Promise<T>,
    stream: () => Promise.resolve(new ReadableStream<Uint8Array>()),
  };
  const t = new CountingTransport(inner);
  await t.json({ method: "GET", path: "/a" });
  await assertRejects(() => t.json({ method: "PUT", path: "/b" }), KubeApiError);
  await assertRejects(() => t.json({ method: "PUT", path: "/b" }), KubeUnreachableError);
  await t.json({ method: "PATCH", path: "/c" });
  await t.stream({ method: "GET", path: "/w" });
  assertEquals(t.counts, { GET: 2, PUT: 2, PATCH: 1 });
  assertEquals(t.outcomes, { "GET ok": 2, "PUT 409": 1, "PUT unreachable": 1, "PATCH ok": 1 });
  assertEquals(t.total, 5);
});
