// The in-process netlink plumber on its own, in real namespaces (root). Its links are made per
// test and removed also when a test fails.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { hostLinkExists, IS_ROOT, run, uniqueToken, withNetns } from "../../daemon/dev/netns.ts";
import { IpPlumber } from "../../daemon/net/ip_plumber.ts";
import { SpawningIpRunner } from "../../daemon/net/ip_runner.ts";
import { Libc } from "../../daemon/net/netlink/libc.ts";
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
