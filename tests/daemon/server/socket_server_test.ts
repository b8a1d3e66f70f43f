import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { readToEnd } from "../_conn.ts";
import {
  claimSocketPath,
  serveOnSocket,
  SocketInUseError,
} from "../../../daemon/server/socket_server.ts";
import type { SocketReply, SocketRequest } from "../../../daemon/server/http1.ts";
import { unixRequest } from "../../../lib/unix_http.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";

const text = (body: string, status = 200): SocketReply => ({ status, body });
const ok = () => Promise.resolve(text("ok"));

Deno.test("the socket is created 0600 in a new 0700 directory and removed at shutdown", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/run/ferry/f.sock`;
    await claimSocketPath(path);
    const server = await serveOnSocket(path, ok);
    assertEquals((await Deno.stat(path)).mode! & 0o777, 0o600);
    assertEquals((await Deno.stat(`${dir}/run/ferry`)).mode! & 0o777, 0o700);
    await server.shutdown(1000);
    await assertRejects(() => Deno.lstat(path), Deno.errors.NotFound);
  });
});

Deno.test("a stale socket nobody answers on is replaced", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/f.sock`;
    // A process that bound the socket and died without removing it (as after SIGKILL).
    const py = `import socket; socket.socket(socket.AF_UNIX).bind(${JSON.stringify(path)})`;
    await new Deno.Command("python3", { args: ["-c", py] }).output();
    assertEquals((await Deno.lstat(path)).isSocket, true);
    await claimSocketPath(path);
    const server = await serveOnSocket(path, ok);
    assertEquals(
      (await unixRequest(path, "GET", "/healthz", undefined, AbortSignal.timeout(1000))).status,
      200,
    );
    await server.shutdown(1000);
  });
});

Deno.test("a second daemon on a live socket refuses to start", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/f.sock`;
    await claimSocketPath(path);
    const server = await serveOnSocket(path, ok);
    try {
      await assertRejects(() => claimSocketPath(path), SocketInUseError, "already serving");
    } finally {
      await server.shutdown(1000);
    }
  });
});

Deno.test("a path that is not a socket is never replaced", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/f.sock`;
    await Deno.writeTextFile(path, "important");
    await assertRejects(() => claimSocketPath(path), SocketInUseError, "not a socket");
    assertEquals(await Deno.readTextFile(path), "important");
  });
});

Deno.test("shutdown lets an in-flight request finish", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/f.sock`;
    const entered = Promise.withResolvers<void>();
    const server = await serveOnSocket(path, async () => {
      entered.resolve();
      await new Promise((r) => setTimeout(r, 200));
      return text("finished");
    });
    const inflight = unixRequest(path, "POST", "/v1/cni", "{}", AbortSignal.timeout(5000));
    await entered.promise;
    await server.shutdown(5000);
    assertEquals((await inflight).body, "finished");
  });
});

/** Opens a raw connection and sends `text` (a partial request, or none). */
async function rawConn(path: string, text = ""): Promise<Deno.UnixConn> {
  const conn = await Deno.connect({ transport: "unix", path });
  if (text) await conn.write(new TextEncoder().encode(text));
  return conn;
}

const reject = (status: number, message: string): SocketReply => ({
  status,
  contentType: "application/json",
  body: JSON.stringify({ error: { code: status === 503 ? 11 : 6, msg: message } }),
});

Deno.test("a request that arrives too slowly is cut at the read deadline: partial requests hold no fds", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/f.sock`;
    const server = await serveOnSocket(path, ok, { readTimeoutMs: 300, reject });
    try {
      const started = performance.now();
      const conns = await Promise.all([
        rawConn(path, "POST /v1/cni HTTP/1.1\r\nHost: f"),
        rawConn(path, 'POST /v1/cni HTTP/1.1\r\nContent-Length: 100\r\n\r\n{"partial'),
        rawConn(path),
      ]);
      const answers = await Promise.all(conns.map(readToEnd));
      for (const a of answers) assertEquals(a.startsWith("HTTP/1.1 408"), true, a);
      assertEquals(performance.now() - started < 5000, true);
      await eventually(() => Promise.resolve(server.status().connections === 0), "all closed");
    } finally {
      await server.shutdown(1000);
    }
  });
});

