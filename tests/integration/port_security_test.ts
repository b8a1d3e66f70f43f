// Port security, tried as a tenant would: from a pod's network namespace with hand-made frames on
// a packet socket (CAP_NET_RAW, which every container has), on the simulated cluster (stand-in or,
// in `test:real`, a real kube-apiserver). Three pods on one dual-stack node: `db` isolated by a
// NetworkPolicy that admits only `app=web`, `web`, and `evil`, which forges. Each forgery is
// dropped on the host side and counted for evil's port and its kind; the pods' own traffic is not
// touched; the guard holds while the daemon is down and after its restart; a DEL takes the pod's
// elements away; turned off, the same frames get through (they are valid). Needs root and nft.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import {
  type SimNode,
  type SimPod,
  waitReady,
  withSimCluster,
} from "../../daemon/dev/cluster_sim.ts";
import {
  IS_ROOT,
  kernelSupports,
  run,
  type TestNetns,
  uniqueToken,
  withMasterLink,
  withNetns,
} from "../../daemon/dev/netns.ts";
import { cniEnv, netconf, withFerry } from "../../daemon/dev/harness.ts";
import { podGuardTable } from "../../daemon/portsec/pod_guard.ts";
import { EVENTS, NETWORK_POLICIES } from "../../daemon/k8s/resources.ts";
import type { KubeObject } from "../../daemon/k8s/client.ts";
import { ALLOWED_SOURCES_ANNOTATION } from "../../daemon/portsec/allowed_sources.ts";
import { hostLinkName, stableMac } from "../../daemon/net/naming.ts";
import { dropsOf } from "../../daemon/portsec/port_guard.ts";
import type { GuardKind } from "../../daemon/portsec/guard_table.ts";
import { linkLocalOf, portGroup } from "../../daemon/portsec/guard_table.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { eventually } from "./_cluster.ts";
import { SPOOF, spoofIn, type Watcher, watchIn } from "./_frames.ts";
import { withNads } from "./_nads.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft, sanitizeResources: false, sanitizeOps: false };
const PORT = 9999;
const TABLE = "ferry-portsec";

const portOf = (p: SimPod) => hostLinkName(p.containerId, "eth0");
const macOf = (p: SimPod) => stableMac(p.containerId, "eth0", "container");

/** Sends one frame of `kind` from `pod`'s eth0 (tests/integration/_spoof.py). */
function send(pod: SimPod, kind: string, ...args: string[]): Promise<void> {
  return sendOn(pod, "eth0", kind, ...args);
}

/** Sends one frame of `kind` from `pod`'s interface `ifname`. */
function sendOn(pod: SimPod, ifname: string, kind: string, ...args: string[]): Promise<void> {
  return spoofIn(pod.ns.name, ifname, kind, ...args);
}

/** The node's drop counters: packets per port and kind. */
async function drops(node: SimNode): Promise<Map<string, number>> {
  const out = await new Deno.Command("ip", {
    args: ["netns", "exec", node.ns.name, "nft", "-j", "list", "table", "bridge", TABLE],
    stdout: "piped",
    stderr: "null",
  }).output();
  const counts = new Map<string, number>();
  if (!out.success) return counts;
  for (const d of dropsOf(new TextDecoder().decode(out.stdout))) {
    counts.set(`${d.port}/${d.kind}`, d.packets);
  }
  return counts;
}

/** Set `name` of the node's guard table, as nft lists it. */
function guardSet(node: SimNode, name: string): Promise<string> {
  return run("ip", "netns", "exec", node.ns.name, "nft", "list", "set", "bridge", TABLE, name);
}

/** Whether the node's guard lists `pod`'s port. */
async function guarded(node: SimNode, pod: SimPod): Promise<boolean> {
  const out = await new Deno.Command("ip", {
    args: ["netns", "exec", node.ns.name, "nft", "list", "set", "bridge", TABLE, "ports"],
    stdout: "piped",
    stderr: "null",
  }).output();
  return out.success && new TextDecoder().decode(out.stdout).includes(`"${portOf(pod)}"`);
}

