// The in-process netlink plumber on its own, in real namespaces (root). Its links are made per
// test and removed also when a test fails.
import { assert, assertEquals, assertRejects, assertThrows } from "deno-std/assert/mod.js";
import {
  hostLinkExists,
  ipIn,
  IS_ROOT,
  kernelSupports,
  linkInNetns,
  run,
  type TestNetns,
  uniqueToken,
  withMasterLink,
  withNetns,
} from "../../daemon/dev/netns.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { Plumber, SublinkSpec } from "../../daemon/net/plumber.ts";
import { IpPlumber } from "../../daemon/net/ip_plumber.ts";
import { SpawningIpRunner } from "../../daemon/net/ip_runner.ts";
import { Libc, type NetlinkSys, SyscallError } from "../../daemon/net/netlink/libc.ts";
import { getLink, linkUp, newAddr } from "../../daemon/net/netlink/messages.ts";
import { RouteSocket, type Step } from "../../daemon/net/netlink/route_socket.ts";
import { NetlinkPlumber } from "../../daemon/net/netlink/netlink_plumber.ts";
import { firstDifference } from "../../daemon/drivers/live_check.ts";

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

/**
 * A plumber every call of which fails: handed to the netlink plumber as its rest, it proves that
 * what the test calls ran in-process (no `ip` or `nsenter` process).
 */
function noProcesses(): Plumber {
  return new Proxy({} as Plumber, {
    get: (_, key) => () => Promise.reject(new Error(`${String(key)} went to iproute2`)),
  });
}

/** The live link as `ip -d -j` shows it: kind, mode, MAC, MTU, up. */
async function shownLink(ns: TestNetns, ifname: string) {
  const [link] = JSON.parse(await ipIn(ns, "-d", "-j", "link", "show", "dev", ifname));
  return {
    kind: link.linkinfo?.info_kind as string,
    mode: link.linkinfo?.info_data?.mode as string,
    mac: link.address as string,
    mtu: link.mtu as number,
    up: (link.flags as string[]).includes("UP"),
  };
}

const SUBLINK_CASES = [
  { kind: "macvlan", mode: "bridge" },
  { kind: "macvlan", mode: "private" },
  { kind: "macvlan", mode: "vepa" },
  { kind: "ipvlan", mode: "l2" },
  { kind: "ipvlan", mode: "l3" },
  { kind: "ipvlan", mode: "l3s" },
] as const;

for (const { kind, mode } of SUBLINK_CASES) {
  Deno.test({
    name: `a ${kind} link in mode ${mode} is plugged, read and removed in-process, with the ` +
      "MAC, MTU, addresses and routes asked for, read back as iproute2 reads them",
    ignore: !IS_ROOT || !(await kernelSupports(kind)),
    fn: () =>
      withMasterLink((master) =>
        withNetns(1, async ([ns]) => {
          const plumber = new NetlinkPlumber(Libc.open(), noProcesses());
          const spec: SublinkSpec = {
            kind,
            netns: ns.path,
            ifname: "net1",
            master,
            mode,
            mtu: 1400,
            mac: kind === "macvlan" ? "02:00:00:00:0a:05" : undefined,
            addresses: [
              { cidr: "10.99.10.5/24", gateway: "10.99.10.1" },
              { cidr: "fd99:10::5/64", gateway: "fd99:10::1" },
            ],
            routes: [
              { dst: "0.0.0.0/0", gw: "10.99.10.1" },
              { dst: "10.98.0.0/16" },
              { dst: "fd98::/48", gw: "fd99:10::1" },
            ],
          };
          try {
            await plumber.plugSublink(spec);
            const shown = await shownLink(ns, "net1");
            assertEquals(
              { kind: shown.kind, mode: shown.mode, mtu: shown.mtu, up: shown.up },
              { kind, mode, mtu: 1400, up: true },
            );
            if (kind === "macvlan") assertEquals(shown.mac, spec.mac);
            // The sysctls iproute2's path writes in the pod (port security's among them).
            for (const path of ["ipv6/conf/net1/accept_ra", "ipv6/conf/net1/accept_dad"]) {
              const value = await run(
                "ip",
                "netns",
                "exec",
                ns.name,
                "cat",
                `/proc/sys/net/${path}`,
              );
              assertEquals(value.trim(), "0", `${path} in the pod`);
            }
            const live = await plumber.inspect(ns.path, "net1");
            const byIproute2 = await new IpPlumber(new SpawningIpRunner()).inspect(ns.path, "net1");
            assertEquals(live, byIproute2, "netlink and iproute2 read the link differently");
            assertEquals(live!.mac, shown.mac);
            for (const a of ["10.99.10.5/24", "fd99:10::5/64"]) {
              assert(live!.addresses.includes(a), `${a} missing: ${live!.addresses}`);
            }
            for (const r of spec.routes) {
              assert(
                live!.routes.some((l) => l.dst === r.dst && l.gw === r.gw),
                `route ${r.dst} via ${r.gw ?? "link"} missing: ${JSON.stringify(live!.routes)}`,
              );
            }
            assertEquals(
              await ipIn(ns, "-o", "link", "show", "up", "lo").then((o) => o.includes("lo")),
              true,
              "lo is down",
            );
            await plumber.unplugIn(ns.path, "net1");
            assert(!(await linkInNetns(ns, "net1")), "net1 is still in the pod");
            assertEquals(await plumber.inspect(ns.path, "net1"), null);
            await plumber.unplugIn(ns.path, "net1"); // absent link: success
          } finally {
            plumber.close();
          }
          await plumber.unplugIn("/var/run/netns/fyt-gone", "net1"); // absent namespace: success
          assertEquals(await plumber.inspect("/var/run/netns/fyt-gone", "net1"), null);
        })
      ),
  });
}

