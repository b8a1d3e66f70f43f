// The installed shim driven like a container runtime, against an in-process daemon, plugging
// real veth pairs into real network namespaces. Needs root; every test uses its own namespaces,
// socket, state and subnet, and removes them also when it fails.
import { assert, assertEquals, assertMatch, assertNotEquals } from "deno-std/assert/mod.js";
import { IpPlumber } from "../../daemon/net/ip_plumber.ts";
import { Libc, type NetlinkSys, SyscallError } from "../../daemon/net/netlink/libc.ts";
import { NL } from "../../daemon/net/netlink/messages.ts";
import { NetlinkPlumber } from "../../daemon/net/netlink/netlink_plumber.ts";
import { IpCommandError, type IpRunner, SpawningIpRunner } from "../../daemon/net/ip_runner.ts";
import { hostLinkName } from "../../daemon/net/naming.ts";
import { compareVersions, SUPPORTED_VERSIONS } from "../../lib/cni/versions.ts";
import { validateCniResult } from "../../lib/_generated/validateCniResult.js";
import { validateCniError } from "../../lib/_generated/validateCniError.js";
import { cniEnv, netconf, type TestFerry, withFerry } from "../../daemon/dev/harness.ts";
import { startDaemon } from "../../daemon/wiring/main.ts";
import {
  hostLinkExists,
  ipIn,
  IS_ROOT,
  linkInNetns,
  pingOnce,
  run,
  type TestNetns,
  uniqueToken,
  withNetns,
} from "../../daemon/dev/netns.ts";

const opts = { ignore: !IS_ROOT };

const env = cniEnv;

const podAddress = (result: Record<string, unknown>) =>
  (result.ips as { address: string }[])[0].address.split("/")[0];

for (
  const version of SUPPORTED_VERSIONS.filter((v) =>
    compareVersions(v, "1.1.0") < 0 || v === "1.1.0"
  )
) {
  Deno.test({
    name: `ADD, CHECK and DEL with a ${version} config plug and unplug a real veth`,
    ...opts,
    fn: () =>
      withFerry({}, (ferry) =>
        withNetns(1, async ([ns]) => {
          const id = `c${uniqueToken()}`;
          const conf = netconf(version);
          const add = await ferry.shim(env("ADD", ns, id), conf);
          assertEquals(add.code, 0, add.stdout + add.stderr);
          assertEquals(add.json!.cniVersion, version);
          assertEquals(validateCniResult(add.json), true);
          const address = podAddress(add.json!);
          assertMatch(
            await ipIn(ns, "-4", "addr", "show", "dev", "eth0"),
            new RegExp(`inet ${address}/24`),
          );
          assertEquals(await hostLinkExists(hostLinkName(id, "eth0")), true);
          assert(await pingOnce(address), `host cannot reach pod at ${address}`);

          const again = await ferry.shim(env("ADD", ns, id), conf);
          assertEquals(again.json, add.json, "a repeated ADD returns the same result");

          if (compareVersions(version, "0.4.0") >= 0) {
            const check = await ferry.shim(env("CHECK", ns, id), conf);
            assertEquals([check.code, check.stdout], [0, ""], check.stdout);
          }

          const del = await ferry.shim(env("DEL", ns, id), conf);
          assertEquals([del.code, del.stdout], [0, ""], del.stdout);
          assertEquals(await hostLinkExists(hostLinkName(id, "eth0")), false);
          assertEquals(await linkInNetns(ns, "eth0"), false);
          assertEquals(await ferry.allocations(), []);
          assertEquals(await ferry.records(), []);

          const delAgain = await ferry.shim(env("DEL", ns, id), conf);
          assertEquals(delAgain.code, 0, "DEL is idempotent");
        })),
  });
}

