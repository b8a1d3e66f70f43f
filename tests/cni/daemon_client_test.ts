import { assertEquals, assertMatch, assertRejects } from "deno-std/assert/mod.js";
import { daemonSender } from "../../cni/daemon_client.ts";
import { CniError } from "../../lib/cni/errors.ts";
import type { CniRequest } from "../../lib/envelope.ts";

const REQ: CniRequest = {
  command: "STATUS",
  args: {},
  path: [],
  config: { cniVersion: "1.1.0", name: "n", type: "ferry" },
};

async function withSocket(
  handler: (req: Request) => Response | Promise<Response>,
  fn: (path: string) => Promise<void>,
) {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/d.sock`;
  const server = Deno.serve({ path, transport: "unix", onListen() {} }, handler);
  try {
    await fn(path);
  } finally {
    await server.shutdown();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("no daemon on the socket is try-again-later (11) naming the socket", async () => {
  const path = `${await Deno.makeTempDir()}/absent.sock`;
  const err = await assertRejects(
    () => daemonSender(path)(REQ, AbortSignal.timeout(1000)),
    CniError,
  );
  assertEquals(err.code, 11);
  assertMatch(err.message, new RegExp(path));
});

Deno.test("a daemon that does not answer in time is try-again-later (11)", async () => {
  const gate = Promise.withResolvers<void>();
  await withSocket(async () => {
    await gate.promise;
    return new Response("{}");
  }, async (path) => {
    const err = await assertRejects(
      () => daemonSender(path)(REQ, AbortSignal.timeout(200)),
      CniError,
    );
    assertEquals(err.code, 11);
    assertMatch(err.message, /in time/);
    gate.resolve();
  });
});

Deno.test("the daemon's JSON reply is returned whatever the HTTP status", async () => {
  await withSocket(
    () => new Response(JSON.stringify({ error: { code: 7, msg: "bad" } }), { status: 400 }),
    async (path) => {
      assertEquals(await daemonSender(path)(REQ, AbortSignal.timeout(2000)), {
        error: { code: 7, msg: "bad" },
      });
    },
  );
});

Deno.test("a reply that is not JSON is an I/O error (5)", async () => {
  await withSocket(() => new Response("<html>"), async (path) => {
    const err = await assertRejects(
      () => daemonSender(path)(REQ, AbortSignal.timeout(2000)),
      CniError,
    );
    assertEquals(err.code, 5);
  });
});
