// libnftables in-process, in real namespaces: where the table lands (the pod's namespace, never
// the daemon's), what a refused script leaves (nothing), and what a removal, a gone namespace and
// the daemon's own namespace get. Needs root and libnftables.
import { assert, assertEquals, assertInstanceOf, assertRejects } from "deno-std/assert/mod.js";
import { Libc } from "../../../../daemon/net/netlink/libc.ts";
import {
  deleteTableBatch,
  NFPROTO_NETDEV,
  NftLib,
  NftScriptError,
} from "../../../../daemon/net/netlink/nft_lib.ts";
import { parseReplies } from "../../../../daemon/net/netlink/messages.ts";
import { podGuardScript, podGuardTable } from "../../../../daemon/portsec/pod_guard.ts";
import {
  IS_ROOT,
  run,
  type TestNetns,
  uniqueToken,
  withNetns,
} from "../../../../daemon/dev/netns.ts";

const loadable = (() => {
  try {
    Deno.dlopen("libnftables.so.1", {}).close();
    return true;
  } catch {
    return false;
  }
})();
const opts = { ignore: !IS_ROOT || !loadable };

/** The tables `nft list tables` shows in `ns` (the test's own namespace when undefined). */
async function tables(ns?: TestNetns): Promise<string[]> {
  const out = ns
    ? await run("ip", "netns", "exec", ns.name, "nft", "list", "tables")
    : await run("nft", "list", "tables");
  return out.split("\n").filter((l) => l.trim());
}

/** The number of this process's open descriptors. */
function openFds(): number {
  return [...Deno.readDirSync("/proc/self/fd")].length;
}

/**
 * A pod-like namespace with an interface `net1` for the guard's egress hook, and a guard table
 * name and script of the test's own; a table of that name is removed from the test's own
 * namespace afterwards, should a failure have put it there.
 */
async function withPod<T>(
  fn: (ns: TestNetns, guard: { name: string; script: string }) => Promise<T>,
): Promise<T> {
  const table = `fnl${uniqueToken()}`;
  const name = podGuardTable(table, "net1");
  const script = podGuardScript(table, {
    ifname: "net1",
    mac: "02:00:00:00:00:01",
    ips: ["192.168.1.5", "fd00::5"],
  });
  try {
    return await withNetns(1, async ([ns]) => {
      await run("ip", "-n", ns.name, "link", "add", "net1", "type", "veth", "peer", "name", "p1");
      return await fn(ns, { name, script });
    });
  } finally {
    await run("nft", "delete", "table", "netdev", name).catch(() => {});
  }
}

Deno.test({
  name:
    "a script runs inside the pod's namespace: the guard table is there with its rules and not in the daemon's namespace, the thread is back home, and no descriptor stays open",
  ...opts,
  fn: () =>
    withPod(async (pod, { name, script }) => {
      const nft = NftLib.open(Libc.open());
      const home = await Deno.readLink("/proc/thread-self/ns/net");
      const fds = openFds();
      await nft.applyIn(pod.path, script);
      await nft.settled();
      assertEquals(await Deno.readLink("/proc/thread-self/ns/net"), home, "the thread stayed away");
      assert(
        (await tables(pod)).includes(`table netdev ${name}`),
        `no table ${name} in the pod's namespace: ${await tables(pod)}`,
      );
      const listed = await run(
        "ip",
        "netns",
        "exec",
        pod.name,
        "nft",
        "list",
        "table",
        "netdev",
        name,
      );
      assert(listed.includes(`hook egress device "net1"`), listed);
      assert(listed.includes(`comment "mac"`) && listed.includes(`comment "redirect"`), listed);
      assert(
        !(await tables()).some((t) => t.includes(name)),
        `the table was written in the daemon's namespace: ${await tables()}`,
      );
      // Written again whole (an ADD repeated), then removed as a DEL does.
      await nft.applyIn(pod.path, script);
      await nft.removeTableIn(pod.path, NFPROTO_NETDEV, name);
      await nft.settled();
      assertEquals(await tables(pod), [], "the table outlived its removal");
      assertEquals(openFds(), fds, "descriptors left open");
    }),
});

Deno.test({
  name:
    "a script nft refuses (a syntax error) or the kernel refuses (a table to delete that is not there, after a whole guard table) throws nft's own error text and leaves no table anywhere and no descriptor open",
  ...opts,
  fn: () =>
    withPod(async (pod, { name, script }) => {
      const nft = NftLib.open(Libc.open());
      const fds = openFds();
      const cases: [string, string, RegExp][] = [
        ["a syntax error", script.replace("counter drop", "counter dorp"), /syntax error/],
        [
          "a kernel refusal",
          `${script}delete table netdev ${name}-nosuch\n`,
          /No such file or directory/,
        ],
      ];
      for (const [what, bad, says] of cases) {
        const e = await assertRejects(() => nft.applyIn(pod.path, bad));
        assertInstanceOf(e, NftScriptError, `${what}: ${e}`);
        assert(says.test(e.message), `${what}: not nft's text: ${e.message}`);
        // The process says the same of the same script.
        const out = await new Deno.Command("ip", {
          args: ["netns", "exec", pod.name, "nft", "-f", "-"],
          stdin: "piped",
          stderr: "piped",
        }).spawn();
        const w = out.stdin.getWriter();
        await w.write(new TextEncoder().encode(bad));
        await w.close();
        const stderr = new TextDecoder().decode((await out.output()).stderr);
        assert(says.test(stderr), `${what}: nft itself said: ${stderr}`);
      }
      await nft.settled();
      assertEquals(await tables(pod), [], "a refused script left a table in the pod");
      assert(!(await tables()).some((t) => t.includes(name)), "a table in the daemon's namespace");
      assertEquals(openFds(), fds, "descriptors left open");
    }),
});