Deno.test({
  name: "CHECK reports a removed address as the first difference",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(1, async ([ns]) => {
        const id = `c${uniqueToken()}`;
        const add = await ferry.shim(env("ADD", ns, id), netconf());
        const address = podAddress(add.json!);
        await ipIn(ns, "addr", "del", `${address}/24`, "dev", "eth0");
        const check = await ferry.shim(env("CHECK", ns, id), netconf());
        assertEquals(check.code, 1);
        assertEquals(check.json!.code, 100);
        assertMatch(String(check.json!.msg), new RegExp(`lacks address ${address}/24`));
        await ferry.shim(env("DEL", ns, id), netconf());
      })),
});

Deno.test({
  name: "bad stdin and missing environment are clear errors and allocate nothing",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(1, async ([ns]) => {
        const id = `c${uniqueToken()}`;
        const garbage = await ferry.shim(env("ADD", ns, id), "{this is not json");
        assertEquals([garbage.code, garbage.json!.code], [1, 6]);
        assertEquals(validateCniError(garbage.json), true);
        const invalid = await ferry.shim(
          env("ADD", ns, id),
          JSON.stringify({ cniVersion: "1.0.0", type: "ferry" }),
        );
        assertEquals(invalid.json!.code, 7);
        const old = await ferry.shim(env("ADD", ns, id), netconf("0.2.0"));
        assertEquals(old.json!.code, 1);
        const noNetns = await ferry.shim(env("ADD", undefined, id), netconf());
        assertEquals(noNetns.json!.code, 4);
        assertMatch(String(noNetns.json!.msg), /CNI_NETNS/);
        const noCommand = await ferry.shim({ CNI_CONTAINERID: id }, netconf());
        assertEquals(noCommand.json!.code, 4);
        assertEquals(await ferry.allocations(), []);
        assertEquals(await hostLinkExists(hostLinkName(id, "eth0")), false);
      })),
});

Deno.test({
  name:
    "with the daemon down the shim says try again later and names the socket, except DEL, which succeeds",
  ...opts,
  fn: () =>
    withFerry({}, async (ferry) => {
      await ferry.stopDaemon();
      const out = await ferry.shim(
        env("ADD", { path: "/var/run/netns/x" }, "c1"),
        netconf(),
      );
      assertEquals([out.code, out.json!.code], [1, 11]);
      assertMatch(String(out.json!.msg), new RegExp(ferry.config.socket));
      // DEL succeeds (a pod must not stay Terminating while the daemon is away), and says why.
      const del = await ferry.shim(env("DEL", { path: "/var/run/netns/x" }, "c1"), netconf());
      assertEquals([del.code, del.stdout.trim()], [0, ""]);
      assertMatch(del.stderr, /releases it when it is back/);
    }),
});

Deno.test({
  name: "20 concurrent ADDs get 20 distinct, reachable addresses and DEL frees them all",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(20, async (namespaces) => {
        const ids = namespaces.map(() => `c${uniqueToken()}`);
        const adds = await Promise.all(
          namespaces.map((ns, i) => ferry.shim(env("ADD", ns, ids[i]), netconf())),
        );
        for (const a of adds) assertEquals(a.code, 0, a.stdout);
        const addresses = adds.map((a) => podAddress(a.json!));
        assertEquals(new Set(addresses).size, 20);
        for (const address of addresses) assert(await pingOnce(address), `cannot reach ${address}`);
        const dels = await Promise.all(
          namespaces.map((ns, i) => ferry.shim(env("DEL", ns, ids[i]), netconf())),
        );
        for (const d of dels) assertEquals(d.code, 0, d.stdout);
        assertEquals(await ferry.allocations(), []);
        for (const id of ids) assertEquals(await hostLinkExists(hostLinkName(id, "eth0")), false);
      })),
});

/** Passes host batches through and fails the first batch inside a pod namespace: a plug that breaks halfway. */
class FailingInPodRunner implements IpRunner {
  readonly #real = new SpawningIpRunner();
  batch(lines: string[], options: { netns?: string; json?: boolean } = {}): Promise<string> {
    if (options.netns && !options.json) {
      return Promise.reject(new IpCommandError("injected", "injected failure"));
    }
    return this.#real.batch(lines, options);
  }
}