/** A UDP listener on PORT in `pod`: the "source payload" lines it received so far. */
function listener(pod: SimPod): Promise<Watcher> {
  return watchIn(pod.ns.name, SPOOF, "listen", String(PORT));
}

Deno.test({
  name:
    "port security: a pod's forged IPv4 sources (to an isolated pod, an open one, outside every range), forged IPv6 sources, source MAC, VLAN-tagged frame, ARP reply and gratuitous ARP, neighbour advertisement for another's address, router advertisement, ICMP and ICMPv6 redirects and DHCP offer are dropped on the host side, counted per port and kind and said on the pod and in the log; the pods' own traffic and duplicate address detection pass, link-local data between pods does not; the guard holds while the daemon is down and after its restart; a DEL removes the pod's port from it; turned off, the same frames get through",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 1, dualStack: true }, async (c) => {
      const [node] = c.nodes;
      const db = await c.addPod(node, "db", 0, { labels: { app: "db" } });
      const web = await c.addPod(node, "web", 0, { labels: { app: "web" } });
      const evil = await c.addPod(node, "evil", 0, { labels: { app: "evil" } });
      const policy: NetworkPolicy = {
        metadata: { name: `db-from-web-${db.containerId}`.slice(0, 60), namespace: "default" },
        spec: {
          podSelector: { matchLabels: { app: "db" } },
          ingress: [{ from: [{ podSelector: { matchLabels: { app: "web" } } }] }],
        },
      };
      await c.client.create(NETWORK_POLICIES, policy);
      const [atDb, atWeb] = [await listener(db), await listener(web)];
      const got = (l: { lines: string[] }, text: string) => l.lines.some((x) => x.endsWith(text));
      try {
        // The pods' own traffic first: web reaches db through its policy, evil reaches web.
        await eventually(async () => {
          await send(web, "udp4", macOf(web), macOf(db), web.ip, db.ip, String(PORT), "hi-web");
          return got(atDb, "hi-web");
        }, "web's own datagram reaches db (its policy admits app=web)");
        await send(evil, "udp4", macOf(evil), macOf(web), evil.ip, web.ip, String(PORT), "hi-evil");
        await eventually(
          () => Promise.resolve(got(atWeb, "hi-evil")),
          "evil's own datagram reaches web",
        );
        for (const [from, to] of [[evil, web], [web, evil], [db, web]]) {
          await run("ip", "netns", "exec", from.ns.name, "ping", "-c1", "-W5", to.ip);
          await run("ip", "netns", "exec", from.ns.name, "ping", "-6", "-c1", "-W5", to.ip6!);
        }
        // Each pod's port is on the IPv4 fast path (its index, MAC and address in `fast4`, to the
        // node and to other pods): the TCP below, own and forged, meets the guard's first rule,
        // not only the long way.
        const fast = await guardSet(node, "fast4");
        for (const p of [db, web, evil]) {
          assert(
            fast.includes(` . ${macOf(p)} . ${p.ip} . tcp . host`) &&
              fast.includes(` . ${macOf(p)} . ${p.ip} . tcp . other`),
            `${p.name}'s port is not on the fast path:\n${fast}`,
          );
        }
        // TCP as itself, both families (the guard's fast paths): never dropped.
        await send(evil, "tcp4", macOf(evil), macOf(web), evil.ip, web.ip, String(PORT));
        await send(evil, "tcp6", macOf(evil), macOf(web), evil.ip6!, web.ip6!, String(PORT));
        // Duplicate address detection of a new address (from ::) is the pod's own business.
        await send(evil, "ns6", macOf(evil), "::", `${evil.ip6!.replace(/::.*$/, "")}::beef`);
        const before = await drops(node);
        // Pods share no link-local scope: a ping to another's link-local address does not get
        // through (evil's: its drops are expected).
        const ll = await new Deno.Command("ip", {
          args: [
            "netns",
            "exec",
            evil.ns.name,
            "ping",
            "-6",
            "-c1",
            "-W1",
            `${linkLocalOf(macOf(web))}%eth0`,
          ],
          stdout: "null",
          stderr: "null",
        }).output();
        assertEquals(ll.success, false, "evil reached web's link-local address");
        const evilMac = macOf(evil), evilLl = linkLocalOf(evilMac);
        const attacks: [GuardKind, string, string[]][] = [
          ["ipv4", "udp4", [evilMac, macOf(db), web.ip, db.ip, String(PORT), "forged-to-db"]],
          ["ipv4", "udp4", [evilMac, macOf(web), db.ip, web.ip, String(PORT), "forged-to-web"]],
          ["ipv4", "udp4", [evilMac, macOf(web), "192.0.2.77", web.ip, String(PORT), "forged-out"]],
          ["mac", "udp4", [macOf(db), macOf(web), evil.ip, web.ip, String(PORT), "forged-mac"]],
          // TCP over IPv4 (the guard's fast path): another's source or MAC, 0.0.0.0, broadcast.
          ["ipv4", "tcp4", [evilMac, macOf(db), web.ip, db.ip, String(PORT)]],
          ["ipv4", "tcp4", [evilMac, macOf(db), "0.0.0.0", db.ip, String(PORT)]],
          ["mac", "tcp4", [macOf(web), macOf(db), evil.ip, db.ip, String(PORT)]],
          ["linklocal", "tcp4", [evilMac, "ff:ff:ff:ff:ff:ff", evil.ip, db.ip, String(PORT)]],
          ["linklocal", "tcp4", [evilMac, macOf(db), evil.ip, "255.255.255.255", String(PORT)]],
          ["linklocal", "tcp4", [
            evilMac,
            "01:00:5e:00:00:fb",
            evil.ip,
            "224.0.0.251",
            String(PORT),
          ]],
          // The fast path's own shapes from evil's own MAC and address: a multicast MAC to a
          // unicast address, and TCP behind a VLAN tag (priority, VLAN 5, and an 802.1ad tag).
          ["linklocal", "tcp4", [evilMac, "01:00:5e:01:02:03", evil.ip, db.ip, String(PORT)]],
          ["ethertype", "tcp4", [evilMac, macOf(db), evil.ip, db.ip, String(PORT), "0"]],
          ["ethertype", "tcp4", [evilMac, macOf(db), evil.ip, db.ip, String(PORT), "5"]],
          ["ethertype", "tcp4", [evilMac, macOf(db), evil.ip, db.ip, String(PORT), "5", "88a8"]],
          // TCP over IPv6 (the guard's second fast path): another's source or MAC, ::, a
          // multicast frame or destination, link-local to link-local.
          ["ipv6", "tcp6", [evilMac, macOf(db), web.ip6!, db.ip6!, String(PORT)]],
          ["ipv6", "tcp6", [evilMac, macOf(db), "::", db.ip6!, String(PORT)]],
          ["mac", "tcp6", [macOf(web), macOf(db), evil.ip6!, db.ip6!, String(PORT)]],
          ["linklocal", "tcp6", [evilMac, "33:33:00:00:00:01", evil.ip6!, db.ip6!, String(PORT)]],
          ["linklocal", "tcp6", [evilMac, macOf(db), evil.ip6!, "ff02::1", String(PORT)]],
          ["linklocal", "tcp6", [evilMac, macOf(db), evilLl, linkLocalOf(macOf(db)), String(PORT)]],
          ["ipv6", "udp6", [evilMac, macOf(db), web.ip6!, db.ip6!, String(PORT), "forged-6"]],
          ["ipv6", "udp6", [
            evilMac,
            macOf(web),
            "2001:db8::77",
            web.ip6!,
            String(PORT),
            "forged-6",
          ]],
          [
            "ethertype",
            "vlan4",
            [evilMac, macOf(web), db.ip, web.ip, String(PORT), "forged-vlan"],
          ],
          ["arp", "arp", [evilMac, macOf(db), "2", evilMac, web.ip, macOf(db), db.ip]],
          ["arp", "arp", [
            evilMac,
            "ff:ff:ff:ff:ff:ff",
            "1",
            evilMac,
            web.ip,
            "00:00:00:00:00:00",
            web.ip,
          ]],
          ["nd", "na", [evilMac, macOf(db), evil.ip6!, db.ip6!, web.ip6!]],
          ["ra", "ra", [evilMac, evilLl, "fd00:bad:bad:bad::"]],
          ["redirect", "redirect4", [evilMac, macOf(db), evil.ip, db.ip, evil.ip, web.ip]],
          ["redirect", "redirect6", [
            evilMac,
            macOf(db),
            evilLl,
            linkLocalOf(macOf(db)),
            evilLl,
            web.ip6!,
          ]],
          ["dhcp", "dhcp4", [evilMac, evil.ip]],
          ["linklocal", "udp6", [
            evilMac,
            macOf(web),
            evilLl,
            linkLocalOf(macOf(web)),
            String(PORT),
            "to-link-local",
          ]],
        ];
        // db knows web's MAC before evil claims web's address.
        await run("ip", "netns", "exec", db.ns.name, "ping", "-c1", "-W5", web.ip);
        for (const [kind, frame, args] of attacks) {
          const key = `${portOf(evil)}/${kind}`;
          const was = (await drops(node)).get(key) ?? 0;
          await send(evil, frame, ...args);
          await eventually(
            async () => ((await drops(node)).get(key) ?? 0) > was,
            `evil's ${frame} (${args.join(" ")}) is dropped and counted as ${kind}`,
            10_000,
          );
        }
        // After the forgeries, each listener gets a genuine datagram: the forged ones, sent
        // earlier, never came.
        await send(web, "udp4", macOf(web), macOf(db), web.ip, db.ip, String(PORT), "bye-web");
        await send(evil, "udp4", evilMac, macOf(web), evil.ip, web.ip, String(PORT), "bye-evil");
        await eventually(
          () => Promise.resolve(got(atDb, "bye-web") && got(atWeb, "bye-evil")),
          "genuine",
        );
        const forged = [...atDb.lines, ...atWeb.lines].filter((l) => l.includes("forged"));
        assertEquals(forged, [], "no forged datagram arrived");
        // Said on the pod and in the log (the counters are read every 10 s).
        await eventually(
          async () => {
            const { items } = await c.client.listAll<
              KubeObject & { reason?: string; message?: string; involvedObject?: { name?: string } }
            >(EVENTS, { namespace: "default" });
            return items.some((e) =>
              e.involvedObject?.name === evil.name && e.reason === "SpoofedFramesDropped" &&
              (e.message ?? "").includes("forging")
            );
          },
          "a SpoofedFramesDropped Event on evil",
          40_000,
          500,
        );
        const log = await Deno.readTextFile(node.log);
        assert(
          log.includes(`pod default/${evil.name} sent`) && log.includes("dropped by port security"),
          "a log line names evil and what it forged",
        );
        const neigh = await run("ip", "-n", db.ns.name, "neigh", "show", web.ip);
        assert(!neigh.includes(evilMac), `db's neighbour entry for web is evil's: ${neigh}`);
        const v6 = await run("ip", "-n", db.ns.name, "-6", "addr", "show", "dev", "eth0");
        assert(!v6.includes("fd00:bad"), `db took evil's router advertisement: ${v6}`);
        // Nothing of the genuine traffic (before and after) was dropped.
        const after = await drops(node);
        for (const p of [db, web]) {
          const theirs = [...after].filter(([k, n]) => k.startsWith(portOf(p)) && n > 0);
          assertEquals(theirs, [], `${p.name}'s own frames were dropped`);
        }
        assertEquals(
          [...before].filter(([k, n]) => k.startsWith(portOf(evil)) && n > 0),
          [],
          "evil's own traffic and duplicate address detection were dropped",
        );

        // The daemon down: the guard stays. Restarted: rebuilt from the records, still there.
        const forge = (text: string) =>
          send(evil, "udp4", evilMac, macOf(web), db.ip, web.ip, String(PORT), text);
        const ipv4Drops = async () => (await drops(node)).get(`${portOf(evil)}/ipv4`) ?? 0;
        await c.killDaemon(node);
        const down = await ipv4Drops();
        await forge("forged-while-down");
        await eventually(
          async () => (await ipv4Drops()) > down,
          "dropped while the daemon is down",
        );
        await c.startDaemon(node);
        await waitReady(node);
        await eventually(() => guarded(node, evil), "evil's port under guard after the restart");
        const restarted = await ipv4Drops();
        await forge("forged-after-restart");
        await eventually(async () => (await ipv4Drops()) > restarted, "dropped after the restart");
        await send(evil, "udp4", evilMac, macOf(web), evil.ip, web.ip, String(PORT), "back-evil");
        await eventually(
          () => Promise.resolve(got(atWeb, "back-evil")),
          "evil's own traffic after restart",
        );
        assertEquals(atWeb.lines.filter((l) => l.includes("forged")), []);

        // Turned off: the table goes, and the same forged frame is delivered.
        await c.reconfigure(node, { portSecurity: { enabled: false } });
        await waitReady(node);
        await eventually(async () => !(await guarded(node, evil)), "the table removed");
        await eventually(async () => {
          await forge("forged-unguarded");
          return got(atWeb, "forged-unguarded");
        }, "unguarded, a forged source gets through (the frames are valid)");
        await c.reconfigure(node, { portSecurity: { enabled: true } });
        await waitReady(node);
        await eventually(() => guarded(node, evil), "guarded again");

        // A DEL takes the port out of the guard.
        const out = await c.removePod(evil);
        assertEquals(out.code, 0, out.stdout + out.stderr);
        // Released once the link is gone, which the DEL's answer does not wait for.
        await eventually(
          async () => !(await guarded(node, evil)),
          "evil's port left the guard at DEL",
        );
        assert(await guarded(node, web), "web's port stays");
      } finally {
        atDb.stop();
        atWeb.stop();
        await c.client.delete(NETWORK_POLICIES, "default", policy.metadata!.name!).catch(() => {});
      }
    }),
});