Deno.test({
  name:
    "removing a table that is not there, or from a namespace that is gone, succeeds, and leaves the pod's other tables; writing in a namespace that is gone, or the daemon's own, is refused naming why, with nothing written and the thread back home",
  ...opts,
  fn: () =>
    withPod(async (pod, { name, script }) => {
      const nft = NftLib.open(Libc.open());
      await nft.removeTableIn(pod.path, NFPROTO_NETDEV, name);
      await nft.applyIn(pod.path, script);
      await run("ip", "netns", "exec", pod.name, "nft", "add", "table", "netdev", `${name}-own`);
      await nft.removeTableIn(pod.path, NFPROTO_NETDEV, name);
      await nft.removeTableIn(pod.path, NFPROTO_NETDEV, name);
      assertEquals(await tables(pod), [`table netdev ${name}-own`], "the pod's own table went");
      const home = await Deno.readLink("/proc/thread-self/ns/net");
      const fds = openFds();
      const gone = `/var/run/netns/fyt-gone-${uniqueToken()}`;
      await nft.removeTableIn(gone, NFPROTO_NETDEV, name);
      // A path whose namespace was unmounted (a plain file now).
      const unmounted = await Deno.makeTempFile({ prefix: "fyt-unmounted-" });
      try {
        await nft.removeTableIn(unmounted, NFPROTO_NETDEV, name);
        const e = await assertRejects(() => nft.applyIn(gone, script));
        assert(/ENOENT/.test(String(e)) && String(e).includes(gone), String(e));
        const e2 = await assertRejects(() => nft.applyIn(unmounted, script));
        assert(/EINVAL/.test(String(e2)), String(e2));
      } finally {
        await Deno.remove(unmounted);
      }
      for (const own of ["/proc/self/ns/net", `/proc/${Deno.pid}/ns/net`]) {
        const refused = await assertRejects(() => nft.applyIn(own, script));
        assert(String(refused).includes("the daemon's own network namespace"), String(refused));
        const kept = await assertRejects(() => nft.removeTableIn(own, NFPROTO_NETDEV, name));
        assert(String(kept).includes("the daemon's own network namespace"), String(kept));
      }
      assert(!(await tables()).some((t) => t.includes(name)), "written in the daemon's namespace");
      assertEquals(await Deno.readLink("/proc/thread-self/ns/net"), home);
      await nft.settled();
      assertEquals(openFds(), fds, "descriptors left open");
    }),
});

Deno.test("a table's removal is one message between a batch's begin and end: it reads nothing of the namespace's ruleset", () => {
  const replies = parseReplies(deleteTableBatch(NFPROTO_NETDEV, "ferry-portsec-net1", 2));
  assertEquals(
    replies.map((r) => [r.type, r.seq]),
    [[0x10, 1], [(10 << 8) | 2, 2], [0x11, 3]],
  );
});

Deno.test({
  name:
    "no worker thread is handed work from inside a pod's namespace: the sockets a write and a removal used are closed off the JS thread once it is home (a worker started from inside would stay in the pod's namespace)",
  ...opts,
  fn: () =>
    withPod(async (pod, { name, script }) => {
      const libc = Libc.open();
      let inside = 0;
      const fromPod: string[] = [];
      const offThread = new Set(["closeOffThread", "sendOffThread", "recvOffThread"]);
      const sys = new Proxy(libc, {
        get(target, key) {
          const value = Reflect.get(target, key, target);
          if (typeof value !== "function") return value;
          if (key === "inNetns") {
            return <T>(netns: number, home: number, fn: () => T) =>
              target.inNetns(netns, home, () => {
                inside++;
                try {
                  return fn();
                } finally {
                  inside--;
                }
              });
          }
          if (offThread.has(String(key))) {
            return (...args: unknown[]) => {
              if (inside) fromPod.push(String(key));
              return value.apply(target, args);
            };
          }
          return value.bind(target);
        },
      });
      const nft = NftLib.open(sys);
      await nft.applyIn(pod.path, script);
      await nft.removeTableIn(pod.path, NFPROTO_NETDEV, name);
      await nft.settled();
      assertEquals(fromPod, [], "handed to a worker thread from inside the pod's namespace");
      assertEquals(await tables(pod), [], "the table was not written and removed");
    }),
});

Deno.test({
  name: "libc refuses at once to hand work to a worker thread from inside another namespace",
  ignore: !IS_ROOT,
  fn: () => {
    const libc = Libc.open();
    const here = libc.openRead("/proc/thread-self/ns/net");
    const home = libc.openRead("/proc/thread-self/ns/net");
    try {
      libc.inNetns(here, home, () => {
        for (
          const call of [
            () => libc.closeOffThread(-1),
            () => libc.sendOffThread(-1, new Uint8Array(1)),
            () => libc.recvOffThread(-1, new Uint8Array(1)),
          ]
        ) {
          let thrown: unknown;
          try {
            void call();
          } catch (e) {
            thrown = e;
          }
          assert(String(thrown).includes("from inside a pod's network namespace"), String(thrown));
        }
      });
    } finally {
      libc.close(here);
      libc.close(home);
    }
  },
});