/** The types of the netlink messages in one send (a batch holds several). */
function messageTypes(msg: Uint8Array): number[] {
  const view = new DataView(msg.buffer, msg.byteOffset, msg.byteLength);
  const types: number[] = [];
  for (let at = 0; at + 16 <= msg.length; at += (view.getUint32(at, true) + 3) & ~3) {
    types.push(view.getUint16(at + 4, true));
  }
  return types;
}

/** Real in-process netlink, except that adding an address fails: a plug that breaks halfway. */
function failingAddrNetlink(): NetlinkPlumber {
  const libc = Libc.open();
  const sys: NetlinkSys = {
    netlinkSocket: () => libc.netlinkSocket(),
    send(fd, msg) {
      if (messageTypes(msg).includes(NL.RTM_NEWADDR)) {
        throw new SyscallError("injected failure", 5);
      }
      libc.send(fd, msg);
    },
    recv: (fd, buf) => libc.recv(fd, buf),
    sendOffThread(fd, msg) {
      if (messageTypes(msg).includes(NL.RTM_NEWADDR)) {
        return Promise.reject(new SyscallError("injected failure", 5));
      }
      return libc.sendOffThread(fd, msg);
    },
    recvOffThread: (fd, buf) => libc.recvOffThread(fd, buf),
    tryRecv: (fd, buf) => libc.tryRecv(fd, buf),
    ifIndex: (fd, name) => libc.ifIndex(fd, name),
    close: (fd) => libc.close(fd),
    openRead: (path) => libc.openRead(path),
    identity: (fd) => libc.identity(fd),
    writeFile: (path, value) => libc.writeFile(path, value),
    inNetns: (fd, home, fn) => libc.inNetns(fd, home, fn),
  };
  return new NetlinkPlumber(sys, new IpPlumber(new SpawningIpRunner()));
}

for (
  const [plumbing, plumber] of [
    ["iproute2", () => new IpPlumber(new FailingInPodRunner())],
    ["netlink", failingAddrNetlink],
  ] as const
) {
  Deno.test({
    name: `a plug that fails halfway (${plumbing}) leaves no link, address or record behind`,
    ...opts,
    fn: () =>
      withFerry(
        { daemon: { plumber: plumber() } },
        (ferry) =>
          withNetns(1, async ([ns]) => {
            const id = `c${uniqueToken()}`;
            const out = await ferry.shim(env("ADD", ns, id), netconf());
            assertEquals([out.code, out.json!.code], [1, 5]);
            assertMatch(String(out.json!.details), /injected failure/);
            assertEquals(await hostLinkExists(hostLinkName(id, "eth0")), false);
            assertEquals(await linkInNetns(ns, "eth0"), false);
            assertEquals(await ferry.allocations(), []);
            assertEquals(await ferry.records(), []);
          }),
      ),
  });
}

Deno.test({
  name: "ADD into a namespace that does not exist is refused with code 4 and leaks nothing",
  ...opts,
  fn: () =>
    withFerry({}, async (ferry) => {
      const id = `c${uniqueToken()}`;
      const out = await ferry.shim(
        env("ADD", { path: `/var/run/netns/fyt-absent-${id}` }, id),
        netconf(),
      );
      assertEquals([out.code, out.json!.code], [1, 4]);
      assertEquals(await hostLinkExists(hostLinkName(id, "eth0")), false);
      assertEquals(await ferry.allocations(), []);
    }),
});

