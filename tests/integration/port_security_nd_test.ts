// Port security and neighbour discovery's link-layer address options, tried as a tenant would:
// from a pod's network namespace with hand-made frames on a packet socket (CAP_NET_RAW). A
// solicitation or advertisement naming the pod's own address but another MAC in its Source or
// Target Link-Layer Address option poisons its neighbours' caches as a forged ARP reply does; so
// does one that hides such an option behind another. Each is dropped and counted as `nd`, the
// victim's neighbour entry keeps the pod's MAC; the pods' own neighbour discovery (address
// resolution, duplicate address detection with its nonce, a duplicate detected) is untouched.
// On the simulated cluster (stand-in or, in `test:real`, a real kube-apiserver). Needs root and nft.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { type SimNode, type SimPod, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { IS_ROOT, run } from "../../daemon/dev/netns.ts";
import { hostLinkName, stableMac } from "../../daemon/net/naming.ts";
import { dropsOf } from "../../daemon/portsec/port_guard.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { eventually } from "./_cluster.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft, sanitizeResources: false, sanitizeOps: false };
const SPOOF = new URL("./_spoof.py", import.meta.url).pathname;
const TABLE = "ferry-portsec";

const portOf = (p: SimPod) => hostLinkName(p.containerId, "eth0");
const macOf = (p: SimPod) => stableMac(p.containerId, "eth0", "container");
const hexMac = (mac: string) => mac.replaceAll(":", "");
/** A Source (1) or Target (2) Link-Layer Address option naming `mac`, as hex. */
const llaOption = (type: 1 | 2, mac: string) => `0${type}01${hexMac(mac)}`;

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

/** The MAC `pod`'s neighbour entry for `ip` names (empty when it has none). */
async function neighbourMac(pod: SimPod, ip: string): Promise<string> {
  const line = await run("ip", "-n", pod.ns.name, "neigh", "show", ip, "dev", "eth0");
  return / lladdr ([0-9a-f:]{17})/.exec(line)?.[1] ?? "";
}