Deno.test("past the connection limit clients get 503 with CNI code 11 at once, and are served again after", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/f.sock`;
    const server = await serveOnSocket(path, ok, { readTimeoutMs: 500, maxConnections: 3, reject });
    try {
      const held = await Promise.all(
        [1, 2, 3].map(() => rawConn(path, "GET /healthz HTTP/1.1\r\n")),
      );
      await new Promise((r) => setTimeout(r, 50));
      const over = await unixRequest(path, "GET", "/healthz", undefined, AbortSignal.timeout(2000));
      assertEquals([over.status, JSON.parse(over.body).error.code], [503, 11]);
      assertEquals(server.status().refused >= 1, true);
      await Promise.all(held.map(readToEnd));
      await eventually(() => Promise.resolve(server.status().connections === 0), "all closed");
      const after = await unixRequest(
        path,
        "GET",
        "/healthz",
        undefined,
        AbortSignal.timeout(2000),
      );
      assertEquals([after.status, after.body], [200, "ok"]);
    } finally {
      await server.shutdown(1000);
    }
  });
});

Deno.test("oversized heads and bodies, bad framing and smuggling attempts are refused before the handler", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/f.sock`;
    let handled = 0;
    const server = await serveOnSocket(path, () => (handled++, ok()), {
      maxBodyBytes: 100,
      maxHeaderBytes: 1024,
      reject,
    });
    try {
      const cases: [string, number][] = [
        [`POST /v1/cni HTTP/1.1\r\nX: ${"a".repeat(2000)}\r\n\r\n`, 431],
        ["POST /v1/cni HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 413],
        ["POST /v1/cni HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400],
        ["POST /v1/cni HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501],
        ["POST /v1/cni HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400],
        ["GARBAGE\r\n\r\n", 400],
        ["POST v1/cni HTTP/1.1\r\n\r\n", 400],
        ["POST /v1/cni HTTP/1.1\r\nbad header\r\n\r\n", 400],
        ["POST /v1/cni HTTP/1.1\r\nX-Nul: a\0b\r\n\r\n", 400],
        ["TRACE /v1/cni HTTP/1.1\r\n\r\n", 400],
        ["connect /v1/cni HTTP/1.1\r\n\r\n", 400],
        ["POST /v1/cni HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", 400],
        ["POST /v1/cni HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400],
        ["POST /v1/cni HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n", 413],
      ];
      for (const [text, status] of cases) {
        const answer = await readToEnd(await rawConn(path, text));
        assertEquals(answer.split("\r\n")[0].split(" ")[1], String(status), text.slice(0, 60));
      }
      assertEquals(handled, 0);
      const chunked = await readToEnd(
        await rawConn(
          path,
          "POST /v1/cni HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        ),
      );
      assertEquals(chunked.startsWith("HTTP/1.1 200"), true);
    } finally {
      await server.shutdown(1000);
    }
  });
});

Deno.test("the handler gets the method, the path without its query, headers by lower-case name and the body whole; its reply goes out with its type, length and reason", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/f.sock`;
    const seen: SocketRequest[] = [];
    const server = await serveOnSocket(path, (req) => {
      seen.push(req);
      return Promise.resolve({ status: 404, contentType: "application/json", body: '{"é":1}' });
    });
    try {
      const body = '{"command":"ADD","x":"ü"}';
      const bytes = new TextEncoder().encode(body).length;
      const answer = await readToEnd(
        await rawConn(
          path,
          `POST /v1/cni?debug=1 HTTP/1.1\r\nHost: ferry\r\nX-Trace: \ta \r\nx-trace:b\r\n` +
            `Content-Length: ${bytes}\r\n\r\n${body}`,
        ),
      );
      const [req] = seen;
      assertEquals([req.method, req.path], ["POST", "/v1/cni"]);
      // The standard methods in any case are the standard methods, as fetch reads them.
      await readToEnd(await rawConn(path, "get /healthz HTTP/1.1\r\n\r\n"));
      await readToEnd(await rawConn(path, "Frob /healthz HTTP/1.1\r\n\r\n"));
      assertEquals(seen.slice(1).map((r) => r.method), ["GET", "Frob"]);
      assertEquals(req.headers.get("x-trace"), "a, b");
      assertEquals(req.headers.get("host"), "ferry");
      assertEquals(new TextDecoder().decode(req.body), body);
      const [head, sent] = answer.split("\r\n\r\n");
      const lines = head.split("\r\n");
      assertEquals(lines[0], "HTTP/1.1 404 Not Found");
      assertEquals(lines.slice(1).sort(), [
        "connection: close",
        "content-length: 8",
        "content-type: application/json",
      ]);
      assertEquals(sent, '{"é":1}');
    } finally {
      await server.shutdown(1000);
    }
  });
});

Deno.test("a request's signal aborts when its client hangs up while it is handled", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/f.sock`;
    const aborted = Promise.withResolvers<boolean>();
    const server = await serveOnSocket(path, (req) => {
      const timer = setTimeout(() => aborted.resolve(false), 3000);
      req.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        aborted.resolve(true);
      });
      return aborted.promise.then(() => text("late"));
    });
    try {
      await unixRequest(path, "POST", "/v1/cni", "{}", AbortSignal.timeout(100)).catch(() => {});
      assertEquals(await aborted.promise, true);
    } finally {
      await server.shutdown(1000);
    }
  });
});