Deno.test({
  name:
    "port security: a pod whose annotation names extra source prefixes sends from them (and from nothing else) only where the operator allows it, also after a restart; elsewhere the annotation is refused with a Warning Event and the pod sends as itself only",
  ...opts,
  fn: () =>
    withSimCluster({
      kubeconfig: REAL_KUBECONFIG,
      nodes: 2,
      dualStack: true,
      config: { portSecurity: { allowSourcePrefixesAnnotation: true } },
    }, async (c) => {
      const [allowing, refusing] = c.nodes;
      const annotations = { [ALLOWED_SOURCES_ANNOTATION]: "198.51.100.0/24, fd00:abcd::/64" };
      await c.reconfigure(refusing, { portSecurity: { allowSourcePrefixesAnnotation: false } });
      await waitReady(refusing);
      const gw = await c.addPod(allowing, "gw", 0, { annotations });
      const peer = await c.addPod(allowing, "peer", 0);
      const asker = await c.addPod(refusing, "asker", 0, { annotations });
      const near = await c.addPod(refusing, "near", 0);
      const [atPeer, atNear] = [await listener(peer), await listener(near)];
      const got = (l: { lines: string[] }, text: string) => l.lines.some((x) => x.endsWith(text));
      const counted = async (node: SimNode, pod: SimPod, kind: GuardKind, was: number) => {
        await eventually(
          async () => ((await drops(node)).get(`${portOf(pod)}/${kind}`) ?? 0) > was,
          `${pod.name}'s forged ${kind} source dropped`,
          10_000,
        );
      };
      try {
        const udp = (from: SimPod, to: SimPod, src: string, text: string) =>
          send(from, "udp4", macOf(from), macOf(to), src, to.ip, String(PORT), text);
        await udp(gw, peer, "198.51.100.7", "from-allowed");
        await eventually(
          () => Promise.resolve(got(atPeer, "from-allowed")),
          "gw's datagram from its allowed prefix reaches peer",
        );
        await udp(gw, peer, "203.0.113.9", "forged-outside");
        await counted(allowing, gw, "ipv4", 0);
        await send(gw, "udp6", macOf(gw), macOf(peer), "fd00:abcd::7", peer.ip6!, "1", "x");
        await send(gw, "udp6", macOf(gw), macOf(peer), "fd00:abce::7", peer.ip6!, "1", "x");
        await counted(allowing, gw, "ipv6", 0);
        assertEquals(
          (await drops(allowing)).get(`${portOf(gw)}/ipv6`),
          1,
          "only the IPv6 source outside the allowed prefix is dropped",
        );
        // A restart rebuilds the guard from the records, the allowed prefixes with it.
        await c.killAndRestart(allowing);
        await waitReady(allowing);
        await eventually(() => guarded(allowing, gw), "gw under guard after the restart");
        await udp(gw, peer, "198.51.100.8", "allowed-after-restart");
        await eventually(
          () => Promise.resolve(got(atPeer, "allowed-after-restart")),
          "the allowed prefix still allowed after the restart",
        );
        await udp(gw, peer, "203.0.113.9", "forged-after-restart");
        await counted(allowing, gw, "ipv4", 0);

        // Refused: the same annotation on a node that does not honour it.
        await udp(asker, near, "198.51.100.7", "forged-refused");
        await counted(refusing, asker, "ipv4", 0);
        await udp(asker, near, asker.ip, "own-refused");
        await eventually(() => Promise.resolve(got(atNear, "own-refused")), "asker's own");
        assertEquals(atNear.lines.filter((l) => l.includes("forged")), []);
        assertEquals(atPeer.lines.filter((l) => l.includes("forged")), []);
        await eventually(async () => {
          const { items } = await c.client.listAll<
            KubeObject & { reason?: string; involvedObject?: { name?: string } }
          >(EVENTS, { namespace: "default" });
          return items.some((e) =>
            e.involvedObject?.name === asker.name && e.reason === "SourcePrefixesRefused"
          );
        }, "a SourcePrefixesRefused Event on asker");
        const log = await Deno.readTextFile(refusing.log);
        assert(log.includes(ALLOWED_SOURCES_ANNOTATION), "the refusal is logged");
        // Honoured but no prefix: the ADD fails with code 7 naming the entry.
        const bad = await c.addPod(allowing, "bad", 0, {
          annotations: { [ALLOWED_SOURCES_ANNOTATION]: "198.51.100.0/24,nonsense" },
        }).then(() => "plugged", (e: Error) => e.message);
        assert(bad.includes(`"code":7`) && bad.includes("nonsense"), bad);
      } finally {
        atPeer.stop();
        atNear.stop();
      }
    }),
});

