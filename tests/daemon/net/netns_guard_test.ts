import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { NetnsGuard, onNetnsFileSystem } from "../../../daemon/net/netns_guard.ts";
import { IS_ROOT, run, uniqueToken, withNetns, withTempDir } from "../../../daemon/dev/netns.ts";
import { CniError } from "../../../lib/cni/errors.ts";

Deno.test("the daemon's own namespace is 'own' by any path, and refused with code 4", async () => {
  const guard = await NetnsGuard.forThisProcess();
  for (
    const path of ["/proc/self/ns/net", `/proc/${Deno.pid}/ns/net`, "/proc/thread-self/ns/net"]
  ) {
    assertEquals(await guard.classify(path), "own", path);
    const err = await assertRejects(() => guard.require(path), CniError);
    assertEquals(err.code, 4);
    await assertRejects(() => guard.forDel(path), CniError);
  }
});

Deno.test("files that are not namespaces (a FIFO, a regular file, a directory, a device) are refused without being opened", async () => {
  const guard = await NetnsGuard.forThisProcess();
  await withTempDir(async (dir) => {
    await run("mkfifo", `${dir}/fifo`);
    await Deno.writeTextFile(`${dir}/file`, "");
    for (const path of [`${dir}/fifo`, `${dir}/file`, dir, "/dev/null", "/proc/self/ns/mnt"]) {
      const kind = await guard.classify(path);
      // The mount namespace is an nsfs file but not a network one: setns refuses it later.
      if (path.endsWith("/mnt")) continue;
      assertEquals(kind, "not-a-namespace", path);
      assertEquals((await assertRejects(() => guard.require(path), CniError)).code, 4);
      assertEquals(await guard.forDel(path), undefined, path);
    }
  });
});

Deno.test("a gone namespace is refused for ADD, allowed for CHECK, and skipped by DEL", async () => {
  const guard = await NetnsGuard.forThisProcess();
  const path = `/var/run/netns/fyt-absent-${uniqueToken()}`;
  assertEquals((await assertRejects(() => guard.require(path), CniError)).code, 4);
  assertEquals(await guard.require(path, true), "gone");
  assertEquals(await guard.forDel(path), undefined);
});

Deno.test({
  name: "a pod's namespace passes; a /var/run/netns entry that is the node's namespace does not",
  ignore: !IS_ROOT,
  fn: async () => {
    const guard = await NetnsGuard.forThisProcess();
    await withNetns(1, async ([pod]) => {
      assertEquals(await guard.classify(pod.path), "pod");
      assertEquals(await guard.forDel(pod.path), pod.path);
    });
    const name = `fyt-node-${uniqueToken()}`;
    await run("ip", "netns", "attach", name, String(Deno.pid));
    try {
      assertEquals(await guard.classify(`/var/run/netns/${name}`), "own");
    } finally {
      await run("ip", "netns", "del", name);
    }
  },
});

Deno.test("runtime namespace paths are looked up on the JS thread, any other on a worker", async () => {
  for (
    const path of [
      "/run/netns/cni-1",
      "/var/run/netns/cni-1",
      "/proc/42/ns/net",
      "/proc/self/ns/net",
      "/proc/thread-self/ns/net",
      "/proc/42/task/43/ns/net",
    ]
  ) assertEquals(onNetnsFileSystem(path), true, path);
  for (
    const path of [
      "/run/netns/../../mnt/nfs/x",
      "/var/run/netns/sub/dir",
      "/mnt/nfs/netns",
      "/proc/42/ns/mnt",
      "/proc/42/root/run/netns/x",
      "run/netns/x",
      "/run/netns/",
    ]
  ) assertEquals(onNetnsFileSystem(path), false, path);
  const nsfs = { dev: 4, ino: 1, isFile: true };
  const seen: string[] = [];
  const guard = new NetnsGuard(
    [nsfs],
    (path) => (seen.push(`worker ${path}`), Promise.resolve({ ...nsfs, ino: 2 })),
    (path) => (seen.push(`js ${path}`), { ...nsfs, ino: 3 }),
  );
  assertEquals(await guard.classify("/var/run/netns/cni-1"), "pod");
  assertEquals(await guard.classify("/mnt/elsewhere/ns"), "pod");
  assertEquals(seen, ["js /var/run/netns/cni-1", "worker /mnt/elsewhere/ns"]);
});