Deno.test({
  name: "a failed in-process sublink plug answers code 5 and leaves nothing behind: a taken " +
    "name and its interface stay, a missing master creates nothing, a route the kernel refuses " +
    "removes the link it had created",
  ignore: !IS_ROOT,
  fn: () =>
    withMasterLink((master) =>
      withNetns(1, async ([ns]) => {
        const plumber = new NetlinkPlumber(Libc.open(), noProcesses());
        const spec = (over: Partial<SublinkSpec>): SublinkSpec => ({
          kind: "macvlan",
          netns: ns.path,
          ifname: "net1",
          master,
          mode: "bridge",
          mac: "02:00:00:00:0b:05",
          addresses: [{ cidr: "10.99.11.5/24" }],
          routes: [],
          ...over,
        });
        const refused = async (what: string, s: SublinkSpec) => {
          const e = await assertRejects(() => plumber.plugSublink(s), CniError, undefined, what);
          assertEquals(e.code, CNI_ERROR.IO_FAILURE, `${what}: ${e.message}`);
          return e;
        };
        try {
          // Someone else's interface of that name.
          await ipIn(ns, "link", "add", "net1", "type", "veth", "peer", "name", "other1");
          await ipIn(ns, "addr", "add", "10.99.11.77/24", "dev", "net1");
          await refused("taken name", spec({}));
          const other = await shownLink(ns, "net1");
          assertEquals(other.kind, "veth", "the other interface was replaced");
          assert(
            (await ipIn(ns, "-o", "addr", "show", "dev", "net1")).includes("10.99.11.77/24"),
            "the other interface lost its address",
          );
          await ipIn(ns, "link", "del", "net1");

          const e = await refused("missing master", spec({ master: `fyx${uniqueToken()}` }));
          assert(e.message.includes("net1"), e.message);
          assert(!(await linkInNetns(ns, "net1")), "a link was left after a missing master");

          await refused(
            "unreachable gateway",
            spec({ routes: [{ dst: "10.98.0.0/16", gw: "192.0.2.1" }] }),
          );
          assert(!(await linkInNetns(ns, "net1")), "the link was left after a refused route");

          await refused("absent namespace", spec({ netns: "/var/run/netns/fyt-gone" }));

          // Nothing stopped it working afterwards.
          await plumber.plugSublink(spec({}));
          assert(await linkInNetns(ns, "net1"));
        } finally {
          plumber.close();
        }
      })
    ),
});

Deno.test({
  name: "inspecting a sublink in-process sees its address changed by hand, so a CHECK names it",
  ignore: !IS_ROOT,
  fn: () =>
    withMasterLink((master) =>
      withNetns(1, async ([ns]) => {
        const plumber = new NetlinkPlumber(Libc.open(), noProcesses());
        try {
          await plumber.plugSublink({
            kind: "macvlan",
            netns: ns.path,
            ifname: "net1",
            master,
            mode: "bridge",
            addresses: [{ cidr: "10.99.12.5/24" }],
            routes: [],
          });
          assertEquals((await plumber.inspect(ns.path, "net1"))?.addresses, ["10.99.12.5/24"]);
          await ipIn(ns, "addr", "del", "10.99.12.5/24", "dev", "net1");
          await ipIn(ns, "addr", "add", "10.99.12.6/24", "dev", "net1");
          await ipIn(ns, "link", "set", "net1", "mtu", "1300");
          const live = await plumber.inspect(ns.path, "net1");
          assertEquals([live?.addresses, live?.mtu], [["10.99.12.6/24"], 1300]);
          const expected = {
            cniVersion: "1.1.0",
            interfaces: [{ name: "net1", sandbox: ns.path }],
            ips: [{ address: "10.99.12.5/24", interface: 0 }],
          };
          assertEquals(
            firstDifference(expected, "net1", ns.path, live),
            "interface net1 lacks address 10.99.12.5/24",
          );
        } finally {
          plumber.close();
        }
      })
    ),
});

