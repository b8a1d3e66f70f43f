// The in-process netlink plumber on its own, in real namespaces (root). Its links are made per
// test and removed also when a test fails.
import { assert, assertEquals, assertRejects, assertThrows } from "deno-std/assert/mod.js";
import { hostLinkExists, IS_ROOT, run, uniqueToken, withNetns } from "../../daemon/dev/netns.ts";
import { IpPlumber } from "../../daemon/net/ip_plumber.ts";
import { SpawningIpRunner } from "../../daemon/net/ip_runner.ts";
import { Libc, type NetlinkSys, SyscallError } from "../../daemon/net/netlink/libc.ts";
import { getLink, linkUp, newAddr } from "../../daemon/net/netlink/messages.ts";
import { RouteSocket, type Step } from "../../daemon/net/netlink/route_socket.ts";
import { NetlinkPlumber } from "../../daemon/net/netlink/netlink_plumber.ts";

const opts = { ignore: !IS_ROOT };

Deno.test({
  name: "unplugging waits for the kernel off the JS thread, so the daemon keeps serving meanwhile",
  ...opts,
  fn: () =>
    withNetns(1, async ([ns]) => {
      const plumber = new NetlinkPlumber(Libc.open(), new IpPlumber(new SpawningIpRunner()));
      const token = uniqueToken();
      const [bridge, host] = [`fb${token}`, `fy${token}`];
      try {
        await plumber.ensureBridge({ name: bridge, mtu: 1500, gateways: ["10.99.7.1/24"] });
        await plumber.plugVeth({
          netns: ns.path,
          ifname: "eth0",
          hostIfname: host,
          bridge,
          containerMac: "02:00:00:00:07:02",
          hostMac: "02:00:00:00:07:01",
          mtu: 1500,
          addresses: [{ cidr: "10.99.7.5/24", gateway: "10.99.7.1" }],
        });
        assertEquals(await plumber.bridgePorts(bridge), [host]);
        let settled = false;
        const unplug = plumber.unplugVeth(host).then(() => settled = true);
        // A synchronous delete would have settled within these microtask turns.
        for (let i = 0; i < 5; i++) await Promise.resolve();
        assertEquals(settled, false, "the delete ran on the JS thread");
        await unplug;
        assert(!(await hostLinkExists(host)));
        await plumber.unplugVeth(host); // absent: success
      } finally {
        plumber.close();
        await run("ip", "link", "del", host).catch(() => {});
        await run("ip", "link", "del", bridge).catch(() => {});
      }
    }),
});

/** The descriptors this process has open. */
async function openFds(): Promise<number> {
  let n = 0;
  for await (const _ of Deno.readDir("/proc/self/fd")) n++;
  return n;
}

Deno.test({
  name:
    "plugs and unplugs reuse the workers' sockets: a refused request leaves its socket usable, " +
    "and nothing stays open after close",
  ...opts,
  fn: () =>
    withNetns(3, async (namespaces) => {
      const token = uniqueToken();
      const bridge = `fb${token}`;
      const hosts = namespaces.map((_, i) => `fy${token}${i}`);
      const before = await openFds();
      const opened: number[] = [];
      const libc = Libc.open();
      // The real libc, counting the netlink sockets it opens.
      const counting = new Proxy(libc, {
        get(target, key) {
          if (key === "netlinkSocket") {
            return () => {
              const fd = target.netlinkSocket();
              opened.push(fd);
              return fd;
            };
          }
          const value = Reflect.get(target, key);
          return typeof value === "function" ? value.bind(target) : value;
        },
      }) as NetlinkSys;
      const plumber = new NetlinkPlumber(counting, new IpPlumber(new SpawningIpRunner()));
      const spec = (i: number) => ({
        netns: namespaces[i].path,
        ifname: "eth0",
        hostIfname: hosts[i],
        bridge,
        containerMac: `02:00:00:00:09:1${i}`,
        hostMac: `02:00:00:00:09:0${i}`,
        mtu: 1500,
        addresses: [{ cidr: `10.99.9.${10 + i}/24`, gateway: "10.99.9.1" }],
      });
      try {
        await plumber.ensureBridge({ name: bridge, mtu: 1500, gateways: ["10.99.9.1/24"] });
        const atStart = opened.length;
        for (let round = 0; round < 2; round++) {
          for (let i = 0; i < namespaces.length; i++) {
            await plumber.plugVeth(spec(i));
            await plumber.unplugVeth(hosts[i]);
            await plumber.unplugVeth(hosts[i]); // absent: the kernel refuses, the DEL succeeds
          }
        }
        // Per plug, only the socket inside the pod's namespace is new; the create and every
        // delete, refused or not, went through one pooled socket of the daemon's namespace.
        assertEquals(opened.length - atStart, 2 * namespaces.length + 1);
        await plumber.plugVeth(spec(0));
        assertEquals(await plumber.bridgePorts(bridge), [hosts[0]]);
        const shown = await run("ip", "-n", namespaces[0].name, "-4", "-o", "addr", "show", "eth0");
        assert(shown.includes("10.99.9.10/24"), shown);
      } finally {
        plumber.close();
        for (const host of hosts) await run("ip", "link", "del", host).catch(() => {});
        await run("ip", "link", "del", bridge).catch(() => {});
      }
      assertEquals(await openFds(), before, "a descriptor stayed open");
    }),
});