Deno.test({
  name: "DEL after the namespace is gone still releases the address and succeeds",
  ...opts,
  fn: () =>
    withFerry({}, async (ferry) => {
      const id = `c${uniqueToken()}`;
      let nsPath = "";
      await withNetns(1, async ([ns]) => {
        nsPath = ns.path;
        assertEquals((await ferry.shim(env("ADD", ns, id), netconf())).code, 0);
        assertEquals((await ferry.allocations()).length, 1);
      });
      const del = await ferry.shim(env("DEL", { path: nsPath }, id), netconf());
      assertEquals(del.code, 0, del.stdout);
      assertEquals(await ferry.allocations(), []);
      assertEquals(await hostLinkExists(hostLinkName(id, "eth0")), false);
    }),
});

Deno.test({
  name: "a daemon restarted between ADD and DEL still answers ADD the same and unplugs on DEL",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(1, async ([ns]) => {
        const id = `c${uniqueToken()}`;
        const add = await ferry.shim(env("ADD", ns, id), netconf());
        await ferry.restartDaemon();
        assertEquals((await ferry.shim(env("ADD", ns, id), netconf())).json, add.json);
        assertEquals((await ferry.shim(env("CHECK", ns, id), netconf())).code, 0);
        assertEquals((await ferry.shim(env("DEL", ns, id), netconf())).code, 0);
        assertEquals(await hostLinkExists(hostLinkName(id, "eth0")), false);
        assertEquals(await ferry.allocations(), []);
      })),
});

Deno.test({
  name: "a daemon restarted after dying between plug and record removes the stray link and address",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(2, async ([ns, other]) => {
        const [id, keep] = [`c${uniqueToken()}`, `c${uniqueToken()}`];
        assertEquals((await ferry.shim(env("ADD", other, keep), netconf())).code, 0);
        assertEquals((await ferry.shim(env("ADD", ns, id), netconf())).code, 0);
        // What a crash after plugging but before recording leaves: a link and an address.
        await ferry.stopDaemon();
        await Deno.remove(`${ferry.config.stateDir}/attachments/${id}--eth0.json`);
        await ferry.restartDaemon();
        assertEquals(await hostLinkExists(hostLinkName(id, "eth0")), false);
        assertEquals(await linkInNetns(ns, "eth0"), false);
        assertEquals((await ferry.allocations()).length, 1, "only the recorded pod keeps one");
        assertEquals(await hostLinkExists(hostLinkName(keep, "eth0")), true);
        // The runtime's retry plugs it afresh.
        assertEquals((await ferry.shim(env("ADD", ns, id), netconf())).code, 0);
        for (const [n, c] of [[ns, id], [other, keep]] as const) {
          assertEquals((await ferry.shim(env("DEL", n, c), netconf())).code, 0);
        }
        assertEquals(await ferry.allocations(), []);
      })),
});

Deno.test({
  name: "the same container and interface cannot be plugged into a second namespace",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(2, async ([a, b]) => {
        const id = `c${uniqueToken()}`;
        const first = await ferry.shim(env("ADD", a, id), netconf());
        assertEquals(first.code, 0);
        const second = await ferry.shim(env("ADD", b, id), netconf());
        assertEquals([second.code, second.json!.code], [1, 4]);
        assertEquals((await ferry.allocations()).length, 1);
        await ferry.shim(env("DEL", a, id), netconf());
      })),
});

Deno.test({
  name: "STATUS succeeds and GC unplugs what the runtime no longer lists",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(2, async ([keep, drop]) => {
        const [k, d] = [`c${uniqueToken()}`, `c${uniqueToken()}`];
        const conf = netconf("1.1.0");
        assertEquals((await ferry.shim(env("ADD", keep, k), conf)).code, 0);
        assertEquals((await ferry.shim(env("ADD", drop, d), conf)).code, 0);
        const status = await ferry.shim({ CNI_COMMAND: "STATUS", CNI_PATH: "/usr/lib/cni" }, conf);
        assertEquals([status.code, status.stdout], [0, ""]);
        const gcConf = netconf("1.1.0", {
          "cni.dev/valid-attachments": [{ containerID: k, ifname: "eth0" }],
        });
        const gc = await ferry.shim({ CNI_COMMAND: "GC", CNI_PATH: "/usr/lib/cni" }, gcConf);
        assertEquals([gc.code, gc.stdout], [0, ""], gc.stdout);
        assertEquals(await hostLinkExists(hostLinkName(d, "eth0")), false);
        assertEquals(await hostLinkExists(hostLinkName(k, "eth0")), true);
        assertEquals((await ferry.allocations()).length, 1);
        assertNotEquals((await ferry.shim(env("CHECK", keep, k), conf)).code, 1);
        await ferry.shim(env("DEL", keep, k), conf);
      })),
});

