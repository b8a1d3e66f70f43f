import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { WATCH_READ_BYTES, watchEvents } from "../../../daemon/k8s/watch_stream.ts";

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
  await new Promise((r) => setTimeout(r, 0)); // the cancel reaches the body
  assertEquals(cancelled(), reason);
});

Deno.test("a watch whose signal is already aborted yields nothing", async () => {
  const { body } = openBody();
  const abort = new AbortController();
  abort.abort(new Error("gone"));
  await assertRejects(() => watchEvents(body, abort.signal).next(), Error, "gone");
});

/**
 * A byte stream (what a fetch body is) serving `chunks` one per pull, through the reader's own
 * buffer when it offers one; records how big each offered buffer was (0: none offered).
 */
function byteBody(chunks: Uint8Array[]) {
  const offered: number[] = [];
  let cancelled: unknown = "not cancelled";
  let next = 0;
  const body = new ReadableStream({
    type: "bytes",
    pull(controller: ReadableByteStreamController) {
      const request = controller.byobRequest;
      offered.push(request?.view?.byteLength ?? 0);
      if (next === chunks.length) {
        controller.close();
        request?.respond(0);
        return;
      }
      const chunk = chunks[next++];
      if (!request?.view) return controller.enqueue(chunk);
      const view = new Uint8Array(
        request.view.buffer,
        request.view.byteOffset,
        request.view.byteLength,
      );
      const n = Math.min(chunk.length, view.length);
      view.set(chunk.subarray(0, n));
      if (n < chunk.length) chunks.splice(next, 0, chunk.subarray(n));
      request.respond(n);
    },
    cancel: (reason) => void (cancelled = reason),
  });
  return { body, offered, cancelled: () => cancelled };
}

Deno.test("a byte stream is read into the watch's own buffer: lines and characters split across reads, and an event larger than the buffer, arrive whole", async () => {
  const big = "é".repeat(WATCH_READ_BYTES); // twice the buffer in UTF-8
  const text =
    `{"type":"ADDED","object":{"n":"a"}}\n{"type":"MODIFIED","object":{"n":"${big}"}}\n` +
    `{"type":"DELETED","object":{"n":"ü"}}\n`;
  const bytes = new TextEncoder().encode(text);
  const at = bytes.length - 8; // splits the two bytes of "ü" in the last event
  const cut = text.indexOf("MOD") + 3;
  const { body, offered } = byteBody([
    bytes.subarray(0, cut),
    bytes.subarray(cut, at - 3),
    bytes.subarray(at - 3, at),
    bytes.subarray(at),
  ]);
  const got = [];
  for await (const e of watchEvents<{ n: string }>(body)) got.push([e.type, e.object.n]);
  assertEquals(got, [["ADDED", "a"], ["MODIFIED", big], ["DELETED", "ü"]]);
  assertEquals(offered.every((n) => n > 0 && n <= WATCH_READ_BYTES), true, `offered ${offered}`);
  assertEquals(offered[0], WATCH_READ_BYTES);
});

Deno.test("aborting a watch on a byte stream ends it at once with the signal's reason and cancels the body", async () => {
  let cancelled: unknown = "not cancelled";
  let pulls = 0;
  const body = new ReadableStream({
    type: "bytes",
    pull(controller: ReadableByteStreamController) {
      if (pulls++ === 0) {
        controller.enqueue(new TextEncoder().encode('{"type":"ADDED","object":{}}\n'));
      } // then nothing more: the next read waits
    },
    cancel: (reason) => void (cancelled = reason),
  });
  const abort = new AbortController();
  const events = watchEvents(body, abort.signal);
  assertEquals((await events.next()).value?.type, "ADDED");
  const pending = events.next();
  const reason = new Error("stop watching");
  abort.abort(reason);
  await assertRejects(() => pending, Error, "stop watching");
  assertEquals(cancelled, reason);
});
