// Port security at layer 2, tried as a tenant would: from a pod's network namespace with frames
// made by hand on a packet socket (CAP_NET_RAW, which every container has). The bridge handles
// frames to the IEEE link-local groups (01:80:c2:00:00:0X: STP, pause, LACP, 802.1X, LLDP…)
// before its netfilter hooks, where the guard sits, and used to learn their source all the same:
// a pod sending one with a victim's MAC as source moved the victim's MAC to its own port and
// received the victim's traffic. No frame of a pod's, to any destination, may teach a bridge of
// Ferry's a MAC its port does not own, nor grow the bridge's forwarding database. Needs root and
// nft.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { type SimNode, type SimPod, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { IS_ROOT, run } from "../../daemon/dev/netns.ts";
import { hostLinkName, stableMac } from "../../daemon/net/naming.ts";
import { dropsOf } from "../../daemon/portsec/port_guard.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { eventually } from "./_cluster.ts";
import { SPOOF, spoofIn as spoof, watchIn } from "./_frames.ts";
import { withNads } from "./_nads.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft, sanitizeResources: false, sanitizeOps: false };
const PORT = 9998;

/**
 * Every frame a tenant might send with a victim's MAC as source: to each IEEE link-local group
 * (its usual ethertype where it has one: STP as an 802.3 length with an LLC header, pause, LACP,
 * 802.1X, LLDP), broadcast, IPv4 and IPv6 multicast, another pod's MAC, the bridge's MAC and a
 * MAC nobody has.
 */
function destinations(other: string, bridge: string): [what: string, dst: string, type: string][] {
  return [
    ...linkLocalGroups(),
    ["broadcast", "ff:ff:ff:ff:ff:ff", "88b5"],
    ["IPv4 multicast", "01:00:5e:00:00:01", "0800"],
    ["IPv6 multicast", "33:33:00:00:00:01", "86dd"],
    ["another pod's MAC", other, "0800"],
    ["the bridge's MAC", bridge, "0800"],
    ["a MAC nobody has", "02:99:99:99:99:99", "0800"],
  ];
}

/** Each IEEE link-local group, with its usual ethertype where it has one (an experimental one else). */
function linkLocalGroups(): [what: string, dst: string, type: string][] {
  const types: Record<number, string> = { 0: "0026", 1: "8808", 2: "8809", 3: "888e", 14: "88cc" };
  return Array.from({ length: 16 }, (_, i) => {
    const dst = `01:80:c2:00:00:${i.toString(16).padStart(2, "0")}`;
    return [`link-local group ${dst}`, dst, types[i] ?? "88b5"];
  });
}

/** Sends `count` ordinary UDP datagrams (a socket, no hand-made frame) from `ns` to `ip`. */
async function datagrams(ns: string, ip: string, text: string, count: number): Promise<void> {
  await run(
    "ip",
    "netns",
    "exec",
    ns,
    "python3",
    "-c",
    "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nfor i in range(int(sys.argv[3])): s.sendto(('%s %d' % (sys.argv[2], i)).encode(),(sys.argv[1],int(sys.argv[4])))",
    ip,
    text,
    String(count),
    String(PORT),
  );
}

/** One forwarding-database entry of a bridge, as `bridge -j fdb show` prints it. */
interface FdbEntry {
  mac: string;
  ifname: string;
  flags?: string[];
  state?: string;
}

/** The forwarding database of bridge `bridge` in the node's namespace (its ports' entries). */
async function fdb(node: SimNode, bridge: string): Promise<FdbEntry[]> {
  const out = await run(
    "ip",
    "netns",
    "exec",
    node.ns.name,
    "bridge",
    "-j",
    "fdb",
    "show",
    "br",
    bridge,
  );
  return (JSON.parse(out) as FdbEntry[]).filter((e) => e.ifname !== bridge);
}

/** The MAC of `ifname` in `ns`. */
async function macIn(ns: string, ifname: string): Promise<string> {
  const out = await run("ip", "-n", ns, "-j", "link", "show", "dev", ifname);
  return (JSON.parse(out) as { address: string }[])[0].address;
}