Deno.test({
  name: "the test namespaces and links are really removed after a test",
  ...opts,
  fn: async () => {
    let name = "";
    await withNetns(1, (ns) => Promise.resolve(name = ns[0].name)).catch(() => {});
    assertEquals((await run("ip", "netns", "list")).includes(name), false);
  },
});

/** Real in-process netlink whose link removals wait until `open()` is called. */
function gatedUnplugNetlink(): {
  plumber: NetlinkPlumber;
  open: () => void;
  removing: () => number;
} {
  const real = new NetlinkPlumber(Libc.open(), new IpPlumber(new SpawningIpRunner()));
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  let removing = 0;
  const unplug = real.unplugVeth.bind(real);
  real.unplugVeth = async (hostIfname: string) => {
    removing++;
    await gate;
    await unplug(hostIfname);
  };
  return { plumber: real, open, removing: () => removing };
}

/**
 * A daemon whose link removals wait for `gated.open()` (`config` over the test defaults) and
 * `count` namespaces; the gate opens in any case before the daemon stops (its stop waits for DELs).
 */
async function withGatedFerry<T>(
  config: Record<string, unknown>,
  count: number,
  fn: (
    ferry: TestFerry,
    ns: TestNetns[],
    gated: ReturnType<typeof gatedUnplugNetlink>,
  ) => Promise<T>,
): Promise<T> {
  const gated = gatedUnplugNetlink();
  return await withFerry(
    { daemon: { plumber: gated.plumber }, config },
    (ferry) =>
      withNetns(count, async (ns) => {
        try {
          return await fn(ferry, ns, gated);
        } finally {
          gated.open();
        }
      }),
  );
}

/** The names in a state directory, its temporary files aside. */
async function filesIn(dir: string): Promise<string[]> {
  return (await Array.fromAsync(Deno.readDir(dir))).map((e) => e.name)
    .filter((n) => !n.startsWith("."));
}

/** The addresses a daemon's state directory holds, read from the disk (not waiting for DELs). */
async function heldOnDisk(stateDir: string): Promise<string[]> {
  const out: string[] = [];
  for (const pool of await filesIn(`${stateDir}/ipam`)) {
    out.push(...await filesIn(`${stateDir}/ipam/${pool}`));
  }
  return out;
}

Deno.test({
  name:
    "DEL is answered while the kernel removes the link; its address is released only after, and an ADD into the same namespace and name waits for it",
  ...opts,
  fn: async () => {
    await withGatedFerry({}, 1, async (ferry, [ns], gated) => {
      const id = `c${uniqueToken()}`;
      const add = await ferry.shim(env("ADD", ns, id), netconf());
      assertEquals(add.code, 0, add.stdout);
      const del = await ferry.shim(env("DEL", ns, id), netconf());
      assertEquals(del.code, 0, del.stdout);
      // Answered, the removal under way: the address is still held, the DEL still finishing.
      assertEquals(gated.removing(), 1);
      assertEquals((await heldOnDisk(ferry.config.stateDir)).length, 1);
      assertEquals(ferry.daemon().stats().finishingDels, 1);
      let readdDone = false;
      // Another container in the same namespace (a runtime that reuses one) and interface.
      const id2 = `c${uniqueToken()}`;
      const readd = ferry.shim(env("ADD", ns, id2), netconf()).then((r) => {
        readdDone = true;
        return r;
      });
      await new Promise((r) => setTimeout(r, 300));
      assertEquals(readdDone, false, "the ADD waits for the old link to go");
      gated.open();
      await ferry.daemon().idle();
      const again = await readd;
      assertEquals(again.code, 0, again.stdout);
      assertEquals(ferry.daemon().stats().finishingDels, 0);
      assertEquals((await ferry.shim(env("DEL", ns, id2), netconf())).code, 0);
      assertEquals(await ferry.allocations(), []);
      assertEquals(await ferry.records(), []);
      assertEquals(await hostLinkExists(hostLinkName(id, "eth0")), false);
      assertEquals(await hostLinkExists(hostLinkName(id2, "eth0")), false);
    });
  },
});