Deno.test({
  name:
    "port security: a neighbour solicitation or advertisement whose link-layer address option names another MAC (another pod's or any), or hides one behind another option, is dropped and counted as nd and leaves the victim's neighbour entry alone; the pods' own address resolution and duplicate address detection (its nonce, a duplicate found) pass",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 1, dualStack: true }, async (c) => {
      const [node] = c.nodes;
      const db = await c.addPod(node, "db", 0);
      const web = await c.addPod(node, "web", 0);
      const evil = await c.addPod(node, "evil", 0);
      const [evilMac, dbMac, webMac] = [macOf(evil), macOf(db), macOf(web)];

      // Honest neighbour discovery: address resolution both ways, ping6 over it.
      for (const [from, to] of [[evil, db], [db, evil], [web, db], [db, web]]) {
        await run("ip", "netns", "exec", from.ns.name, "ping", "-6", "-c1", "-W5", to.ip6!);
      }
      assertEquals(await neighbourMac(db, evil.ip6!), evilMac, "db resolved evil's address");
      // Duplicate address detection (a solicitation from :: with its nonce option) finds a
      // duplicate: db's address added on evil is answered by db's advertisement. (Ferry turns
      // detection off for the addresses it gives; a workload may turn it on for its own.)
      await run(
        "ip",
        "netns",
        "exec",
        evil.ns.name,
        "sysctl",
        "-qw",
        "net.ipv6.conf.eth0.accept_dad=1",
        "net.ipv6.conf.eth0.enhanced_dad=1",
      );
      await run("ip", "-n", evil.ns.name, "addr", "add", `${db.ip6}/128`, "dev", "eth0");
      try {
        await eventually(
          async () =>
            (await run("ip", "-n", evil.ns.name, "-6", "addr", "show", "dev", "eth0"))
              .includes("dadfailed"),
          "evil's duplicate address detection of db's address fails (db answered it)",
        );
      } finally {
        await run("ip", "-n", evil.ns.name, "addr", "del", `${db.ip6}/128`, "dev", "eth0");
      }
      const honest = [...await drops(node)].filter(([, n]) => n > 0);
      assertEquals(honest, [], "the pods' own neighbour discovery was counted as forged");

      const nonce = "0e01a1b2c3d4e5f6";
      const attacks: [string, string[]][] = [
        ["an advertisement of evil's address at web's MAC", [
          "136",
          evilMac,
          dbMac,
          evil.ip6!,
          db.ip6!,
          evil.ip6!,
          llaOption(2, webMac),
        ]],
        ["an advertisement of evil's address at a MAC no pod has", [
          "136",
          evilMac,
          dbMac,
          evil.ip6!,
          db.ip6!,
          evil.ip6!,
          llaOption(2, "02:00:00:00:be:ef"),
        ]],
        ["a solicitation from evil's address with web's MAC as its source", [
          "135",
          evilMac,
          dbMac,
          evil.ip6!,
          db.ip6!,
          db.ip6!,
          llaOption(1, webMac),
        ]],
        ["a solicitation whose source MAC option hides behind a nonce", [
          "135",
          evilMac,
          dbMac,
          evil.ip6!,
          db.ip6!,
          db.ip6!,
          nonce + llaOption(1, webMac),
        ]],
        ["an advertisement whose target MAC option hides behind an unknown option", [
          "136",
          evilMac,
          dbMac,
          evil.ip6!,
          db.ip6!,
          evil.ip6!,
          "1f01000000000000" + llaOption(2, webMac),
        ]],
        // Not a poisoning, but nothing a pod's kernel sends either: one option of another type.
        ["an advertisement whose only option is of an unknown type", [
          "136",
          evilMac,
          dbMac,
          evil.ip6!,
          db.ip6!,
          evil.ip6!,
          "1f01000000000000",
        ]],
      ];
      const key = `${portOf(evil)}/nd`;
      for (const [what, args] of attacks) {
        const was = (await drops(node)).get(key) ?? 0;
        await run("ip", "netns", "exec", evil.ns.name, "python3", SPOOF, "eth0", "nd", ...args);
        await eventually(
          async () => ((await drops(node)).get(key) ?? 0) > was,
          `evil's ${what} is dropped and counted as nd`,
          10_000,
        ).catch(async (e) => {
          const entry = await neighbourMac(db, evil.ip6!);
          throw new Error(
            `${e.message} (db's entry for evil names ${entry}, evil's MAC is ${evilMac})`,
          );
        });
        const entry = await neighbourMac(db, evil.ip6!);
        assertEquals(entry, evilMac, `after ${what}, db's entry for evil names ${entry}`);
      }

      // The honest traffic after the attempts: still resolved right, nothing of theirs dropped.
      for (const [from, to] of [[db, evil], [evil, db], [web, db]]) {
        await run("ip", "netns", "exec", from.ns.name, "ping", "-6", "-c1", "-W5", to.ip6!);
      }
      const after = await drops(node);
      for (const p of [db, web]) {
        const theirs = [...after].filter(([k, n]) => k.startsWith(portOf(p)) && n > 0);
        assertEquals(theirs, [], `${p.name}'s own frames were dropped`);
      }
      const evils = [...after].filter(([k, n]) => k.startsWith(portOf(evil)) && n > 0);
      assert(
        evils.every(([k]) => k === key),
        `evil's drops other than nd: ${JSON.stringify(evils)}`,
      );
    }),
});

/** The MAC the node's entry for `ip` on its bridge names (empty when it has none). */
async function nodeNeighbourMac(node: SimNode, ip: string): Promise<string> {
  const line = await run("ip", "-n", node.ns.name, "neigh", "show", ip, "dev", "ferry0");
  return / lladdr ([0-9a-f:]{17})/.exec(line)?.[1] ?? "";
}

