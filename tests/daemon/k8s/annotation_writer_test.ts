import { assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { AnnotationWriter } from "../../../daemon/k8s/annotation_writer.ts";
import { KubeApiError } from "../../../daemon/k8s/errors.ts";

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

Deno.test("a failed write is retried with backoff until it lands, and logged as failing once after `retries` failures", async () => {
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
  // An API server down for longer than the first few tries: the write still lands.
  let down = 8;
  const outage = new AnnotationWriter(
    () => --down >= 0 ? Promise.reject(new Error("down")) : Promise.resolve(),
    logger,
    { retries: 2, backoffMs: 1, maxBackoffMs: 4 },
  );
  outage.schedule(pod, () => "v");
  await outage.flush(AbortSignal.timeout(2000));
  assertEquals([outage.writes, outage.failures, outage.pending], [9, 1, 0]);
});

Deno.test("each retry sends the newest value, for the newest incarnation of the pod", async () => {
  const sent: string[] = [];
  let fail = true;
  const writer = new AnnotationWriter(
    (p, value) => {
      sent.push(`${p.uid}:${value}`);
      return fail ? Promise.reject(new Error("down")) : Promise.resolve();
    },
    logger,
    { backoffMs: 20 },
  );
  writer.schedule({ ...pod, uid: "u1" }, () => "old");
  await new Promise((r) => setTimeout(r, 5));
  writer.schedule({ ...pod, uid: "u2" }, () => "new");
  fail = false;
  await writer.flush(AbortSignal.timeout(1000));
  assertEquals(sent, ["u1:old", "u2:new"]);
});

Deno.test("retries stop once the pod is gone: a 404 answer, or the caller no longer wants the write", async () => {
  let calls = 0;
  const gone = new AnnotationWriter(
    () => {
      calls++;
      return Promise.reject(new KubeApiError(404, "NotFound", 'pods "web-0" not found'));
    },
    logger,
    { backoffMs: 1 },
  );
  gone.schedule(pod, () => "v");
  await gone.flush(AbortSignal.timeout(1000));
  assertEquals([calls, gone.pending, gone.failures], [1, 0, 0]);

  let wanted = true;
  let tries = 0;
  const deleted = new AnnotationWriter(
    () => {
      tries++;
      if (tries === 2) wanted = false; // the watch saw the pod deleted
      return Promise.reject(new Error("down"));
    },
    logger,
    { backoffMs: 1, wanted: () => wanted },
  );
  deleted.schedule(pod, () => "v");
  await deleted.flush(AbortSignal.timeout(1000));
  assertEquals([tries, deleted.pending], [2, 0]);
});

/** A writer whose every write the server refuses with 422 and `message`; counts the tries. */
function refusedWith(message: string) {
  const tries = { n: 0 };
  const writer = new AnnotationWriter(
    () => {
      tries.n++;
      return Promise.reject(new KubeApiError(422, "Invalid", message));
    },
    logger,
    { backoffMs: 1 },
  );
  return { writer, tries };
}

Deno.test("a write the server refuses as invalid is not retried: silently when it named a replaced pod's UID, logged otherwise", async () => {
  const replaced = refusedWith(
    'Pod "web-0" is invalid: metadata.uid: Invalid value: "u1": field is immutable',
  );
  replaced.writer.schedule({ ...pod, uid: "u1" }, () => "v");
  await replaced.writer.flush(AbortSignal.timeout(1000));
  assertEquals([replaced.tries.n, replaced.writer.pending, replaced.writer.failures], [1, 0, 0]);

  const invalid = refusedWith("metadata.annotations: Too long: must have at most 262144 bytes");
  invalid.writer.schedule(pod, () => "v");
  await invalid.writer.flush(AbortSignal.timeout(1000));
  assertEquals([invalid.tries.n, invalid.writer.pending, invalid.writer.failures], [1, 0, 1]);
});

Deno.test("close ends the retries' pauses at once and schedules nothing more", async () => {
  let calls = 0;
  const writer = new AnnotationWriter(
    () => {
      calls++;
      return Promise.reject(new Error("down"));
    },
    logger,
    { backoffMs: 60_000 },
  );
  writer.schedule(pod, () => "v");
  await new Promise((r) => setTimeout(r, 10));
  assertEquals([calls, writer.pending], [1, 1]);
  // close must not wait out the 60 s pause
  let timer: ReturnType<typeof setTimeout> | undefined;
  const closed = await Promise.race([
    writer.close().then(() => "closed"),
    new Promise((r) => timer = setTimeout(r, 2000, "still waiting")),
  ]);
  clearTimeout(timer);
  assertEquals(closed, "closed");
  assertEquals(writer.pending, 0);
  writer.schedule(pod, () => "v");
  assertEquals([calls, writer.pending], [1, 0]);
});

Deno.test("different pods are written independently, and flush gives up at its deadline", async () => {
  const never = new AnnotationWriter(() => new Promise(() => {}), logger);
  never.schedule(pod, () => "v");
  never.schedule({ namespace: "default", name: "web-1" }, () => "v");
  assertEquals(never.pending, 2);
  await never.flush(AbortSignal.timeout(50));
  assertEquals(never.pending, 2);
});