Deno.test({
  name:
    "a DEL answered while the kernel removes the link has its record off the disk already: a daemon killed then releases the address and the link at its next start",
  ...opts,
  fn: async () => {
    await withGatedFerry({}, 1, async (ferry, [ns], gated) => {
      const id = `c${uniqueToken()}`;
      assertEquals((await ferry.shim(env("ADD", ns, id), netconf())).code, 0);
      assertEquals((await ferry.shim(env("DEL", ns, id), netconf())).code, 0);
      // Answered, the link's removal held up: the daemon is killed now, as far as the
      // node's files go. The address is still allocated, but no record names it.
      assertEquals(gated.removing(), 1);
      assertEquals((await heldOnDisk(ferry.config.stateDir)).length, 1);
      assertEquals(await filesIn(`${ferry.config.stateDir}/attachments`), []);
      assert(await hostLinkExists(hostLinkName(id, "eth0")));
      // The next daemon of the node (same state and bridge) starts: it settles what the
      // runtime was told is gone.
      const next = await startDaemon({
        ...ferry.config,
        socket: `${ferry.dir}/run/next.sock`,
      });
      try {
        assertEquals(await heldOnDisk(ferry.config.stateDir), []);
        assertEquals(await hostLinkExists(hostLinkName(id, "eth0")), false);
      } finally {
        await next.stop();
      }
    });
  },
});

Deno.test({
  name:
    "an ADD that finds its range full while a DEL is finishing waits for that DEL and gets the address it gives back, not 101",
  ...opts,
  fn: async () => {
    const n = Math.floor(Math.random() * 1024);
    const base = `10.${100 + (n >> 8)}.${n & 255}`;
    await withGatedFerry(
      {
        // One allocatable address (.2), and no quarantine after a release.
        network: { subnet: `${base}.0/29`, rangeStart: `${base}.2`, rangeEnd: `${base}.2` },
        ipam: { reuseDelaySeconds: 0 },
      },
      2,
      async (ferry, [ns1, ns2], gated) => {
        const [a, b] = [`a${uniqueToken()}`, `b${uniqueToken()}`];
        assertEquals((await ferry.shim(env("ADD", ns1, a), netconf())).code, 0);
        assertEquals((await ferry.shim(env("DEL", ns1, a), netconf())).code, 0);
        assertEquals(ferry.daemon().stats().finishingDels, 1);
        let answered = false;
        const add = ferry.shim(env("ADD", ns2, b), netconf()).then((r) => {
          answered = true;
          return r;
        });
        await new Promise((r) => setTimeout(r, 400));
        assertEquals(answered, false, "the ADD waits for the DEL that frees the address");
        gated.open();
        const second = await add;
        assertEquals(second.code, 0, second.stdout + second.stderr);
        assertEquals(podAddress(second.json!), `${base}.2`);
        assertEquals((await ferry.shim(env("DEL", ns2, b), netconf())).code, 0);
      },
    );
  },
});

