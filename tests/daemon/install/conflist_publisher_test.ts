// The staged conflist reaches the runtime's config directory only once the daemon is ready, and
// is put back when it goes missing while the daemon is ready.
import { assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { ConflistPublisher } from "../../../daemon/install/conflist_publisher.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";

const CONF = '{"cniVersion":"1.0.0","name":"ferry","plugins":[{"type":"ferry"}]}\n';

async function files(dir: string): Promise<string[]> {
  const names = [];
  for await (const e of Deno.readDir(dir)) names.push(e.name);
  return names.sort();
}

Deno.test("the conflist is published only once the daemon is ready, whole, and stays when it is not ready any more", async () => {
  await withTempDir(async (dir) => {
    await Deno.mkdir(`${dir}/stage`);
    await Deno.mkdir(`${dir}/net.d`);
    await Deno.writeTextFile(`${dir}/stage/10-ferry.conflist`, CONF);
    let ready = false;
    const publisher = new ConflistPublisher({
      staged: `${dir}/stage/10-ferry.conflist`,
      confDir: `${dir}/net.d`,
      ready: () => ready,
      logger: getLogger(["ferry", "test"]),
    });
    assertEquals(await publisher.publishIfReady(), false);
    assertEquals(await files(`${dir}/net.d`), [], "nothing while not ready");
    ready = true;
    assertEquals(await publisher.publishIfReady(), true);
    assertEquals(await files(`${dir}/net.d`), ["10-ferry.conflist"]);
    assertEquals(await Deno.readTextFile(`${dir}/net.d/10-ferry.conflist`), CONF);
    assertEquals(await publisher.publishIfReady(), false, "already there: nothing written");
    ready = false;
    assertEquals(await publisher.publishIfReady(), false);
    assertEquals(await files(`${dir}/net.d`), ["10-ferry.conflist"], "kept while not ready");
    // Removed by hand while ready: written back.
    ready = true;
    await Deno.remove(`${dir}/net.d/10-ferry.conflist`);
    assertEquals(await publisher.publishIfReady(), true);
    assertEquals(publisher.published, 2);
  });
});

Deno.test("started, the publisher looks again until the daemon turns ready", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/10-ferry.conflist`, CONF);
    await Deno.mkdir(`${dir}/net.d`);
    let ready = false;
    const publisher = new ConflistPublisher({
      staged: `${dir}/10-ferry.conflist`,
      confDir: `${dir}/net.d`,
      ready: () => ready,
      logger: getLogger(["ferry", "test"]),
      intervalMs: 10,
    });
    publisher.start();
    try {
      await new Promise((r) => setTimeout(r, 50));
      assertEquals(await files(`${dir}/net.d`), []);
      ready = true;
      for (let i = 0; i < 100 && publisher.published === 0; i++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      assertEquals(await files(`${dir}/net.d`), ["10-ferry.conflist"]);
    } finally {
      await publisher.close();
    }
  });
});
