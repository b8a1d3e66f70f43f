// Port security while a pod is being added, tried from the pod's network namespace with
// hand-made frames on a packet socket (CAP_NET_RAW, which every container has): the ADD is held
// after its veth is plugged and the pod end configured, before the guard admits the pod. Its port
// sends nothing then (its veth is made in the guard's interface group, which the table closes
// until the pod is listed); once admitted, the same frame passes. The table drops no other port
// of the namespace: unlisted ports of another bridge, named like Ferry's host ends or in another
// daemon's group, still pass. Needs root and nft.
import { assertEquals } from "deno-std/assert/mod.js";
import { IpPlumber } from "../../daemon/net/ip_plumber.ts";
import { Libc } from "../../daemon/net/netlink/libc.ts";
import { NetlinkPlumber } from "../../daemon/net/netlink/netlink_plumber.ts";
import { SpawningIpRunner } from "../../daemon/net/ip_runner.ts";
import type { VethSpec } from "../../daemon/net/plumber.ts";
import { hostLinkName, stableMac } from "../../daemon/net/naming.ts";
import { cniEnv, netconf, withFerry } from "../../daemon/dev/harness.ts";
import {
  ipIn,
  IS_ROOT,
  run,
  type TestNetns,
  uniqueToken,
  withNetns,
} from "../../daemon/dev/netns.ts";
import { portGroup } from "../../daemon/portsec/guard_table.ts";
import { eventually } from "./_cluster.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
import { SPOOF, type Watcher, watchIn } from "./_frames.ts";
const PORT = 9999;

/** A netlink plumber whose plug of `held`'s port returns only once `open()` is called. */
function holdingPlumber(held: string) {
  const real = new NetlinkPlumber(Libc.open(), new IpPlumber(new SpawningIpRunner()));
  const plugged = Promise.withResolvers<void>();
  const gate = Promise.withResolvers<void>();
  const plug = real.plugVeth.bind(real);
  real.plugVeth = async (spec: VethSpec, addressed?: Promise<void>) => {
    await plug(spec, addressed);
    if (spec.hostIfname !== held) return;
    plugged.resolve();
    await gate.promise;
  };
  return { plumber: real, plugged: plugged.promise, open: () => gate.resolve() };
}

/** A UDP listener on PORT in `ns`: the "source payload" lines it received so far. */
function listener(ns: TestNetns): Promise<Watcher> {
  return watchIn(ns.name, SPOOF, "listen", String(PORT));
}

/** One UDP datagram, a hand-made frame from `ns`'s `ifname`. */
async function udp(
  ns: TestNetns,
  ifname: string,
  from: { mac: string; ip: string },
  to: { mac: string; ip: string },
  text: string,
): Promise<void> {
  await run(
    "ip",
    "netns",
    "exec",
    ns.name,
    "python3",
    SPOOF,
    ifname,
    "udp4",
    from.mac,
    to.mac,
    from.ip,
    to.ip,
    String(PORT),
    text,
  );
}

/** The MAC of `ifname` in `ns`. */
async function macIn(ns: TestNetns, ifname: string): Promise<string> {
  return (JSON.parse(await ipIn(ns, "-j", "link", "show", "dev", ifname)) as { address: string }[])[
    0
  ].address;
}