Deno.test({
  name:
    "port security: a router solicitation whose source link-layer address option names another MAC, or hides it behind another option, is dropped and counted as nd and leaves the node's (the router's) neighbour entry for the pod alone; the pod's own solicitation passes",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 1, dualStack: true }, async (c) => {
      const [node] = c.nodes;
      const web = await c.addPod(node, "web", 0);
      const evil = await c.addPod(node, "evil", 0);
      const [evilMac, webMac] = [macOf(evil), macOf(web)];
      const key = `${portOf(evil)}/nd`;
      // The node routes IPv6 (a router: it reads solicitations' source link-layer options).
      const fwd = await run(
        "ip",
        "netns",
        "exec",
        node.ns.name,
        "sysctl",
        "-n",
        "net.ipv6.conf.ferry0.forwarding",
      );
      assertEquals(fwd.trim(), "1", "the node's bridge forwards IPv6 (a router)");
      // Honest: evil's own solicitation with its own MAC.
      await run(
        "ip",
        "netns",
        "exec",
        evil.ns.name,
        "python3",
        SPOOF,
        "eth0",
        "rs",
        evilMac,
        evil.ip6!,
        llaOption(1, evilMac),
      );
      await eventually(
        async () => (await nodeNeighbourMac(node, evil.ip6!)) === evilMac,
        "the node's entry for evil names evil's MAC after its own solicitation",
      );
      assertEquals((await drops(node)).get(key) ?? 0, 0, "evil's own solicitation was counted");
      for (
        const [what, options] of [
          ["naming web's MAC", llaOption(1, webMac)],
          ["naming web's MAC behind an unknown option", "1f01000000000000" + llaOption(1, webMac)],
        ]
      ) {
        const was = (await drops(node)).get(key) ?? 0;
        await run(
          "ip",
          "netns",
          "exec",
          evil.ns.name,
          "python3",
          SPOOF,
          "eth0",
          "rs",
          evilMac,
          evil.ip6!,
          options,
        );
        await eventually(
          async () => ((await drops(node)).get(key) ?? 0) > was,
          `evil's router solicitation ${what} is dropped and counted as nd`,
          10_000,
        ).catch(async (e) => {
          throw new Error(
            `${e.message} (the node's entry for evil names ${await nodeNeighbourMac(
              node,
              evil.ip6!,
            )}, evil's MAC is ${evilMac})`,
          );
        });
        const entry = await nodeNeighbourMac(node, evil.ip6!);
        assertEquals(
          entry,
          evilMac,
          `after a solicitation ${what}, the node's entry names ${entry}`,
        );
      }
    }),
});

Deno.test({
  name:
    "port security: a neighbour advertisement whose Target Link-Layer Address option travels in a second IPv6 fragment (which no rule can read) is dropped and counted as nd (its first fragment: no extension header on neighbour discovery) and leaves the victim's neighbour entry alone",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 1, dualStack: true }, async (c) => {
      const [node] = c.nodes;
      const db = await c.addPod(node, "db", 0);
      const web = await c.addPod(node, "web", 0);
      const evil = await c.addPod(node, "evil", 0);
      const [evilMac, dbMac, webMac] = [macOf(evil), macOf(db), macOf(web)];
      await run("ip", "netns", "exec", db.ns.name, "ping", "-6", "-c1", "-W5", evil.ip6!);
      assertEquals(await neighbourMac(db, evil.ip6!), evilMac, "db resolved evil's address");
      const args = [evilMac, dbMac, evil.ip6!, db.ip6!, evil.ip6!, webMac];
      for (let i = 0; i < 3; i++) {
        await run("ip", "netns", "exec", evil.ns.name, "python3", SPOOF, "eth0", "ndfrag", ...args);
      }
      // The fragments are through (or dropped) once a datagram sent after them is: db still
      // answers evil (its entry for evil names evil's MAC, not web's).
      const answered = await new Deno.Command("ip", {
        args: ["netns", "exec", evil.ns.name, "ping", "-6", "-c1", "-W5", db.ip6!],
        stdout: "null",
        stderr: "null",
      }).output();
      const entry = await neighbourMac(db, evil.ip6!);
      assertEquals(
        entry,
        evilMac,
        `after the fragmented advertisement db's entry for evil names ${entry} (web's MAC is ${webMac})`,
      );
      assert(answered.success, "db answers evil's ping after the fragments");
      assert(
        ((await drops(node)).get(`${portOf(evil)}/nd`) ?? 0) >= 3,
        "the fragmented advertisements are counted as nd",
      );
    }),
});