/**
 * The attack and its checks on one bridge: `evil` sends every frame of {@link destinations} with
 * `victim`'s MAC as source, then 2,000 link-local and 2,000 broadcast frames from random MACs; a
 * frame of its own to `client` after them marks that the bridge has seen them all. Then the
 * bridge still forwards the victim's MAC to the victim's port only, the evil port's entries are
 * its own MAC alone (no growth), and datagrams of `client` and (with `fromNode`, where the node
 * has an address on the bridge) of the node to the victim all reach the victim and none reaches
 * the evil pod's interface.
 */
async function attack(
  node: SimNode,
  bridge: string,
  ifname: string,
  pods: { victim: SimPod; evil: SimPod; client: SimPod },
  ips: { victim: string; evil: string; client: string },
  fromNode: boolean,
): Promise<void> {
  const { victim, evil, client } = pods;
  const mac = (p: SimPod) => stableMac(p.containerId, ifname, "container");
  const port = (p: SimPod) => hostLinkName(p.containerId, ifname);
  const bridgeMac = await macIn(node.ns.name, bridge);
  const evilPortBefore = (await fdb(node, bridge)).filter((e) => e.ifname === port(evil));
  const atClient = await watchIn(client.ns.name, SPOOF, "listen", String(PORT));
  const atVictim = await watchIn(victim.ns.name, SPOOF, "listen", String(PORT));
  const sniffed = await watchIn(evil.ns.name, SPOOF, "sniff", ifname, String(PORT));
  try {
    for (const [what, dst, type] of destinations(mac(client), bridgeMac)) {
      const payload = type === "0026" ? "424203" : "";
      await spoof(evil.ns.name, ifname, "raw", mac(victim), dst, type, payload, "3").catch((e) => {
        throw new Error(`sending to ${what} failed: ${e}`);
      });
    }
    await spoof(evil.ns.name, ifname, "randsrc", "01:80:c2:00:00:03", "888e", "2000");
    await spoof(evil.ns.name, ifname, "randsrc", "ff:ff:ff:ff:ff:ff", "88b5", "2000");
    // A frame of evil's own after all of them: once it arrived, the bridge has seen them all.
    await spoof(
      evil.ns.name,
      ifname,
      "udp4",
      mac(evil),
      mac(client),
      ips.evil,
      ips.client,
      String(PORT),
      "marker",
    );
    await eventually(
      () => Promise.resolve(atClient.lines.some((l) => l === `${ips.evil} marker`)),
      "evil's own datagram after its forged frames reached the client",
    );
    const entries = await fdb(node, bridge);
    const victims = entries.filter((e) => e.mac === mac(victim));
    assertEquals(
      victims.map((e) => e.ifname),
      [port(victim)],
      `the bridge forwards the victim's MAC to the victim's port only: ${JSON.stringify(victims)}`,
    );
    const atEvil = entries.filter((e) => e.ifname === port(evil));
    const learned = atEvil.filter((e) =>
      !evilPortBefore.some((b) => b.mac === e.mac) && e.mac !== mac(evil)
    );
    assertEquals(learned, [], "the evil pod's port taught the bridge MACs it does not own");
    assert(
      atEvil.length <= evilPortBefore.length + 1,
      `the evil port's entries grew from ${evilPortBefore.length} to ${atEvil.length}`,
    );
    // The victim's traffic, from another pod and from the node, goes to the victim.
    await datagrams(client.ns.name, ips.victim, "from-client", 15);
    if (fromNode) await datagrams(node.ns.name, ips.victim, "from-node", 15);
    await eventually(
      () =>
        Promise.resolve(
          atVictim.lines.filter((l) => l.includes("from-client")).length === 15 &&
            atVictim.lines.filter((l) => l.includes("from-node")).length === (fromNode ? 15 : 0),
        ),
      `all ${fromNode ? 30 : 15} datagrams to the victim reached the victim`,
      20_000,
    ).catch((e) => {
      throw new Error(
        `${e.message}: the victim got ${atVictim.lines.length}, the evil pod sniffed ${sniffed.lines.length}`,
      );
    });
    assertEquals(
      sniffed.lines.filter((l) => l.startsWith(`${ips.victim} `)),
      [],
      "datagrams to the victim reached the evil pod's interface",
    );
  } finally {
    atClient.stop();
    atVictim.stop();
    sniffed.stop();
  }
}

