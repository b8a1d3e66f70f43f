// The TCP port (`server.httpPort`) is open to every local process: it must bound its clients as
// the CNI socket does, and nothing a client does may end the daemon.
import { assertEquals } from "deno-std/assert/mod.js";
import { readToEnd } from "../_conn.ts";
import { sameSecret, serveHttpPort } from "../../../daemon/server/http_port.ts";

const deps = {
  healthy: () => true,
  ready: () => false,
  metrics: (detail: boolean) =>
    Promise.resolve({
      text: detail ? 'ferry_up{pod="a/b"} 1\n' : "ferry_up 1\n",
      contentType: "text/plain; version=0.0.4",
    }),
};

async function tcp(address: string, text = ""): Promise<Deno.TcpConn> {
  const [hostname, port] = address.split(":");
  const conn = await Deno.connect({ hostname, port: Number(port) });
  if (text) await conn.write(new TextEncoder().encode(text));
  return conn;
}

/** Waits (bounded) until `probe` holds. */
async function eventually(probe: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function get(address: string, path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://${address}${path}`, { signal: AbortSignal.timeout(5000) });
  return { status: res.status, body: await res.text() };
}

Deno.test("the TCP port answers probes and metrics, and only GET", async () => {
  const port = serveHttpPort("127.0.0.1", 0, deps);
  try {
    assertEquals(await get(port.address, "/healthz"), { status: 200, body: "ok\n" });
    assertEquals(await get(port.address, "/readyz"), { status: 503, body: "not ok\n" });
    assertEquals(await get(port.address, "/metrics"), {
      status: 200,
      body: 'ferry_up{pod="a/b"} 1\n',
    });
    assertEquals((await get(port.address, "/nothing")).status, 404);
    const post = await fetch(`http://${port.address}/healthz`, { method: "POST", body: "x" });
    assertEquals([post.status, await post.text()], [405, "GET only\n"]);
  } finally {
    await port.close();
  }
});

Deno.test("the TCP port cuts partial headers at the read deadline and holds no connection after", async () => {
  const port = serveHttpPort("127.0.0.1", 0, deps, { readTimeoutMs: 300 });
  try {
    const held = await Promise.all(
      Array.from({ length: 50 }, () => tcp(port.address, "GET /healthz HTTP/1.1\r\nHost: x")),
    );
    const answers = await Promise.all(held.map(readToEnd));
    for (const a of answers) assertEquals(a.split("\r\n")[0], "HTTP/1.1 408 Request Timeout", a);
    await eventually(() => port.counts().connections === 0, "every connection was closed");
    assertEquals(await get(port.address, "/healthz"), { status: 200, body: "ok\n" });
  } finally {
    await port.close();
  }
});

Deno.test("past its connection cap the TCP port answers 503 at once, and serves again after", async () => {
  const port = serveHttpPort("127.0.0.1", 0, deps, { readTimeoutMs: 500, maxConnections: 4 });
  try {
    const held = await Promise.all([1, 2, 3, 4].map(() => tcp(port.address, "GET /")));
    await new Promise((r) => setTimeout(r, 50));
    const over = await readToEnd(await tcp(port.address, "GET /healthz HTTP/1.1\r\n\r\n"));
    assertEquals(over.split("\r\n")[0], "HTTP/1.1 503 Service Unavailable", over);
    assertEquals(port.counts().refused >= 1, true);
    await Promise.all(held.map(readToEnd));
    await eventually(() => port.counts().connections === 0, "every connection was closed");
    assertEquals(await get(port.address, "/healthz"), { status: 200, body: "ok\n" });
  } finally {
    await port.close();
  }
});

Deno.test("a process out of file descriptors keeps its TCP port: accepts fail, are retried, and it serves again", async () => {
  // The port alone in a process allowed 64 descriptors; 150 connections that never finish their
  // headers exhaust them (the probe's 20,000 against the daemon's own limit, scaled down).
  const child = new Deno.Command("prlimit", {
    args: [
      "--nofile=64:64",
      Deno.execPath(),
      "run",
      "--allow-all",
      "--frozen",
      new URL("../fixtures/http_port_process.ts", import.meta.url).pathname,
      "2000",
      "1000",
    ],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  try {
    const address = (await lines.read()).value!.trim();
    const conns: Deno.TcpConn[] = [];
    for (let i = 0; i < 150; i++) conns.push(await tcp(address, "GET /healthz HTTP/1.1\r\n"));
    await new Promise((r) => setTimeout(r, 300));
    // Still alive while starved:
    assertEquals(
      await Promise.race([child.status.then(() => "exited"), Promise.resolve("alive")]),
      "alive",
    );
    await Promise.all(conns.map(readToEnd));
    // Once the held connections were cut at the read deadline, the queued ones are accepted and
    // answered too, and new requests are served.
    let answer: { status: number; body: string } | undefined;
    for (let i = 0; i < 50 && !answer; i++) {
      answer = await get(address, "/healthz").catch(() => undefined);
      if (!answer) await new Promise((r) => setTimeout(r, 100));
    }
    assertEquals(answer, { status: 200, body: "ok\n" });
    assertEquals(
      await Promise.race([child.status.then(() => "exited"), Promise.resolve("alive")]),
      "alive",
    );
  } finally {
    try {
      child.kill("SIGKILL");
    } catch { /* exited */ }
    await child.status;
    await lines.cancel();
    await child.stderr.cancel();
  }
});

Deno.test("the scrapers' port shows tenants' names only to a scraper with the detail token; a wrong one is 401", async () => {
  let token: string | undefined = "s3cret-token";
  const port = serveHttpPort("127.0.0.1", 0, {
    ...deps,
    access: { detailToken: () => Promise.resolve(token) },
  });
  const scrape = async (authorization?: string) => {
    const res = await fetch(`http://${port.address}/metrics`, {
      headers: authorization ? { authorization } : {},
      signal: AbortSignal.timeout(5000),
    });
    return { status: res.status, body: await res.text() };
  };
  try {
    assertEquals(await scrape(), { status: 200, body: "ferry_up 1\n" }, "no token: no names");
    assertEquals(await scrape("Bearer s3cret-token"), {
      status: 200,
      body: 'ferry_up{pod="a/b"} 1\n',
    }, "the token: the names");
    for (const wrong of ["Bearer s3cret-tokem", "Bearer s3cret-token2", "Bearer ", "Basic eDp5"]) {
      assertEquals(await scrape(wrong), { status: 401, body: "unauthorized\n" }, wrong);
    }
    token = undefined; // no token configured: nobody gets the names
    assertEquals((await scrape("Bearer s3cret-token")).status, 401);
    assertEquals((await scrape()).body, "ferry_up 1\n");
  } finally {
    await port.close();
  }
});

Deno.test("the TCP port's readiness carries the degraded note when ready", async () => {
  const port = serveHttpPort("127.0.0.1", 0, {
    ...deps,
    ready: () => true,
    readyNote: () => "degraded: n4 10.244.4.0/24: ENETUNREACH",
  });
  try {
    assertEquals(await get(port.address, "/readyz"), {
      status: 200,
      body: "ok\ndegraded: n4 10.244.4.0/24: ENETUNREACH\n",
    });
    assertEquals(await get(port.address, "/healthz"), { status: 200, body: "ok\n" });
  } finally {
    await port.close();
  }
});

Deno.test("secrets are compared whole", () => {
  assertEquals(sameSecret("abc", "abc"), true);
  for (const [a, b] of [["abc", "abd"], ["abc", "ab"], ["", "a"], ["ab\u00e9", "ab\u00e8"]]) {
    assertEquals(sameSecret(a, b), false, `${a} ${b}`);
  }
});
