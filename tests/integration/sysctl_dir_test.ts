// Sysctls written through a bind mount of the host's /proc/sys/net (`sysctlDir`), as the
// DaemonSet does without privilege (its own /proc/sys is read-only): each plumber writes the pod
// interface's entries from inside the pod's namespace, and the mount shows that namespace its own
// entries. Needs root; the mount is made in a directory of the test's own and undone on failure.
import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { IS_ROOT, run, uniqueToken, withNetns, withTempDir } from "../../daemon/dev/netns.ts";
import { IpPlumber } from "../../daemon/net/ip_plumber.ts";
import { SpawningIpRunner } from "../../daemon/net/ip_runner.ts";
import { Libc } from "../../daemon/net/netlink/libc.ts";
import { NetlinkPlumber } from "../../daemon/net/netlink/netlink_plumber.ts";
import type { Plumber, VethSpec } from "../../daemon/net/plumber.ts";
import { CniError } from "../../lib/cni/errors.ts";

const opts = { ignore: !IS_ROOT };

/** `fn` with the host's /proc/sys/net mounted at `DIR/net`. */
function withNetMount(fn: (dir: string) => Promise<void>): Promise<void> {
  return withTempDir(async (dir) => {
    await Deno.mkdir(`${dir}/net`);
    await run("mount", "--bind", "/proc/sys/net", `${dir}/net`);
    try {
      await fn(dir);
    } finally {
      await run("umount", `${dir}/net`);
    }
  });
}

const plumbers: [string, (dir: string) => Plumber][] = [
  [
    "netlink",
    (dir) => new NetlinkPlumber(Libc.open(), new IpPlumber(new SpawningIpRunner(dir)), dir),
  ],
  ["iproute2", (dir) => new IpPlumber(new SpawningIpRunner(dir), { sysctlDir: dir })],
];

function spec(ns: string, bridge: string, host: string): VethSpec {
  return {
    netns: ns,
    ifname: "eth0",
    hostIfname: host,
    bridge,
    containerMac: "02:00:00:00:08:02",
    hostMac: "02:00:00:00:08:01",
    mtu: 1500,
    addresses: [{ cidr: "fd00:99:8::5/64", gateway: "fd00:99:8::1" }],
  };
}

for (const [name, make] of plumbers) {
  Deno.test({
    name:
      `${name} plumbing: an IPv6 pod's interface gets its sysctls through the mounted host /proc/sys/net, in the pod's namespace`,
    ...opts,
    fn: () =>
      withNetMount((dir) =>
        withNetns(1, async ([ns]) => {
          const plumber = make(dir);
          const token = uniqueToken();
          const [bridge, host] = [`fb${token}`, `fy${token}`];
          try {
            await plumber.ensureBridge({ name: bridge, mtu: 1500, gateways: ["fd00:99:8::1/64"] });
            await plumber.plugVeth(spec(ns.path, bridge, host));
            const read = (path: string) =>
              run("ip", "netns", "exec", ns.name, "cat", `/proc/sys/net/ipv6/conf/eth0/${path}`);
            assertEquals((await read("disable_ipv6")).trim(), "0");
            assertEquals((await read("accept_dad")).trim(), "0");
            assertEquals((await read("accept_ra")).trim(), "0", "router advertisements refused");
            assertEquals((await read("accept_redirects")).trim(), "0", "redirects refused");
            const bridgeV6 = await Deno.readTextFile(
              `/proc/sys/net/ipv6/conf/${bridge}/disable_ipv6`,
            );
            assertEquals(bridgeV6.trim(), "0", "the bridge's, in the host's namespace");
          } finally {
            if ("close" in plumber) (plumber as NetlinkPlumber).close();
            await run("ip", "link", "del", host).catch(() => {});
            await run("ip", "link", "del", bridge).catch(() => {});
          }
        })
      ),
  });

  Deno.test({
    name: `${name} plumbing: a sysctl directory without the mount fails the plug with code 5`,
    ...opts,
    fn: () =>
      withTempDir((dir) =>
        withNetns(1, async ([ns]) => {
          const token = uniqueToken();
          const [bridge, host] = [`fb${token}`, `fy${token}`];
          const plumber = make(dir);
          // The bridge is set up through the working path, so only the pod's sysctls can fail.
          const good = new IpPlumber(new SpawningIpRunner());
          try {
            await good.ensureBridge({ name: bridge, mtu: 1500, gateways: ["fd00:99:9::1/64"] });
            const e = await assertRejects(
              () => plumber.plugVeth(spec(ns.path, bridge, host)),
              CniError,
            );
            assertEquals(e.code, 5);
          } finally {
            if ("close" in plumber) (plumber as NetlinkPlumber).close();
            await run("ip", "link", "del", host).catch(() => {});
            await run("ip", "link", "del", bridge).catch(() => {});
          }
        })
      ),
  });
}