Deno.test({
  name:
    "layer 2 on the node bridge: a pod sending frames of every destination (each IEEE link-local group, STP, pause, LACP, 802.1X, LLDP, broadcast, multicast, unicast) with another pod's MAC as source does not take that MAC, and 4,000 frames from random MACs teach the bridge nothing: the victim's traffic from pods and the node still reaches the victim alone",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 1 }, async (c) => {
      const [node] = c.nodes;
      const victim = await c.addPod(node, "victim", 0);
      const evil = await c.addPod(node, "evil", 0);
      const client = await c.addPod(node, "client", 0);
      await attack(node, "ferry0", "eth0", { victim, evil, client }, {
        victim: victim.ip,
        evil: evil.ip,
        client: client.ip,
      }, true);
    }),
});

Deno.test({
  name:
    "layer 2 on a native NAD bridge: a tenant's pod on another NAD naming the same bridge does not take a pod's MAC with link-local or any other frames, nor grow the bridge's forwarding database; the bridge learns no link-local source on any port",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 1 },
      (c) =>
        withNads(c, async ({ t, create }) => {
          const [node] = c.nodes;
          const bridge = `fyl${t}`;
          const nads = [`l2a-${t}`, `l2b-${t}`];
          try {
            for (const [i, name] of nads.entries()) {
              await create(name, {
                cniVersion: "1.0.0",
                type: "bridge",
                bridge,
                ipam: {
                  type: "host-local",
                  ranges: [[{
                    subnet: "192.168.87.0/24",
                    rangeStart: `192.168.87.${10 + 100 * i}`,
                    rangeEnd: `192.168.87.${99 + 100 * i}`,
                  }]],
                },
              });
            }
            const on = (nad: string) => ({ annotations: { "k8s.v1.cni.cncf.io/networks": nad } });
            const victim = await c.addPod(node, "l2v", 30_000, on(nads[0]));
            const client = await c.addPod(node, "l2c", 30_000, on(nads[0]));
            const evil = await c.addPod(node, "l2e", 30_000, on(nads[1]));
            const net1 = async (p: SimPod) =>
              (JSON.parse(
                await run("ip", "-n", p.ns.name, "-j", "-4", "addr", "show", "dev", "net1"),
              ) as { addr_info: { local: string }[] }[])[0].addr_info[0].local;
            await attack(node, bridge, "net1", { victim, evil, client }, {
              victim: await net1(victim),
              evil: await net1(evil),
              client: await net1(client),
            }, false);
            const details = await run("ip", "-n", node.ns.name, "-d", "-j", "link", "show", bridge);
            assertEquals(
              (JSON.parse(details) as {
                linkinfo: { info_data: { no_linklocal_learn?: number } };
              }[])[0]
                .linkinfo.info_data.no_linklocal_learn,
              1,
              `bridge ${bridge} learns from link-local group frames: ${details}`,
            );
          } finally {
            await run("ip", "-n", node.ns.name, "link", "del", bridge).catch(() => {});
          }
        }),
    ),
});

