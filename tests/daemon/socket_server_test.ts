import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { claimSocketPath, serveOnSocket, SocketInUseError } from "../../daemon/socket_server.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { withTempDir } from "../../daemon/dev/netns.ts";

const ok = () => Promise.resolve(new Response("ok"));

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
      return new Response("finished");
    });
    const inflight = unixRequest(path, "POST", "/v1/cni", "{}", AbortSignal.timeout(5000));
    await entered.promise;
    await server.shutdown(5000);
    assertEquals((await inflight).body, "finished");
  });
});
