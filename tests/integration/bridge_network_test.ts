// The default network as a node runs it: pods on the Ferry bridge, single and dual stack, through
// the installed shim and an in-process daemon. Needs root; every test has its own bridge, subnet,
// namespaces and state, all removed also when it fails. Only the test's own namespaces are pinged.
import { assert, assertEquals, assertMatch, assertRejects } from "deno-std/assert/mod.js";
import { startDaemon } from "../../daemon/wiring/main.ts";
import { SocketInUseError } from "../../daemon/server/socket_server.ts";
import { cniEnv, netconf, testSubnet6, withFerry } from "../../daemon/dev/harness.ts";
import {
  hostLinkExists,
  ipIn,
  IS_ROOT,
  pingOnce,
  run,
  uniqueToken,
  withNetns,
} from "../../daemon/dev/netns.ts";
import { hostLinkName, stableMac } from "../../daemon/net/naming.ts";

const opts = { ignore: !IS_ROOT };

type Result = {
  ips: { address: string; gateway?: string; interface?: number }[];
  routes: { dst: string; gw?: string }[];
  interfaces: { name: string; mac?: string; mtu?: number; sandbox?: string }[];
};

const addressOf = (r: Result, family: 4 | 6) =>
  r.ips.find((ip) => ip.address.includes(":") === (family === 6))!.address.split("/")[0];

async function json(cmd: string, ...args: string[]) {
  return JSON.parse(await run(cmd, ...args));
}

// Both plumbings: in-process netlink (the default) and iproute2 batches.
for (const plumbing of ["netlink", "iproute2"]) {
  Deno.test({
    name:
      `three pods on the bridge reach each other and the host, and the host every pod (${plumbing})`,
    ...opts,
    fn: () =>
      withFerry(
        { config: { network: { mtu: 1400, plumbing } } },
        (ferry) =>
          withNetns(3, async (nss) => {
            const bridge = ferry.config.network.bridge;
            const results: Result[] = [];
            const ids = nss.map(() => `c${uniqueToken()}`);
            for (const [n, ns] of nss.entries()) {
              const id = ids[n];
              const add = await ferry.shim(cniEnv("ADD", ns, id), netconf());
              assertEquals(add.code, 0, add.stdout + add.stderr);
              const r = add.json as unknown as Result;
              results.push(r);
              // The host end is a port of the bridge, with the network's MTU.
              const [host] = await json(
                "ip",
                "-j",
                "-d",
                "link",
                "show",
                "dev",
                hostLinkName(id, "eth0"),
              );
              assertEquals([host.master, host.mtu], [bridge, 1400]);
              // The pod end: stable MAC, MTU, address with the subnet's prefix, default route.
              const [pod] = await json("ip", "-n", ns.name, "-j", "addr", "show", "dev", "eth0");
              assertEquals(pod.address, stableMac(id, "eth0", "container"));
              assertEquals(pod.mtu, 1400);
              assertEquals(
                pod.addr_info.filter((a: { family: string }) => a.family === "inet")
                  .map((a: { local: string; prefixlen: number }) => `${a.local}/${a.prefixlen}`),
                [r.ips[0].address],
              );
              assertMatch(r.ips[0].address, /\/24$/);
              assertMatch(
                await ipIn(ns, "route", "show", "default"),
                new RegExp(`default via ${r.ips[0].gateway} dev eth0`),
              );
            }
            // The bridge holds the gateway.
            const [br] = await json("ip", "-j", "addr", "show", "dev", bridge);
            assertEquals(
              br.addr_info.filter((a: { family: string }) => a.family === "inet")
                .map((a: { local: string; prefixlen: number }) => `${a.local}/${a.prefixlen}`),
              [`${results[0].ips[0].gateway}/24`],
            );
            for (const [i, from] of nss.entries()) {
              assert(await pingOnce(addressOf(results[i], 4)), `host cannot reach pod ${i}`);
              assert(
                await pingOnce(results[i].ips[0].gateway!, from),
                `pod ${i} cannot reach the host`,
              );
              for (const [j] of nss.entries()) {
                if (i === j) continue;
                assert(
                  await pingOnce(addressOf(results[j], 4), from),
                  `pod ${i} cannot reach pod ${j}`,
                );
              }
            }
            for (const [i, ns] of nss.entries()) {
              assertEquals((await ferry.shim(cniEnv("DEL", ns, ids[i]), netconf())).code, 0);
            }
            assertEquals(await ferry.allocations(), []);
          }),
      ),
  });

  Deno.test({
    name:
      `dual stack: every pod gets an IPv4 and an IPv6 address and reaches the others over both (${plumbing})`,
    ...opts,
    fn: () =>
      withFerry(
        { config: { network: { subnet6: testSubnet6() } } },
        (ferry) =>
          withNetns(2, async ([a, b]) => {
            const ids = [`c${uniqueToken()}`, `c${uniqueToken()}`];
            const [ra, rb] = await Promise.all([a, b].map(async (ns, i) => {
              const add = await ferry.shim(cniEnv("ADD", ns, ids[i]), netconf());
              assertEquals(add.code, 0, add.stdout + add.stderr);
              return add.json as unknown as Result;
            }));
            assertEquals(ra.ips.map((ip) => ip.address.includes(":")), [false, true]);
            assertMatch(ra.ips[1].address, /\/64$/);
            assertEquals(ra.routes.map((r) => r.dst), ["0.0.0.0/0", "::/0"]);
            assertMatch(
              await ipIn(a, "-6", "route", "show", "default"),
              new RegExp(`default via ${ra.ips[1].gateway} dev eth0`),
            );
            assertEquals(
              (await run(
                "ip",
                "netns",
                "exec",
                a.name,
                "sysctl",
                "-n",
                "net.ipv6.conf.eth0.disable_ipv6",
              ))
                .trim(),
              "0",
            );
            assert(await pingOnce(addressOf(rb, 6), a), "pod a cannot reach pod b over IPv6");
            assert(await pingOnce(addressOf(ra, 4), b), "pod b cannot reach pod a over IPv4");
            assert(await pingOnce(addressOf(rb, 6)), "the host cannot reach pod b over IPv6");
            assert(await pingOnce(ra.ips[1].gateway!, a), "pod a cannot reach its IPv6 gateway");

            const check = await ferry.shim(cniEnv("CHECK", a, ids[0]), netconf());
            assertEquals(check.code, 0, check.stdout);
            await ipIn(a, "-6", "route", "del", "default");
            const broken = await ferry.shim(cniEnv("CHECK", a, ids[0]), netconf());
            assertEquals(broken.json?.code, 100);
            assertMatch(String(broken.json?.msg), /route to ::\/0 via .* is missing on eth0/);

            for (const [i, ns] of [a, b].entries()) {
              const del = await ferry.shim(cniEnv("DEL", ns, ids[i]), netconf());
              assertEquals(del.code, 0, del.stdout);
            }
            assertEquals(await ferry.allocations(), []);
            assertEquals(await ferry.records(), []);
          }),
      ),
  });
}

