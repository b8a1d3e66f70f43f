import { assertEquals } from "deno-std/assert/mod.js";
import { type Attachment, AttachmentStore } from "../../daemon/attachment_store.ts";

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