Deno.test({
  name:
    "layer 2 with port security off: a pod's port still teaches the bridge nothing (learning is off on every pod port, each pod's MAC a static entry), so a frame forged with another pod's MAC does not take it",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 1, config: { portSecurity: { enabled: false } } },
      async (c) => {
        const [node] = c.nodes;
        const victim = await c.addPod(node, "offv", 0);
        const evil = await c.addPod(node, "offe", 0);
        const client = await c.addPod(node, "offc", 0);
        const [vMac, eMac, cMac] = [victim, evil, client].map((p) =>
          stableMac(p.containerId, "eth0", "container")
        );
        const atClient = await watchIn(client.ns.name, SPOOF, "listen", String(PORT));
        try {
          // Unguarded, these reach the client: once the marker has, the bridge has seen them all.
          // Not IP (br_netfilter drops a malformed IP packet before the bridge learns from it).
          await spoof(evil.ns.name, "eth0", "randsrc", cMac, "88b5", "200");
          await spoof(evil.ns.name, "eth0", "raw", vMac, cMac, "88b5", "", "3");
          await spoof(
            evil.ns.name,
            "eth0",
            "udp4",
            eMac,
            cMac,
            evil.ip,
            client.ip,
            String(PORT),
            "marker",
          );
          await eventually(
            () => Promise.resolve(atClient.lines.some((l) => l === `${evil.ip} marker`)),
            "evil's marker datagram reached the client",
          );
        } finally {
          atClient.stop();
        }
        const entries = await fdb(node, "ferry0");
        const evilPort = hostLinkName(evil.containerId, "eth0");
        assertEquals(
          entries.filter((e) => e.ifname === evilPort && e.mac !== eMac && e.state !== "permanent"),
          [],
          "the evil pod's port taught the bridge other MACs",
        );
        const own = entries.filter((e) => e.ifname === evilPort && e.mac === eMac);
        assert(
          own.length === 1 && own[0].state === "static" && (own[0].flags ?? []).includes("sticky"),
          `the evil pod's MAC is one static, sticky entry on its port: ${JSON.stringify(own)}`,
        );
        assertEquals(
          entries.filter((e) => e.mac === vMac).map((e) => e.ifname),
          [hostLinkName(victim.containerId, "eth0")],
          `the victim's MAC stays on the victim's port: ${JSON.stringify(entries)}`,
        );
      },
    ),
});

/** ARP requests for `target` from `count` sender addresses 10.77.x.y the pod does not own. */
const ARP_FLOOD = `
import socket, struct, sys
ifname, mac, dst, target, count = sys.argv[1], bytes.fromhex(sys.argv[2].replace(":", "")), bytes.fromhex(sys.argv[3].replace(":", "")), sys.argv[4], int(sys.argv[5])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind((ifname, 0))
for i in range(count):
    body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac + bytes([10, 77, i >> 8 & 255, i & 255]) + bytes(6) + socket.inet_aton(target)
    s.send(dst + mac + b"\\x08\\x06" + body)
`;

Deno.test({
  name:
    "layer 2 to the node's own stack: a pod's IPv4 in frames to each link-local group (which the bridge would hand up its port's own stack, past the guard) reaches no socket of the node, from another pod's address or its own, and 2,000 ARP requests in such frames from addresses the pod does not own leave no entry in the node's neighbour table: the guard drops and counts them",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 1 }, async (c) => {
      const [node] = c.nodes;
      const victim = await c.addPod(node, "llv", 0);
      const evil = await c.addPod(node, "lle", 0);
      const evilMac = stableMac(evil.containerId, "eth0", "container");
      const evilPort = hostLinkName(evil.containerId, "eth0");
      const atNode = await watchIn(node.ns.name, SPOOF, "listen", String(PORT));
      try {
        for (const [what, dst] of linkLocalGroups()) {
          for (const [src, who] of [[victim.ip, "forged"], [evil.ip, "own"]]) {
            await spoof(
              evil.ns.name,
              "eth0",
              "udp4",
              evilMac,
              dst,
              src,
              node.address,
              String(PORT),
              `${who} ${what}`,
            );
          }
        }
        // The pod's own datagram, unicast through the bridge: once it is there, the node has seen
        // every frame above.
        await datagrams(evil.ns.name, node.address, "marker", 1);
        await eventually(
          () => Promise.resolve(atNode.lines.some((l) => l === `${evil.ip} marker 0`)),
          "the pod's ordinary datagram reached the node",
        );
        assertEquals(
          atNode.lines.filter((l) => !l.includes(" marker ")),
          [],
          "datagrams in frames to a link-local group reached the node's socket (past the guard)",
        );
        for (const dst of ["01:80:c2:00:00:03", "01:80:c2:00:00:0e"]) {
          await run(
            "ip",
            "netns",
            "exec",
            evil.ns.name,
            "python3",
            "-c",
            ARP_FLOOD,
            "eth0",
            evilMac,
            dst,
            node.address,
            "2000",
          );
          const before = atNode.lines.length;
          await datagrams(evil.ns.name, node.address, `marker-${dst}`, 1);
          await eventually(
            () =>
              Promise.resolve(atNode.lines.slice(before).some((l) => l.includes(`marker-${dst}`))),
            `the pod's ordinary datagram after the ARP requests to ${dst} reached the node`,
          );
          const entries = JSON.parse(
            await run("ip", "-n", node.ns.name, "-j", "-4", "neigh", "show", "dev", evilPort),
          ) as unknown[];
          assertEquals(
            entries.length,
            0,
            `2,000 ARP requests to ${dst} from addresses the pod does not own left ${entries.length} entries in the node's neighbour table`,
          );
        }
        // Through the guard, and counted there as what they are.
        const json = await run(
          "ip",
          "netns",
          "exec",
          node.ns.name,
          "nft",
          "-j",
          "list",
          "table",
          "bridge",
          "ferry-portsec",
        );
        const counted = new Map(dropsOf(json).map((d) => [`${d.port}/${d.kind}`, d.packets]));
        for (const kind of ["linklocal", "arp"]) {
          assert(
            (counted.get(`${evilPort}/${kind}`) ?? 0) > 0,
            `the guard counted none of the pod's link-local group frames as ${kind}: ${
              JSON.stringify([...counted])
            }`,
          );
        }
      } finally {
        atNode.stop();
      }
    }),
});