Deno.test({
  name: "the forwarding sysctls are set by the daemon, not assumed",
  ...opts,
  fn: async () => {
    const paths = ["/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"];
    const saved = await Promise.all(paths.map((p) => Deno.readTextFile(p)));
    try {
      for (const p of paths) await Deno.writeTextFile(p, "0");
      await withFerry(
        { config: { network: { subnet6: testSubnet6(), forwarding: true } } },
        async (ferry) => {
          for (const p of paths) assertEquals((await Deno.readTextFile(p)).trim(), "1", p);
          const disabled = `/proc/sys/net/ipv6/conf/${ferry.config.network.bridge}/disable_ipv6`;
          assertEquals((await Deno.readTextFile(disabled)).trim(), "0");
        },
      );
    } finally {
      for (const [i, p] of paths.entries()) await Deno.writeTextFile(p, saved[i].trim());
    }
  },
});

Deno.test({
  name: "a bridge deleted under a running daemon is set up again by the next ADD",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(1, async ([ns]) => {
        await run("ip", "link", "del", ferry.config.network.bridge);
        const id = `c${uniqueToken()}`;
        const add = await ferry.shim(cniEnv("ADD", ns, id), netconf());
        assertEquals(add.code, 0, add.stdout + add.stderr);
        assert(await hostLinkExists(ferry.config.network.bridge));
        assert(await pingOnce(addressOf(add.json as unknown as Result, 4)));
        assertEquals((await ferry.shim(cniEnv("DEL", ns, id), netconf())).code, 0);
      })),
});

Deno.test({
  name: "CHECK names a changed MTU, a host end off the bridge, and a deleted pair",
  ...opts,
  fn: () =>
    withFerry({}, (ferry) =>
      withNetns(1, async ([ns]) => {
        const id = `c${uniqueToken()}`;
        await ferry.shim(cniEnv("ADD", ns, id), netconf());
        await ipIn(ns, "link", "set", "eth0", "mtu", "1280");
        const mtu = await ferry.shim(cniEnv("CHECK", ns, id), netconf());
        assertEquals(mtu.json?.code, 100);
        assertMatch(String(mtu.json?.msg), /eth0 has MTU 1280, expected 1500/);
        await ipIn(ns, "link", "set", "eth0", "mtu", "1500");
        assertEquals((await ferry.shim(cniEnv("CHECK", ns, id), netconf())).code, 0);
        await run("ip", "link", "set", hostLinkName(id, "eth0"), "nomaster");
        const detached = await ferry.shim(cniEnv("CHECK", ns, id), netconf());
        assertEquals(detached.json?.code, 100);
        assertMatch(String(detached.json?.msg), /is not a port of bridge fb/);
        await run(
          "ip",
          "link",
          "set",
          hostLinkName(id, "eth0"),
          "master",
          ferry.config.network.bridge,
        );
        assertEquals((await ferry.shim(cniEnv("CHECK", ns, id), netconf())).code, 0);
        // Deleting the host end takes the pod end with it.
        await run("ip", "link", "del", hostLinkName(id, "eth0"));
        const gone = await ferry.shim(cniEnv("CHECK", ns, id), netconf());
        assertEquals(gone.json?.code, 100);
        assertMatch(String(gone.json?.msg), /eth0 does not exist/);
        assertEquals((await ferry.shim(cniEnv("DEL", ns, id), netconf())).code, 0);
        assertEquals(await ferry.allocations(), []);
      })),
});

Deno.test({
  name: "a second daemon for the same node is refused before it sweeps links the first is plugging",
  ...opts,
  fn: () =>
    withFerry({}, async (ferry) => {
      // A link on the bridge that no record names yet: what an ADD in flight looks like.
      const inFlight = hostLinkName(`c${uniqueToken()}`, "eth0");
      await run("ip", "link", "add", inFlight, "type", "veth", "peer", "name", `${inFlight}p`);
      try {
        await run("ip", "link", "set", inFlight, "master", ferry.config.network.bridge);
        await assertRejects(() => startDaemon(ferry.config), SocketInUseError, "already serving");
        assert(await hostLinkExists(inFlight), "the refused daemon removed a link");
        assert(ferry.daemon().ready());
      } finally {
        await run("ip", "link", "del", inFlight).catch(() => {});
      }
    }),
});