for (const mode of ["from the JS thread", "from a worker thread"] as const) {
  Deno.test({
    name: `a batch sent ${mode} names the first request the kernel refused, ` +
      "and its unread answers do not answer later requests",
    ...opts,
    fn: () =>
      withNetns(1, async ([ns]) => {
        const libc = Libc.open();
        const home = libc.openRead("/proc/thread-self/ns/net");
        const podFd = libc.openRead(ns.path);
        const sock = libc.inNetns(podFd, home, () => new RouteSocket(libc, libc.netlinkSocket()));
        const send = (steps: Step[]) =>
          mode === "from a worker thread"
            ? sock.ackAllOffThread(steps)
            : Promise.resolve().then(() => sock.ackAll(steps));
        try {
          await send([
            { what: "set lo up", build: (seq) => linkUp(seq, 1) },
            { what: "add 10.99.8.2", build: (seq) => newAddr(seq, 1, "10.99.8.2/24") },
          ]);
          const refused = await assertRejects(
            () =>
              send([
                { what: "add 10.99.8.3", build: (seq) => newAddr(seq, 1, "10.99.8.3/24") },
                { what: "add 10.99.8.2 again", build: (seq) => newAddr(seq, 1, "10.99.8.2/24") },
                { what: "add 10.99.8.4", build: (seq) => newAddr(seq, 1, "10.99.8.4/24") },
              ]),
            SyscallError,
          );
          assertEquals([refused.errno, refused.message.startsWith("add 10.99.8.2 again:")], [
            17,
            true,
          ]);
          assertEquals(sock.linkIndex("find lo", (seq) => getLink(seq, "lo")), 1);
          assertEquals(sock.indexOf("find lo", "lo"), 1);
          const absent = assertThrows(() => sock.indexOf("find nope", "nope0"), SyscallError);
          assertEquals([absent.errno, absent.message.startsWith("find nope:")], [19, true]);
          const shown = await run("ip", "-n", ns.name, "-4", "-o", "addr", "show", "dev", "lo");
          for (const ip of ["10.99.8.2/24", "10.99.8.3/24", "10.99.8.4/24"]) {
            assert(shown.includes(ip), `${ip} missing in ${shown}`);
          }
        } finally {
          sock.close();
          libc.close(podFd);
          libc.close(home);
        }
      }),
  });
}

/** Runs `lines` as one `ip -batch`, going on past failures (for clean-up). */
async function ipBatch(lines: string[], force = false): Promise<void> {
  const child = new Deno.Command("ip", {
    args: [...(force ? ["-force"] : []), "-batch", "-"],
    stdin: "piped",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(lines.join("\n") + "\n"));
  await writer.close();
  const out = await child.output();
  if (!force && !out.success) throw new Error(new TextDecoder().decode(out.stderr));
}

Deno.test({
  name: "a bridge's ports are listed in-process: its own ports only, in index order across a " +
    "dump of many answers, and none for an absent bridge",
  ...opts,
  fn: async () => {
    const token = uniqueToken();
    const [mine, other] = [`fb${token}`, `fc${token}`];
    // 60 ports (veth ends; their peers stay loose): more answers than one read of the socket's
    // buffer holds.
    const ports = Array.from({ length: 60 }, (_, i) => `fd${token}${i}`);
    const peers = ports.map((_, i) => `fp${token}${i}`);
    const [elsewhere, loose] = [`fe${token}`, `ff${token}`];
    const plumber = new NetlinkPlumber(Libc.open(), new IpPlumber(new SpawningIpRunner()));
    try {
      await ipBatch([
        `link add ${mine} type bridge`,
        `link add ${other} type bridge`,
        ...ports.map((p, i) => `link add ${p} type veth peer name ${peers[i]}`),
        ...ports.map((p) => `link set ${p} master ${mine}`),
        `link add ${elsewhere} type veth peer name ${loose}`,
        `link set ${elsewhere} master ${other}`,
      ]);
      const listed = await plumber.bridgePorts(mine);
      assertEquals(listed, ports);
      // The same answer as iproute2's.
      assertEquals(listed, await new IpPlumber(new SpawningIpRunner()).bridgePorts(mine));
      assertEquals(await plumber.bridgePorts(other), [elsewhere]);
      assertEquals(await plumber.bridgePorts(`fg${token}`), []);
    } finally {
      plumber.close();
      await ipBatch([...ports, elsewhere, mine, other].map((l) => `link del ${l}`), true);
    }
    assert(!(await hostLinkExists(mine)) && !(await hostLinkExists(peers[0])));
  },
});