Deno.test({
  name:
    "port security: IPv4-only pods reach each other, and nothing of their own traffic (duplicate address detection, router solicitations, MLD reports of their link-local addresses) is counted as forged",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 1 }, async (c) => {
      const [node] = c.nodes;
      const a = await c.addPod(node, "a", 0);
      const b = await c.addPod(node, "b", 0);
      await eventually(() => guarded(node, b), "b under guard");
      await run("ip", "netns", "exec", a.ns.name, "ping", "-c1", "-W5", b.ip);
      // Their link-local addresses go through duplicate address detection first (an IPv4-only
      // pod's interface keeps it on), then solicit routers and report their groups.
      for (const p of [a, b]) {
        await eventually(async () => {
          const v6 = await run("ip", "-n", p.ns.name, "-6", "addr", "show", "dev", "eth0");
          return v6.includes("scope link") && !v6.includes("tentative");
        }, `${p.name}'s link-local address is past duplicate address detection`);
      }
      const counted = [...await drops(node)].filter(([, n]) => n > 0);
      assertEquals(counted, [], "the pods' own frames were counted as forged");
    }),
});

Deno.test({
  name:
    "port security on a native NAD bridge: a pod's forged source and ARP on its second interface are dropped and counted for that interface's port; its own traffic there passes; DEL takes the port out",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 1 },
      (c) =>
        withNads(c, async ({ t, create }) => {
          const [node] = c.nodes;
          const name = `psbr-${t}`;
          await create(name, {
            cniVersion: "1.0.0",
            type: "bridge",
            bridge: `fyb${t}`,
            ipam: { type: "host-local", ranges: [[{ subnet: "192.168.86.0/24" }]] },
          });
          const annotations = { "k8s.v1.cni.cncf.io/networks": name };
          const f = await c.addPod(node, "nf", 30_000, { annotations });
          const g = await c.addPod(node, "ng", 30_000, { annotations });
          const net1 = async (p: SimPod) =>
            (JSON.parse(
              await run("ip", "-n", p.ns.name, "-j", "-4", "addr", "show", "dev", "net1"),
            ) as {
              addr_info: { local: string }[];
            }[])[0].addr_info[0].local;
          const [fIp, gIp] = [await net1(f), await net1(g)];
          const fMac = stableMac(f.containerId, "net1", "container");
          const gMac = stableMac(g.containerId, "net1", "container");
          const fPort = hostLinkName(f.containerId, "net1");
          // Made in the guard's interface group: unlisted, it would send nothing.
          const link = await run("ip", "-n", node.ns.name, "-j", "link", "show", "dev", fPort);
          assertEquals(
            (JSON.parse(link) as { group: string }[])[0].group,
            String(portGroup(TABLE)),
            "f's net1 port is made in the guard's interface group",
          );
          const atG = await listener(g);
          try {
            await sendOn(f, "net1", "udp4", fMac, gMac, fIp, gIp, String(PORT), "own-net1");
            await eventually(
              () => Promise.resolve(atG.lines.some((l) => l === `${fIp} own-net1`)),
              "f's own datagram on net1 reaches g",
            );
            for (
              const [kind, frame, args] of [
                ["ipv4", "udp4", [fMac, gMac, "192.168.86.250", gIp, String(PORT), "forged-net1"]],
                ["arp", "arp", [fMac, gMac, "2", fMac, "192.168.86.250", gMac, gIp]],
              ] as [GuardKind, string, string[]][]
            ) {
              await sendOn(f, "net1", frame, ...args);
              await eventually(
                async () => ((await drops(node)).get(`${fPort}/${kind}`) ?? 0) > 0,
                `f's forged ${frame} on net1 dropped and counted as ${kind}`,
                10_000,
              );
            }
            assertEquals(atG.lines.filter((l) => l.includes("forged")), []);
          } finally {
            atG.stop();
          }
          assertEquals((await c.removePod(f)).code, 0);
          const ports = await guardSet(node, "ports");
          assert(!ports.includes(fPort), `f's net1 port left the guard at DEL: ${ports}`);
        }),
    ),
});