// The addresses are allocated while the kernel creates the pair: an exhausted range must still
// answer 101 and leave no link behind, with either plumbing.
for (const plumbing of ["netlink", "iproute2"]) {
  Deno.test({
    name:
      `an ADD in a full range answers 101 and leaves no link, no record and no address; the address freed by a DEL is used again (${plumbing})`,
    ...opts,
    fn: () => {
      const n = Math.floor(Math.random() * 1024);
      const subnet = `10.${100 + (n >> 8)}.${n & 255}.0/29`;
      const base = subnet.split(".").slice(0, 3).join(".");
      return withFerry({
        // One allocatable address (.2), and no quarantine after a release.
        config: {
          network: { subnet, rangeStart: `${base}.2`, rangeEnd: `${base}.2`, plumbing },
          ipam: { reuseDelaySeconds: 0 },
        },
      }, (ferry) =>
        withNetns(2, async ([ns1, ns2]) => {
          const [a, b] = [`a${uniqueToken()}`, `b${uniqueToken()}`];
          const first = await ferry.shim(env("ADD", ns1, a), netconf());
          assertEquals(first.code, 0, first.stdout + first.stderr);
          const full = await ferry.shim(env("ADD", ns2, b), netconf());
          assertEquals([full.code, full.json?.code], [1, 101], full.stdout);
          assertEquals(await hostLinkExists(hostLinkName(b, "eth0")), false);
          assertEquals(await linkInNetns(ns2, "eth0"), false);
          assertEquals((await ferry.records()).length, 1);
          assertEquals((await ferry.allocations()).length, 1);
          assertEquals((await ferry.shim(env("DEL", ns1, a), netconf())).code, 0);
          const second = await ferry.shim(env("ADD", ns2, b), netconf());
          assertEquals(second.code, 0, second.stdout + second.stderr);
          assertEquals(podAddress(second.json!), `${base}.2`);
          assertEquals((await ferry.shim(env("DEL", ns2, b), netconf())).code, 0);
        }));
    },
  });
}

Deno.test({
  name:
    "the daemon reports the time its JS thread spent inside pod namespaces and in netlink requests",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(1, async ([ns]) => {
        const before = ferry.daemon().stats();
        const id = `c${uniqueToken()}`;
        assertEquals((await ferry.shim(env("ADD", ns, id), netconf())).code, 0);
        const after = ferry.daemon().stats();
        // The pod end's sysctls and socket (inside the namespace), the hairpin and the pod's batch.
        assert(after.netnsSync!.calls > before.netnsSync!.calls, JSON.stringify(after.netnsSync));
        assert(
          after.netlinkSync!.calls >= before.netlinkSync!.calls + 2,
          JSON.stringify(after.netlinkSync),
        );
        assert(after.netlinkSync!.ms > before.netlinkSync!.ms, JSON.stringify(after.netlinkSync));
        assert(after.netlinkSync!.maxMs > 0 && after.netlinkSync!.maxMs <= after.netlinkSync!.ms);
        assertEquals((await ferry.shim(env("DEL", ns, id), netconf())).code, 0);
      })),
});

Deno.test({
  name: "the daemon gives freed memory back once after requests stop, not while they come",
  ...opts,
  fn: () =>
    withFerry({ daemon: { trimQuietMs: 300 } }, (ferry) =>
      withNetns(1, async ([ns]) => {
        const trims = () => ferry.daemon().stats().memoryTrims;
        const id = `c${uniqueToken()}`;
        await new Promise((r) => setTimeout(r, 1000));
        assertEquals(trims(), 0, "nothing before any request");
        for (const command of ["ADD", "CHECK", "DEL", "DEL"]) {
          assertEquals((await ferry.shim(env(command, ns, id), netconf())).code, 0);
        }
        const deadline = Date.now() + 5000;
        while (trims() === 0 && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 50));
        }
        assertEquals(trims(), 1, "once quiet");
        await new Promise((r) => setTimeout(r, 1000));
        assertEquals(trims(), 1, "once per quiet spell");
      })),
});
