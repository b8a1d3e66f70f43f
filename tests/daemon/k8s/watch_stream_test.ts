import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { watchEvents } from "../../../daemon/k8s/watch_stream.ts";

/** A body whose chunks the test pushes, left open until it closes it. */
function openBody() {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let cancelled: unknown = "not cancelled";
  const body = new ReadableStream<Uint8Array>({
    start: (c) => void (controller = c),
    cancel: (reason) => void (cancelled = reason),
  });
  const push = (text: string) => controller.enqueue(new TextEncoder().encode(text));
  return { body, push, close: () => controller.close(), cancelled: () => cancelled };
}

Deno.test("watch events split across chunks arrive whole, one per line; a torn last line is dropped", async () => {
  const { body, push, close } = openBody();
  push('{"type":"ADDED","object":{"n":1}}\n{"type":"MOD');
  push('IFIED","object":{"n":2}}\n\n{"type":"DELETED"');
  close();
  const got = [];
  for await (const e of watchEvents<{ n: number }>(body)) got.push([e.type, e.object.n]);
  assertEquals(got, [["ADDED", 1], ["MODIFIED", 2]]);
});

Deno.test("aborting ends a watch that waits for data at once, with the signal's reason, and cancels the body", async () => {
  const { body, push, cancelled } = openBody();
  const abort = new AbortController();
  const events = watchEvents(body, abort.signal);
  push('{"type":"ADDED","object":{}}\n');
  assertEquals((await events.next()).value?.type, "ADDED");
  const pending = events.next(); // nothing more is coming: this read waits
  const reason = new Error("stop watching");
  abort.abort(reason);
  await assertRejects(() => pending, Error, "stop watching");
  await new Promise((r) => setTimeout(r, 0)); // the cancel crosses the decoder's pipe
  assertEquals(cancelled(), reason);
});

Deno.test("a watch whose signal is already aborted yields nothing", async () => {
  const { body } = openBody();
  const abort = new AbortController();
  abort.abort(new Error("gone"));
  await assertRejects(() => watchEvents(body, abort.signal).next(), Error, "gone");
});
