// The IP reconcile loop and sweep (daemon/gc/) on the simulated cluster (daemon/dev/cluster_sim.ts),
// on the stand-in or, in `test:real`, on a real kube-apiserver: pods whose DEL never comes lose
// their addresses, interfaces and records, with an Event each; live pods keep theirs; a daemon that
// was down while pods were deleted releases them after its restart. Needs root and nft.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import type { Event } from "kubernetes-types/core/v1.d.ts";
import { type SimCluster, type SimNode, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { IS_ROOT, run } from "../../daemon/dev/netns.ts";
import { EVENTS } from "../../daemon/k8s/resources.ts";
import { eventually } from "./_cluster.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft };
const GC = { gc: { graceSeconds: 1, intervalSeconds: 1 } };

/** What a node holds: attachment records, allocated addresses, host links on its bridge. */
async function held(node: SimNode): Promise<{ records: string[]; ips: string[]; links: string[] }> {
  const state = node.socket.replace("/run/ferry.sock", "/state");
  const records = (await Array.fromAsync(Deno.readDir(`${state}/attachments`)))
    .map((e) => e.name).sort();
  const ips: string[] = [];
  for await (const pool of Deno.readDir(`${state}/ipam`)) {
    for await (const f of Deno.readDir(`${state}/ipam/${pool.name}`)) {
      if (!f.name.startsWith(".") && f.isFile) ips.push(f.name);
    }
  }
  const links = (JSON.parse(
    await run("ip", "-n", node.ns.name, "-j", "link", "show", "master", "ferry0"),
  ) as { ifname: string }[]).map((l) => l.ifname);
  return { records, ips: ips.sort(), links };
}

async function eventsFor(c: SimCluster, name: string): Promise<string[]> {
  const { items } = await c.client.listAll<Event>(EVENTS, { namespace: "default" });
  return items.filter((e) => e.involvedObject?.name === name).map((e) => e.reason ?? "");
}

Deno.test({
  name:
    "pods deleted without DEL on three nodes: addresses, interfaces and records released with an Event each; a live pod keeps its own",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 3, config: GC }, async (c) => {
      const pods = [];
      for (const [i, node] of c.nodes.entries()) {
        pods.push(await c.addPod(node, `g${i}a`), await c.addPod(node, `g${i}b`));
      }
      const live = pods[0];
      const gone = pods.slice(1);
      for (const pod of gone) await c.deletePodObject(pod);
      for (const node of c.nodes) {
        await eventually(async () => {
          const h = await held(node);
          return h.records.length === (node === live.node ? 1 : 0);
        }, `${node.name} released the deleted pods`);
        const h = await held(node);
        if (node === live.node) {
          assertEquals(h.ips, [live.ip], "the live pod keeps its address");
          assertEquals(h.links.length, 1, "and its host link");
        } else {
          assertEquals(h, { records: [], ips: [], links: [] });
        }
      }
      for (const pod of gone) {
        await eventually(
          async () => (await eventsFor(c, pod.name)).includes("IPAddressGarbageCollected"),
          `an Event on ${pod.name}`,
        );
      }
      // A host link on the bridge that no attachment names (an ADD killed between plugging and
      // recording) goes once the sweep has seen it orphaned for the grace period.
      const ns = live.node.ns.name;
      await run("ip", "-n", ns, "link", "add", "fyorphan0", "type", "veth", "peer", "name", "fyo1");
      await run("ip", "-n", ns, "link", "set", "fyorphan0", "master", "ferry0");
      await eventually(
        async () => !(await held(live.node)).links.includes("fyorphan0"),
        "the orphaned host link was removed",
      );
      // Several sweeps later the live pod is untouched and still works.
      await new Promise((r) => setTimeout(r, 2500));
      const addr = await run("ip", "-n", live.ns.name, "-br", "addr", "show", "eth0");
      assert(addr.includes(live.ip), addr);
      assertEquals((await held(live.node)).ips, [live.ip]);
      assertEquals(await eventsFor(c, live.name), []);
      assertEquals((await c.removePod(live)).code, 0);
    }),
});

Deno.test({
  name:
    "a daemon killed during a 200-pod churn while pods are deleted and a sandbox is torn down: after its restart nothing leaked and no address is held twice",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 3, config: GC }, async (c) => {
      const first = await Promise.all(
        Array.from({ length: 100 }, (_, i) => c.addPod(c.nodes[i % 3], `k${i}`, 60_000)),
      );
      // Node 2's daemon dies; meanwhile half its pods (and others) are deleted without DEL, and
      // more pods come everywhere (those on node 2 are retried until it is back).
      await c.killDaemon(c.nodes[1]);
      const deleted = first.filter((_, i) => i % 2 === 0);
      for (const pod of deleted) await c.deletePodObject(pod);
      // A sandbox torn down while its daemon is away: the DEL succeeds (the pod must not hang),
      // the runtime removes its namespace; the pod object stays (a new sandbox would follow).
      const torn = first.find((p, i) => i % 2 === 1 && p.node === c.nodes[1])!;
      const del = await c.removePod(torn);
      assertEquals(del.code, 0, del.stdout + del.stderr);
      await run("ip", "netns", "del", torn.ns.name);
      const more = Promise.all(
        Array.from({ length: 100 }, (_, i) => c.addPod(c.nodes[i % 3], `m${i}`, 60_000)),
      );
      await new Promise((r) => setTimeout(r, 500));
      await c.startDaemon(c.nodes[1]);
      const second = await more;
      const alive = [...first.filter((p, i) => i % 2 === 1 && p !== torn), ...second];
      const ips = alive.map((p) => p.ip);
      assertEquals(new Set(ips).size, ips.length, "no address twice");
      for (const node of c.nodes) {
        const mine = alive.filter((p) => p.node === node).map((p) => p.ip).sort();
        await eventually(
          async () => (await held(node)).ips.join() === mine.join(),
          `${node.name} holds exactly its live pods' addresses`,
        );
        const h = await held(node);
        assertEquals(h.records.length, mine.length);
        assertEquals(h.links.length, mine.length);
      }
      for (const pod of alive) assertEquals((await c.removePod(pod)).code, 0);
    }),
});
