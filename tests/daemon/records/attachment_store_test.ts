import { assertEquals } from "deno-std/assert/mod.js";
import { type Attachment, AttachmentStore } from "../../../daemon/records/attachment_store.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";

const record: Attachment = {
  containerId: "c1",
  ifname: "eth0",
  netns: "/var/run/netns/p",
  network: "ferry",
  hostIfname: "fy0123",
  result: { cniVersion: "1.1.0" },
  createdAt: "2026-01-01T00:00:00Z",
};

Deno.test("attachments survive a reopen and deletions are remembered", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const store = await AttachmentStore.open(dir);
    await store.put(record);
    await store.put({ ...record, containerId: "c2" });
    await store.delete({ containerId: "c2", ifname: "eth0" });
    await store.delete({ containerId: "absent", ifname: "eth0" });
    const again = await AttachmentStore.open(dir);
    assertEquals(again.get(record), record);
    assertEquals(again.list().length, 1);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an unreadable record does not stop the store from opening: its key is reported damaged", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/c1--eth0.json`, "");
    await Deno.writeTextFile(`${dir}/c2--eth0.json`, '{"containerId":');
    await Deno.writeTextFile(`${dir}/.c3--eth0.json.tmp`, "{}");
    const store = await AttachmentStore.open(dir);
    assertEquals(store.list(), []);
    assertEquals(
      store.damaged().map((k) => `${k.containerId}/${k.ifname}`).sort(),
      ["c1/eth0", "c2/eth0"],
    );
    await store.delete({ containerId: "c1", ifname: "eth0" });
    assertEquals(store.damaged().length, 1);
    const names = [];
    for await (const e of Deno.readDir(dir)) names.push(e.name);
    assertEquals(names, ["c2--eth0.json"]);
  });
});

Deno.test("a container's attachments are found by its ID, in the order first recorded, before and after a reopen", async () => {
  await withTempDir(async (dir) => {
    const store = await AttachmentStore.open(dir);
    await store.put(record);
    await store.put({ ...record, containerId: "c2" });
    await store.put({ ...record, ifname: "net1", parent: "eth0" });
    await store.put({ ...record, ifname: "net2", parent: "eth0" });
    await store.put({ ...record, network: "replaced" }); // keeps its place
    const ifnames = (s: AttachmentStore, id: string) => s.ofContainer(id).map((a) => a.ifname);
    assertEquals(ifnames(store, "c1"), ["eth0", "net1", "net2"]);
    assertEquals(store.ofContainer("c1")[0].network, "replaced");
    assertEquals(ifnames(store, "c2"), ["eth0"]);
    await store.delete({ containerId: "c1", ifname: "net1" });
    assertEquals(ifnames(store, "c1"), ["eth0", "net2"]);
    await store.delete({ containerId: "c2", ifname: "eth0" });
    assertEquals(store.ofContainer("c2"), []);
    assertEquals(ifnames(store, "absent"), []);
    const again = await AttachmentStore.open(dir);
    assertEquals(ifnames(again, "c1").sort(), ["eth0", "net2"]);
    assertEquals(again.ofContainer("c2"), []);
  });
});

Deno.test("a staged record is invisible until committed, a discarded one leaves nothing, and a reopen drops one never committed", async () => {
  await withTempDir(async (dir) => {
    const store = await AttachmentStore.open(dir);
    const files = async () => {
      const names = [];
      for await (const e of Deno.readDir(dir)) names.push(e.name);
      return names.sort();
    };
    const staged = await store.stage(record);
    assertEquals([store.get(record), store.list(), store.ofContainer("c1")], [undefined, [], []]);
    assertEquals(await files(), [".c1--eth0.json.tmp"]);
    assertEquals((await AttachmentStore.open(dir)).list(), [], "a restart does not see it");
    assertEquals(await files(), [], "and removes its file");
    const again = await store.stage(record);
    await again.commit();
    assertEquals(store.get(record), record);
    assertEquals(await files(), ["c1--eth0.json"]);
    const other = await store.stage({ ...record, containerId: "c2" });
    await other.discard();
    assertEquals(await files(), ["c1--eth0.json"]);
    assertEquals(store.get({ containerId: "c2", ifname: "eth0" }), undefined);
    assertEquals(staged.record, record);
  });
});