Deno.test({
  name: "a sublink with 400 routes is plugged in-process (more acks than one receive queue " +
    "holds) and read back whole",
  ignore: !IS_ROOT,
  fn: () =>
    withMasterLink((master) =>
      withNetns(1, async ([ns]) => {
        const plumber = new NetlinkPlumber(Libc.open(), noProcesses());
        // 400 routes: their acks overflow a socket's receive queue if sent as one batch, and
        // their dump runs to tens of KiB.
        const routes = Array.from({ length: 400 }, (_, i) => ({
          dst: `10.${100 + (i >> 8)}.${i & 255}.0/24`,
          gw: "10.99.14.1",
        }));
        try {
          await plumber.plugSublink({
            kind: "macvlan",
            netns: ns.path,
            ifname: "net1",
            master,
            mode: "bridge",
            addresses: [{ cidr: "10.99.14.5/24" }],
            routes,
          });
          const live = await plumber.inspect(ns.path, "net1");
          const read = new Set(live?.routes.map((r) => `${r.dst} ${r.gw}`));
          const missing = routes.filter((r) => !read.has(`${r.dst} ${r.gw}`));
          assertEquals(
            missing.length,
            0,
            `${missing.length} routes not read, e.g. ${missing[0]?.dst}`,
          );
        } finally {
          plumber.close();
        }
      })
    ),
});

Deno.test({
  name:
    "both plumbers leave a pod's port learning nothing: learning and unknown-unicast flooding off on the port, a guarded port's link-local group frames through the bridge's hooks, the pod's MAC a static, sticky entry, and the bridge with a MAC of its own, learning from no link-local group frame; an older port is set so again, an absent one is no error",
  ...opts,
  fn: () =>
    withNetns(2, async (namespaces) => {
      const plumbers: [string, Plumber][] = [
        ["netlink", new NetlinkPlumber(Libc.open(), new IpPlumber(new SpawningIpRunner()))],
        ["iproute2", new IpPlumber(new SpawningIpRunner())],
      ];
      for (const [i, [which, plumber]] of plumbers.entries()) {
        const token = uniqueToken();
        const [bridge, host] = [`fb${token}`, `fy${token}`];
        const mac = `02:00:00:00:0${i}:02`;
        try {
          await plumber.ensureBridge({ name: bridge, mtu: 1500, gateways: ["10.99.6.1/24"] });
          await plumber.plugVeth({
            netns: namespaces[i].path,
            ifname: "eth0",
            hostIfname: host,
            bridge,
            containerMac: mac,
            hostMac: `02:00:00:00:0${i}:01`,
            mtu: 1500,
            addresses: [{ cidr: "10.99.6.5/24", gateway: "10.99.6.1" }],
            // A guarded port (port security's group).
            hostGroup: 0x46000a00 + i,
          });
          const expectSecured = async (when: string) => {
            const port = JSON.parse(
              await run("bridge", "-d", "-j", "link", "show", "dev", host),
            ) as {
              learning?: boolean;
              hairpin?: boolean;
              flood?: boolean;
            }[];
            assertEquals(
              [port[0].learning, port[0].hairpin, port[0].flood],
              [false, true, false],
              `${which}, ${when}: port ${host} learns nothing, is in hairpin mode and gets no unknown unicast`,
            );
            const slave = JSON.parse(await run("ip", "-d", "-j", "link", "show", "dev", host)) as {
              linkinfo: { info_slave_data: { group_fwd_mask?: string } };
            }[];
            assertEquals(
              slave[0].linkinfo.info_slave_data.group_fwd_mask,
              "0xfffd",
              `${which}, ${when}: guarded port ${host} sends its link-local group frames through the guard`,
            );
            const fdb = JSON.parse(await run("bridge", "-j", "fdb", "show", "dev", host)) as {
              mac: string;
              state?: string;
              flags?: string[];
            }[];
            const own = fdb.filter((e) => e.mac === mac);
            assert(
              own.length === 1 && own[0].state === "static" && own[0].flags?.includes("sticky"),
              `${which}, ${when}: the pod's MAC is one static, sticky entry of its port: ${
                JSON.stringify(fdb)
              }`,
            );
          };
          await expectSecured("plugged");
          assertEquals(
            (await Deno.readTextFile(`/sys/class/net/${bridge}/addr_assign_type`)).trim(),
            "3",
            `${which}: bridge ${bridge}'s MAC is set (it does not follow its ports')`,
          );
          const details = JSON.parse(await run("ip", "-d", "-j", "link", "show", bridge)) as {
            linkinfo: { info_data: { no_linklocal_learn?: number } };
          }[];
          assertEquals(
            details[0].linkinfo.info_data.no_linklocal_learn,
            1,
            `${which}: bridge ${bridge} learns from no link-local group frame`,
          );
          // A port as an older Ferry left it, set again at start.
          await run(
            "ip",
            "link",
            "set",
            host,
            "type",
            "bridge_slave",
            "learning",
            "on",
            "flood",
            "on",
            "group_fwd_mask",
            "0",
          );
          await run("bridge", "fdb", "del", mac, "dev", host, "master");
          await plumber.securePort({ hostIfname: host, podMac: mac, guarded: true });
          await expectSecured("set again");
          await plumber.securePort({ hostIfname: `${host}x`, podMac: mac, guarded: true });
        } finally {
          if (plumber instanceof NetlinkPlumber) plumber.close();
          await run("ip", "link", "del", host).catch(() => {});
          await run("ip", "link", "del", bridge).catch(() => {});
        }
      }
    }),
});