Deno.test({
  name:
    "port security on macvlan: the pod's namespace holds a guard on its interface's egress that drops and counts a forged source, MAC and ARP sender, a router advertisement and a neighbour advertisement naming another MAC, lets its own traffic out, and goes at DEL",
  ignore: opts.ignore || !(await kernelSupports("macvlan")),
  sanitizeResources: false,
  sanitizeOps: false,
  fn: () =>
    withMasterLink((master) =>
      withFerry({}, (ferry) =>
        withNetns(2, async ([a, b]) => {
          const table = podGuardTable(ferry.config.portSecurity.table, "net1");
          const subnet = `172.${16 + Math.floor(Math.random() * 16)}.${
            Math.floor(Math.random() * 256)
          }`;
          const stdin = netconf("1.0.0", {
            name: `mv-${uniqueToken()}`,
            attachment: {
              type: "macvlan",
              master,
              mode: "bridge",
              ipam: {
                type: "host-local",
                ranges: [[{ subnet: `${subnet}.0/24` }]],
                dataDir: `${ferry.dir}/host-local`,
              },
            },
          });
          const ids = [`c${uniqueToken()}`, `c${uniqueToken()}`];
          const plugged = [];
          for (const [i, ns] of [a, b].entries()) {
            const out = await ferry.shim(cniEnv("ADD", ns, ids[i], "net1"), stdin);
            assertEquals(out.code, 0, out.stdout + out.stderr);
            plugged.push(out.json as { ips: { address: string }[] });
          }
          const [aIp, bIp] = plugged.map((r) => r.ips[0].address.split("/")[0]);
          const [aMac, bMac] = ids.map((id) => stableMac(id, "net1", "container"));
          const counts = async () => {
            const out = await run(
              "ip",
              "netns",
              "exec",
              a.name,
              "nft",
              "-j",
              "list",
              "table",
              "netdev",
              table,
            );
            const by = new Map<string, number>();
            for (
              const item of JSON.parse(out).nftables as {
                rule?: { comment?: string; expr: { counter?: { packets: number } }[] };
              }[]
            ) {
              const n = item.rule?.expr.find((e) => e.counter)?.counter?.packets ?? 0;
              if (item.rule?.comment) {
                by.set(item.rule.comment, (by.get(item.rule.comment) ?? 0) + n);
              }
            }
            return by;
          };
          const sendA = (kind: string, ...args: string[]) =>
            run("ip", "netns", "exec", a.name, "python3", SPOOF, "net1", kind, ...args).catch(() =>
              ""
            );
          const pod = (ns: TestNetns) => ({ ns }) as SimPod;
          const atB = await listener(pod(b));
          try {
            await sendA("udp4", aMac, bMac, aIp, bIp, String(PORT), "own-mv");
            await eventually(
              () => Promise.resolve(atB.lines.some((l) => l === `${aIp} own-mv`)),
              "a's own datagram over macvlan reaches b",
            );
            const attacks: [string, string, string[]][] = [
              ["ipv4", "udp4", [aMac, bMac, `${subnet}.250`, bIp, String(PORT), "forged-mv"]],
              ["mac", "udp4", [bMac, bMac, aIp, bIp, String(PORT), "forged-mv-mac"]],
              ["arp", "arp", [aMac, bMac, "2", aMac, bIp, bMac, bIp]],
              ["ra", "ra", [aMac, linkLocalOf(aMac), "fd00:bad:bad:bad::"]],
              // An advertisement of its own link-local address at b's MAC, plainly and behind a
              // nonce option.
              ...[
                `0201${bMac.replaceAll(":", "")}`,
                `0e01a1b2c3d4e5f60201${bMac.replaceAll(":", "")}`,
              ]
                .map((opts): [string, string, string[]] => [
                  "nd",
                  "nd",
                  [
                    "136",
                    aMac,
                    bMac,
                    linkLocalOf(aMac),
                    linkLocalOf(bMac),
                    linkLocalOf(aMac),
                    opts,
                  ],
                ]),
            ];
            for (const [kind, frame, args] of attacks) {
              const was = (await counts()).get(kind) ?? 0;
              await sendA(frame, ...args);
              await eventually(
                async () => ((await counts()).get(kind) ?? 0) > was,
                `a's ${frame} (${args.join(" ")}) dropped in its namespace and counted as ${kind}`,
                10_000,
              );
            }
            await sendA("udp4", aMac, bMac, aIp, bIp, String(PORT), "bye-mv");
            await eventually(
              () => Promise.resolve(atB.lines.some((l) => l.endsWith("bye-mv"))),
              "genuine",
            );
            assertEquals(atB.lines.filter((l) => l.includes("forged")), []);
          } finally {
            atB.stop();
          }
          const del = await ferry.shim(cniEnv("DEL", a, ids[0], "net1"), stdin);
          assertEquals(del.code, 0, del.stdout);
          const left = await run("ip", "netns", "exec", a.name, "nft", "list", "tables");
          assert(!left.includes(table), `the guard table left at DEL: ${left}`);
          await ferry.shim(cniEnv("DEL", b, ids[1], "net1"), stdin);
        }))
    ),
});