/** Waits (bounded) until `probe` holds: the server reacts to a file-system event. */
async function eventually(probe: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

Deno.test("a removed, replaced or loosened socket is put back, and the server counts it", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/run/f.sock`;
    await claimSocketPath(path);
    const server = await serveOnSocket(path, ok);
    const answers = () =>
      unixRequest(path, "GET", "/healthz", undefined, AbortSignal.timeout(500))
        .then((r) => r.status === 200, () => false);
    try {
      // What a shim may do with its read+write grant on the path: remove it...
      await Deno.remove(path);
      await eventually(answers, "the socket answers again after removal");
      assertEquals(server.status().recreated, 1);
      assertEquals(server.status().lastRecreated?.found, "no socket at all");
      // ...put a socket of its own there...
      await Deno.remove(path);
      const py = `import socket; socket.socket(socket.AF_UNIX).bind(${JSON.stringify(path)})`;
      await new Deno.Command("python3", { args: ["-c", py] }).output();
      await eventually(answers, "the socket answers again after replacement");
      assertEquals(server.status().recreated >= 2, true);
      // ...or open it to everyone.
      await Deno.chmod(path, 0o666);
      await eventually(
        async () => ((await Deno.stat(path)).mode! & 0o777) === 0o600,
        "the mode is 0600 again",
      );
    } finally {
      await server.shutdown(1000);
    }
    await assertRejects(() => Deno.lstat(path), Deno.errors.NotFound);
  });
});

Deno.test("work registered for an undelivered answer runs when the client hung up first", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/f.sock`;
    const undone = Promise.withResolvers<string>();
    const release = Promise.withResolvers<void>();
    const server = await serveOnSocket(path, async (req) => {
      req.whenUndelivered(() => Promise.resolve(undone.resolve("undone")));
      await release.promise;
      return text("too late");
    });
    try {
      await unixRequest(path, "POST", "/v1/cni", "{}", AbortSignal.timeout(100)).catch(() => {});
      release.resolve();
      assertEquals(await undone.promise, "undone");
      // A delivered answer runs nothing.
      let ran = false;
      const again = await serveOnSocket(`${dir}/g.sock`, (req) => {
        req.whenUndelivered(() => Promise.resolve(void (ran = true)));
        return ok();
      });
      await unixRequest(`${dir}/g.sock`, "GET", "/x", undefined, AbortSignal.timeout(1000));
      await again.shutdown(1000);
      assertEquals(ran, false);
    } finally {
      await server.shutdown(1000);
    }
  });
});

Deno.test("a handler that throws still gets its connection answered (500) and closed", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/f.sock`;
    const server = await serveOnSocket(path, () => Promise.reject(new Error("bug")), { reject });
    try {
      const res = await unixRequest(path, "GET", "/x", undefined, AbortSignal.timeout(2000));
      assertEquals(res.status, 500);
      await eventually(() => Promise.resolve(server.status().connections === 0), "closed");
    } finally {
      await server.shutdown(1000);
    }
  });
});

Deno.test("a client that half-closes after its whole request still gets the answer, and its request is not aborted", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/f.sock`;
    let aborted = 0;
    const server = await serveOnSocket(path, async (req) => {
      req.signal.addEventListener("abort", () => aborted++);
      // Longer than the hang-up watcher's poll, so the half-close is seen while the handler runs.
      await new Promise((r) => setTimeout(r, 500));
      return text(req.signal.aborted ? "aborted" : "answered");
    });
    try {
      const answers = await Promise.all([1, 2, 3].map(async () => {
        const conn = await rawConn(path, "GET /healthz HTTP/1.1\r\nHost: f\r\n\r\n");
        await conn.closeWrite();
        return await readToEnd(conn);
      }));
      for (const a of answers) {
        assertEquals(a.split("\r\n")[0], "HTTP/1.1 200 OK", a);
        assertEquals(a.endsWith("answered"), true, a);
      }
      assertEquals(aborted, 0);
    } finally {
      await server.shutdown(1000);
    }
  });
});