Deno.test({
  name:
    "layer 2 on the node bridge: the bridge's MAC is its own and stays when any pod leaves, so the other pods' datagrams to the gateway MAC they cached reach the node and no other pod's interface",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 1 }, async (c) => {
      const [node] = c.nodes;
      const pods: SimPod[] = [];
      for (const n of ["bma", "bmb", "bmc", "bmd"]) pods.push(await c.addPod(node, n, 0));
      const bridgeMac = await macIn(node.ns.name, "ferry0");
      const ports = await Promise.all(
        pods.map((p) => macIn(node.ns.name, hostLinkName(p.containerId, "eth0"))),
      );
      // The pod whose host-side MAC the bridge took, if any (its own MAC: none, the first goes).
      const leaver = pods[ports.indexOf(bridgeMac)] ?? pods[0];
      const [client, evil] = pods.filter((p) => p !== leaver);
      // The client resolves the gateway, as every pod talking off its node does.
      const gateway = JSON.parse(
        await run("ip", "-n", client.ns.name, "-j", "-4", "route", "show", "default"),
      )[0].gateway as string;
      await run("ip", "netns", "exec", client.ns.name, "ping", "-c", "1", "-W", "5", gateway);
      const atNode = await watchIn(node.ns.name, SPOOF, "listen", String(PORT));
      const sniffed = await watchIn(evil.ns.name, SPOOF, "sniff", "eth0", String(PORT));
      try {
        assertEquals((await c.removePod(leaver)).code, 0, "the leaving pod's DEL");
        assertEquals(
          await macIn(node.ns.name, "ferry0"),
          bridgeMac,
          "the bridge's MAC changed as a pod left",
        );
        await datagrams(client.ns.name, node.address, "to-node", 10);
        await eventually(
          () => Promise.resolve(atNode.lines.filter((l) => l.includes("to-node")).length === 10),
          "the client's 10 datagrams reached the node",
        );
        // Then one to the evil pod itself: once its sniffer has it, it has seen what came before.
        await datagrams(client.ns.name, evil.ip, "to-evil", 1);
        await eventually(
          () => Promise.resolve(sniffed.lines.some((l) => l.includes("to-evil"))),
          "the client's datagram to the evil pod reached it",
        );
        assertEquals(
          sniffed.lines.filter((l) => l.includes("to-node")),
          [],
          "the client's datagrams to the node reached another pod's interface",
        );
      } finally {
        atNode.stop();
        sniffed.stop();
      }
    }),
});
