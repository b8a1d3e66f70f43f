import { assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { AnnotationWriter } from "../../../daemon/k8s/annotation_writer.ts";

const pod = { namespace: "default", name: "web-0" };
const logger = getLogger(["ferry", "test"]);

Deno.test("writes for one pod are coalesced: one in flight, then one more with the newest value", async () => {
  const sent: string[] = [];
  const gate = Promise.withResolvers<void>();
  const writer = new AnnotationWriter(async (_, value) => {
    sent.push(value);
    if (sent.length === 1) await gate.promise;
  }, logger);
  let current = "v1";
  writer.schedule(pod, () => current);
  for (const v of ["v2", "v3", "v4"]) {
    current = v;
    writer.schedule(pod, () => current);
  }
  assertEquals(writer.pending, 1);
  gate.resolve();
  await writer.flush(AbortSignal.timeout(1000));
  assertEquals(sent, ["v1", "v4"]);
  assertEquals([writer.writes, writer.pending], [2, 0]);
});

Deno.test("a failed write is retried with backoff, a bounded number of times", async () => {
  let calls = 0;
  const flaky = new AnnotationWriter(
    () => {
      calls++;
      return calls < 3 ? Promise.reject(new Error("conflict")) : Promise.resolve();
    },
    logger,
    { retries: 3, backoffMs: 1 },
  );
  flaky.schedule(pod, () => "v");
  await flaky.flush(AbortSignal.timeout(1000));
  assertEquals([calls, flaky.failures], [3, 0]);
  const broken = new AnnotationWriter(() => Promise.reject(new Error("down")), logger, {
    retries: 2,
    backoffMs: 1,
  });
  broken.schedule(pod, () => "v");
  await broken.flush(AbortSignal.timeout(1000));
  assertEquals([broken.writes, broken.failures, broken.pending], [3, 1, 0]);
});

Deno.test("different pods are written independently, and flush gives up at its deadline", async () => {
  const never = new AnnotationWriter(() => new Promise(() => {}), logger);
  never.schedule(pod, () => "v");
  never.schedule({ namespace: "default", name: "web-1" }, () => "v");
  assertEquals(never.pending, 2);
  await never.flush(AbortSignal.timeout(50));
  assertEquals(never.pending, 2);
});