Deno.test({
  name:
    "port security: a pod's port sends nothing from the moment its veth exists until its ADD admits the pod (a datagram from the pod end while the ADD is held between plumbing and admission is dropped; the same one after passes), and the table drops no unlisted port of another bridge of the namespace, named like Ferry's or in another daemon's group",
  ignore: !IS_ROOT || !hasNft,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const [peerId, heldId] = [`p${uniqueToken()}`, `h${uniqueToken()}`];
    const holding = holdingPlumber(hostLinkName(heldId, "eth0"));
    try {
      await withFerry(
        { daemon: { plumber: holding.plumber } },
        (ferry) =>
          withNetns(5, async ([peerNs, heldNs, o1, o2, o3]) => {
            const added = await ferry.shim(cniEnv("ADD", peerNs, peerId), netconf());
            assertEquals(added.code, 0, added.stdout);
            const peer = {
              mac: stableMac(peerId, "eth0", "container"),
              ip: (JSON.parse(added.stdout) as { ips: { address: string }[] }).ips[0].address
                .split("/")[0],
            };
            const atPeer = await listener(peerNs);
            // Another bridge of the same namespace, its ports listed by no table: one named like
            // Ferry's host ends (default group), one in another daemon's group.
            const t = uniqueToken().slice(0, 6);
            const other = `fo${t}`;
            const ends = [`fy${t}a`, `fy${t}b`, `fx${t}c`];
            await run("ip", "link", "add", other, "type", "bridge");
            try {
              await run("ip", "link", "set", other, "up");
              const nss = [o1, o2, o3];
              for (const [i, end] of ends.entries()) {
                const group = i === 1 ? ["group", String(portGroup(`fp${t}other`))] : [];
                await run(
                  "ip",
                  "link",
                  "add",
                  end,
                  ...group,
                  "type",
                  "veth",
                  "peer",
                  "name",
                  "eth0",
                  "netns",
                  nss[i].name,
                );
                await run("ip", "link", "set", end, "master", other, "up");
                await ipIn(nss[i], "link", "set", "eth0", "up");
                await ipIn(nss[i], "addr", "add", `192.0.2.${i + 1}/24`, "dev", "eth0");
              }
              const atO3 = await listener(o3);
              try {
                // The pod under ADD, held once its veth is plugged and its end configured.
                const adding = ferry.shim(cniEnv("ADD", heldNs, heldId), netconf());
                await Promise.race([
                  holding.plugged,
                  adding.then((r) => Promise.reject(new Error(`ADD ended unplugged: ${r.stdout}`))),
                ]);
                const port = hostLinkName(heldId, "eth0");
                assertEquals(
                  (JSON.parse(await run("ip", "-j", "link", "show", "dev", port)) as {
                    group: string;
                  }[])[0].group,
                  String(portGroup(ferry.config.portSecurity.table)),
                  "the port is made in the guard's interface group",
                );
                const held = {
                  mac: stableMac(heldId, "eth0", "container"),
                  ip: JSON.parse(await ipIn(heldNs, "-j", "-4", "addr", "show", "dev", "eth0"))[0]
                    .addr_info[0].local as string,
                };
                await udp(heldNs, "eth0", held, peer, "before-admission");
                // The other bridge's unlisted ports pass while this table holds the port closed.
                const o3Mac = { mac: await macIn(o3, "eth0"), ip: "192.0.2.3" };
                await udp(
                  o1,
                  "eth0",
                  { mac: await macIn(o1, "eth0"), ip: "192.0.2.1" },
                  o3Mac,
                  "ferry-named",
                );
                await udp(
                  o2,
                  "eth0",
                  { mac: await macIn(o2, "eth0"), ip: "192.0.2.2" },
                  o3Mac,
                  "other-group",
                );
                await eventually(
                  () => Promise.resolve(atO3.lines.length === 2),
                  `both datagrams on the other bridge arrive (got ${JSON.stringify(atO3.lines)})`,
                  10_000,
                );
                holding.open();
                const result = await adding;
                assertEquals(result.code, 0, result.stdout);
                await udp(heldNs, "eth0", held, peer, "after-admission");
                await eventually(
                  () => Promise.resolve(atPeer.lines.includes(`${held.ip} after-admission`)),
                  "the admitted pod's datagram reaches its peer",
                  10_000,
                );
                assertEquals(
                  atPeer.lines,
                  [`${held.ip} after-admission`],
                  "the pod's port sent before its admission",
                );
              } finally {
                atO3.stop();
              }
            } finally {
              atPeer.stop();
              holding.open();
              for (const end of ends) await run("ip", "link", "del", end).catch(() => {});
              await run("ip", "link", "del", other).catch(() => {});
            }
          }),
      );
    } finally {
      holding.open();
      holding.plumber.close();
    }
  },
});
