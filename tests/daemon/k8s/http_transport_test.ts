// The fetch transport's time limit: a server that accepts a request and never answers it (or
// stops halfway through its answer) fails the request as an unreachable server once the limit
// passes, instead of holding its caller for the kernel's TCP timeouts; a watch's stream is bounded
// only until its headers; the caller's own abort stays the caller's.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { HttpTransport } from "../../../daemon/k8s/transport.ts";
import { KubeApiError, KubeUnreachableError } from "../../../daemon/k8s/errors.ts";
import { AnnotationWriter } from "../../../daemon/k8s/annotation_writer.ts";
import { getLogger } from "@logtape/logtape";

const enc = new TextEncoder();

/**
 * A loopback HTTP/1.1 server whose every connection is handed to `serve` once its request head is
 * read. Connections stay open until the server is disposed (as a hung server's would), and the
 * transports made with `transport` are closed then too.
 */
function rawServer(serve: (conn: Deno.Conn) => Promise<void>) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns = new Set<Deno.Conn>();
  const served: Promise<void>[] = [];
  const accepting = (async () => {
    for await (const conn of listener) {
      conns.add(conn);
      served.push((async () => {
        const buf = new Uint8Array(64 * 1024);
        let head = "";
        while (!head.includes("\r\n\r\n")) {
          const n = await conn.read(buf).catch(() => null);
          if (n === null) return;
          head += new TextDecoder().decode(buf.subarray(0, n));
        }
        await serve(conn).catch(() => {});
      })());
    }
  })().catch(() => {});
  const url = `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`;
  const transports: HttpTransport[] = [];
  return {
    url,
    /** A transport to this server with that time limit, closed with the server. */
    transport(requestTimeoutMs: number): HttpTransport {
      const t = new HttpTransport({ server: url }, { requestTimeoutMs });
      transports.push(t);
      return t;
    },
    async [Symbol.asyncDispose]() {
      for (const t of transports) t.close();
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch { /* closed already */ }
      }
      await accepting;
      await Promise.all(served);
    },
  };
}

/** Holds `conn` without answering until the peer or the server's disposal closes it. */
async function hold(conn: Deno.Conn): Promise<void> {
  const buf = new Uint8Array(4096);
  while ((await conn.read(buf).catch(() => null)) !== null) { /* discard */ }
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Fails the test instead of letting it hang when `p` never settles. */
async function within<T>(ms: number, p: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`still pending after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, hung]);
  } finally {
    clearTimeout(timer);
  }
}

Deno.test("a request the server accepts and never answers fails as unreachable after the time limit", async () => {
  await using server = rawServer(hold);
  const t = server.transport(300);
  const started = performance.now();
  await within(
    5000,
    assertRejects(
      () => t.json({ method: "PATCH", path: "/api/v1/pods", body: {} }),
      KubeUnreachableError,
      "no answer within 0.3 s",
    ),
  );
  assert(performance.now() - started >= 250, "failed before its time limit");
});

Deno.test("an answer whose body stops halfway fails as unreachable after the time limit", async () => {
  await using server = rawServer(async (conn) => {
    await conn.write(enc.encode(
      'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"items":[',
    ));
    await hold(conn);
  });
  const t = server.transport(300);
  await within(
    5000,
    assertRejects(
      () => t.json({ method: "GET", path: "/api/v1/pods" }),
      KubeUnreachableError,
      "no answer within 0.3 s",
    ),
  );
});

Deno.test("a watch stream outlives the time limit once its headers came, and ends with the caller's abort", async () => {
  await using server = rawServer(async (conn) => {
    await conn.write(enc.encode(
      "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
    ));
    await sleep(700); // more than twice the limit
    const event = '{"type":"ADDED"}\n';
    await conn.write(enc.encode(`${event.length.toString(16)}\r\n${event}\r\n`));
    await hold(conn);
  });
  const t = server.transport(300);
  const stop = new AbortController();
  const stream = await within(
    5000,
    t.stream({
      method: "GET",
      path: "/api/v1/pods",
      query: { watch: true },
      signal: stop.signal,
    }),
  );
  const reader = stream.getReader();
  const first = await within(5000, reader.read());
  assertEquals(new TextDecoder().decode(first.value), '{"type":"ADDED"}\n');
  stop.abort();
  await within(5000, assertRejects(() => reader.read()));
});

Deno.test("the caller's own abort surfaces as its reason, not as an unreachable server", async () => {
  await using server = rawServer(hold);
  const t = server.transport(10_000);
  const stop = new AbortController();
  const reason = new Error("stopping");
  setTimeout(() => stop.abort(reason), 100);
  const e = await within(
    5000,
    assertRejects(() => t.json({ method: "GET", path: "/api/v1/pods", signal: stop.signal })),
  );
  assertEquals(e, reason);
});

Deno.test("an error answer within the time limit keeps its status and reason", async () => {
  await using server = rawServer(async (conn) => {
    const body = '{"kind":"Status","code":409,"reason":"Conflict","message":"stale"}';
    await conn.write(enc.encode(
      `HTTP/1.1 409 Conflict\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
    ));
    conn.close();
  });
  const t = server.transport(60_000);
  const e = await assertRejects(() => t.json({ method: "PUT", path: "/x", body: {} }));
  assert(e instanceof KubeApiError && e.isConflict, `got ${e}`);
});

Deno.test("annotation writes to a server that never answers fail at the time limit and are retried, not left hanging", async () => {
  await using server = rawServer(hold);
  const t = server.transport(200);
  const writer = new AnnotationWriter(
    (pod, value) =>
      t.json({
        method: "PATCH",
        path: `/api/v1/namespaces/${pod.namespace}/pods/${pod.name}`,
        body: { metadata: { annotations: { a: value } } },
        contentType: "application/merge-patch+json",
      }).then(() => {}),
    getLogger(["ferry", "test"]),
    { retries: 2, backoffMs: 10 },
  );
  writer.schedule({ namespace: "default", name: "p" }, () => "v");
  // Two tries time out (0.2 s each), the second counts as a failing pod; the write goes on.
  await within(
    5000,
    (async () => {
      while (writer.failures < 1) await sleep(20);
    })(),
  );
  assert(writer.writes >= 2);
  assertEquals(writer.pending, 1);
  await writer.close();
});
