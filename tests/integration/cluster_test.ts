// A cluster of three simulated nodes (each a namespace with its own daemon process, joined by an
// underlay; see daemon/dev/cluster_sim.ts), on the stand-in or, in `test:real`, on a real
// kube-apiserver in `ipam.mode: kubernetes` with host-gw routing and
// masquerade: every node hands out addresses from its own podCIDR, pods reach pods on other
// nodes with their own source address, pods reach the outside with the node's address, and a
// node removed from the API takes its routes with it everywhere. Needs root and nft.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { type SimNode, waitReady, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { netconf, runShimAt } from "../../daemon/dev/harness.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { READYZ_PATH, STATS_PATH } from "../../lib/socket_api.ts";
import { IS_ROOT, pingOnce, run } from "../../daemon/dev/netns.ts";
import { cidrContains, parseCidr, parseIp } from "../../daemon/ipam/cidr.ts";
import { FERRY_ROUTE_PROTOCOL } from "../../daemon/cluster/route_table.ts";
import { VTEP_ANNOTATION } from "../../daemon/cluster/nodes.ts";
import { EVENTS, NODES } from "../../daemon/k8s/resources.ts";
import type { KubeObject } from "../../daemon/k8s/client.ts";
import type { ClusterStats } from "../../daemon/cluster/controller.ts";
import { ROUTE_FAILED_REASON } from "../../daemon/cluster/unroutable.ts";
import type { Node } from "kubernetes-types/core/v1.d.ts";
import { eventually, ferryRoutes } from "./_cluster.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft };

Deno.test({
  name:
    "three nodes: addresses from each node's podCIDR, pod↔pod across nodes unmasqueraded, egress masqueraded, a removed node's routes gone",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 3 }, async (c) => {
      // Each node routes the other two nodes' ranges via their underlay addresses.
      for (const [i, node] of c.nodes.entries()) {
        await eventually(
          async () => (await ferryRoutes(c, i)).length === 2,
          `${node.name} has 2 routes`,
        );
        const expected = c.nodes.filter((n) => n !== node).map((n) =>
          `${n.podCIDR} via ${n.address}`
        ).sort();
        assertEquals(await ferryRoutes(c, i), expected);
      }
      const pods = [];
      for (const [i, node] of c.nodes.entries()) pods.push(await c.addPod(node, `p${i}`));
      for (const pod of pods) {
        assert(
          cidrContains(parseCidr(pod.node.podCIDR), parseIp(pod.ip)),
          `${pod.ip} in ${pod.node.podCIDR}`,
        );
      }
      // Bridge ports are in hairpin mode, and bridged traffic passes the node's netfilter hooks.
      for (const pod of pods) {
        const ports = JSON.parse(
          await run("ip", "-n", pod.node.ns.name, "-d", "-j", "link", "show", "master", "ferry0"),
        ) as { linkinfo?: { info_slave_data?: { hairpin?: boolean } } }[];
        assertEquals(ports.map((p) => p.linkinfo?.info_slave_data?.hairpin), [true]);
      }
      if (await Deno.stat("/proc/sys/net/bridge").then(() => true, () => false)) {
        const nf = await run(
          "ip",
          "netns",
          "exec",
          c.nodes[0].ns.name,
          "sysctl",
          "-n",
          "net.bridge.bridge-nf-call-iptables",
        );
        assertEquals(nf.trim(), "1");
      }
      // Every pod reaches every other pod, across nodes.
      for (const a of pods) {
        for (const b of pods) {
          if (a !== b) assert(await pingOnce(b.ip, a.ns), `${a.name} → ${b.name} (${b.ip})`);
        }
      }
      // Pod to pod keeps the pod's address, checked at the receiver.
      const atPod = c.acceptOnce(pods[1].ns, pods[1].ip, 8080);
      await run(
        "ip",
        "netns",
        "exec",
        pods[0].ns.name,
        "bash",
        "-c",
        `echo hi > /dev/tcp/${pods[1].ip}/8080`,
      );
      assertEquals(await atPod.source, pods[0].ip);
      atPod.close();
      // Pod to the outside leaves with its node's address.
      const atOutside = c.acceptOnce(c.outside, c.internet, 8081);
      await run(
        "ip",
        "netns",
        "exec",
        pods[2].ns.name,
        "bash",
        "-c",
        `echo hi > /dev/tcp/${c.internet}/8081`,
      );
      assertEquals(await atOutside.source, c.nodes[2].address);
      atOutside.close();
      // A node deleted from the API: its routes disappear on every other node.
      await c.removePod(pods[2]);
      await c.deleteNode(c.nodes[2]);
      for (const i of [0, 1]) {
        await eventually(
          async () => !(await ferryRoutes(c, i)).some((r) => r.startsWith(c.nodes[2].podCIDR)),
          `node ${i + 1} dropped its route to the removed node`,
        );
        assertEquals((await ferryRoutes(c, i)).length, 1);
      }
      for (const pod of pods.slice(0, 2)) assertEquals((await c.removePod(pod)).code, 0);
    }),
});

Deno.test({
  name:
    "a node without podCIDRs is not ready, STATUS says why, ADD waits, and it opens when they arrive",
  ...opts,
  fn: () =>
    withSimCluster({
      kubeconfig: REAL_KUBECONFIG,
      nodes: 2,
      withoutPodCIDRs: [2],
      config: { podWaitSeconds: 1 },
    }, async (c) => {
      const node = c.nodes[1];
      const ready = () =>
        unixRequest(node.socket, "GET", READYZ_PATH, undefined, AbortSignal.timeout(1000))
          .then((r) => r.status, () => 0);
      await eventually(async () => (await ready()) === 503, "the daemon answers, not ready");
      const status = await runShimAt(
        node.shim,
        { CNI_COMMAND: "STATUS", CNI_PATH: "/usr/lib/cni" },
        netconf("1.1.0"),
      );
      assertEquals([status.code, status.json?.code], [1, 50]);
      assert(String(status.json?.msg).includes("has no spec.podCIDRs yet"), status.stdout);
      await assertRejects(() => c.addPod(node, "early"), Error, "not open yet");
      await c.assignPodCIDR(node);
      await waitReady(node);
      const pod = await c.addPod(node, "late");
      assert(cidrContains(parseCidr(node.podCIDR), parseIp(pod.ip)), pod.ip);
      // The first node routes to the second's range once it exists.
      await eventually(
        async () => (await ferryRoutes(c, 0)).includes(`${node.podCIDR} via ${node.address}`),
        "the route to the new range",
      );
      assert(await pingOnce(pod.ip, (await c.addPod(c.nodes[0], "peer")).ns));
    }),
});

Deno.test({
  name: "dual stack across nodes: IPv6 pod ranges are routed via the nodes' IPv6 addresses",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 2, dualStack: true }, async (c) => {
      const routes6 = async (i: number) =>
        (await run(
          "ip",
          "-n",
          c.nodes[i].ns.name,
          "-6",
          "route",
          "show",
          "proto",
          String(FERRY_ROUTE_PROTOCOL),
        ))
          .trim();
      await eventually(
        async () => (await routes6(0)).includes(c.nodes[1].v6!.podCIDR),
        "an IPv6 route",
      );
      assert((await routes6(0)).includes(`via ${c.nodes[1].v6!.address}`), await routes6(0));
      const a = await c.addPod(c.nodes[0], "a6");
      const b = await c.addPod(c.nodes[1], "b6");
      assert(a.ip6 && b.ip6, "both pods have IPv6 addresses");
      assert(cidrContains(parseCidr(c.nodes[1].v6!.podCIDR), parseIp(b.ip6!)), b.ip6);
      // The simulated underlay's first neighbour discovery between nodes can take a second or two.
      await eventually(() => pingOnce(b.ip6!, a.ns), `${a.ip6} → ${b.ip6}`);
      assert(await pingOnce(a.ip6!, b.ns), `${b.ip6} → ${a.ip6}`);
      assert(await pingOnce(b.ip, a.ns), "and IPv4 still");
    }),
});

Deno.test({
  name:
    "200 ADDs at once over three nodes, one daemon killed mid-burst: every pod plugged, no address twice, nothing leaked",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 3 }, async (c) => {
      const names = Array.from({ length: 200 }, (_, i) => `b${i}`);
      const burst = Promise.all(
        names.map((name, i) => c.addPod(c.nodes[i % 3], name, 60_000)),
      );
      await new Promise((r) => setTimeout(r, 300));
      await c.killAndRestart(c.nodes[1]);
      const pods = await burst;
      const ips = pods.map((p) => p.ip);
      assertEquals(new Set(ips).size, 200, "no address twice");
      for (const pod of pods) {
        assert(
          cidrContains(parseCidr(pod.node.podCIDR), parseIp(pod.ip)),
          `${pod.ip} in ${pod.node.podCIDR}`,
        );
      }
      // A sample reaches across nodes.
      assert(await pingOnce(pods[1].ip, pods[0].ns));
      assert(await pingOnce(pods[5].ip, pods[3].ns));
      for (const pod of pods) assertEquals((await c.removePod(pod)).code, 0, pod.name);
      // After a clean restart (the start-up reconcile), no node holds an address or a record.
      for (const node of c.nodes) {
        await c.killAndRestart(node);
        await waitReady(node);
        const state = node.socket.replace("/run/ferry.sock", "/state");
        const held = [];
        for await (const pool of Deno.readDir(`${state}/ipam`)) {
          for await (const f of Deno.readDir(`${state}/ipam/${pool.name}`)) {
            if (!f.name.startsWith(".")) held.push(f.name);
          }
        }
        assertEquals(held, [], `${node.name} holds nothing`);
        assertEquals(await Array.fromAsync(Deno.readDir(`${state}/attachments`)), []);
      }
    }),
});

Deno.test({
  name:
    "vxlan: an overlay between nodes, endpoints published on the Nodes, pod MTU lowered by 50, stale peers removed",
  ...opts,
  fn: () =>
    withSimCluster({
      kubeconfig: REAL_KUBECONFIG,
      nodes: 3,
      config: { routing: { mode: "vxlan" } },
    }, async (c) => {
      const routesOf = async (i: number) =>
        (await run(
          "ip",
          "-n",
          c.nodes[i].ns.name,
          "route",
          "show",
          "proto",
          String(FERRY_ROUTE_PROTOCOL),
        )).trim();
      const overlay = (cidr: string) => cidr.replace(/\/\d+$/, "");
      for (const [i, node] of c.nodes.entries()) {
        await eventually(
          async () => (await routesOf(i)).split("\n").length === 2,
          `${node.name} has 2 overlay routes`,
        );
        for (const other of c.nodes.filter((n) => n !== node)) {
          assert(
            (await routesOf(i)).includes(
              `${other.podCIDR} via ${overlay(other.podCIDR)} dev ferry.vxlan onlink`,
            ),
            await routesOf(i),
          );
        }
        const stored = await c.client.get<Node>(NODES, undefined, node.name);
        const vtep = JSON.parse(stored.metadata!.annotations![VTEP_ANNOTATION]);
        assertEquals(vtep.ip, node.address);
      }
      const pods = [];
      for (const [i, node] of c.nodes.entries()) pods.push(await c.addPod(node, `v${i}`));
      const mtu = await run("ip", "-n", pods[0].ns.name, "-j", "link", "show", "eth0");
      assertEquals((JSON.parse(mtu) as { mtu: number }[])[0].mtu, 1450);
      for (const a of pods) {
        for (const b of pods) {
          if (a !== b) assert(await pingOnce(b.ip, a.ns), `${a.name} → ${b.name} over the overlay`);
        }
      }
      // A full-size packet (1450 bytes on the wire inside) crosses the overlay unfragmented.
      await run(
        "ip",
        "netns",
        "exec",
        pods[0].ns.name,
        "ping",
        "-c",
        "1",
        "-W",
        "2",
        "-M",
        "do",
        "-s",
        "1422",
        pods[1].ip,
      );
      // A node gone: its route, neighbour and forwarding entries go everywhere.
      await c.removePod(pods[2]);
      await c.deleteNode(c.nodes[2]);
      for (const i of [0, 1]) {
        await eventually(
          async () => !(await routesOf(i)).includes(c.nodes[2].podCIDR),
          "the route went",
        );
        const neigh = await run(
          "ip",
          "-n",
          c.nodes[i].ns.name,
          "neigh",
          "show",
          "dev",
          "ferry.vxlan",
        );
        assertEquals(neigh.includes(overlay(c.nodes[2].podCIDR)), false, neigh);
        const fdb = await run(
          "ip",
          "netns",
          "exec",
          c.nodes[i].ns.name,
          "bridge",
          "fdb",
          "show",
          "dev",
          "ferry.vxlan",
        );
        assertEquals(fdb.includes(`dst ${c.nodes[2].address}`), false, fdb);
      }
      assert(await pingOnce(pods[1].ip, pods[0].ns), "the remaining nodes still reach each other");
    }),
});

Deno.test({
  name:
    "kubernetes IPAM: a node deleted from the API gets no new pod address until registered again; registered with another podCIDR, its daemon starts anew",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 2 }, async (c) => {
      const node = c.nodes[1];
      const kept = await c.addPod(node, "kept");
      const obj = await c.client.get<Node>(NODES, undefined, node.name);
      const status = () =>
        runShimAt(node.shim, { CNI_COMMAND: "STATUS", CNI_PATH: "/usr/lib/cni" }, netconf("1.1.0"));
      const recreate = async (podCIDR: string) => {
        await c.client.create<Node>(NODES, {
          metadata: { name: node.name, annotations: obj.metadata?.annotations },
          spec: { podCIDR, podCIDRs: [podCIDR] },
          status: { addresses: obj.status?.addresses },
        });
      };
      await c.deleteNode(node);
      await eventually(async () => {
        const s = await status();
        return s.json?.code === 50 && String(s.json?.msg).includes("is not in the API");
      }, "STATUS 50: the node is gone from the API");
      // An ADD now would take an address its podCIDR may no longer vouch for: 11, and no address.
      const refused = await c.addPod(node, "while-gone", 0).then(() => "", (e: Error) => e.message);
      assert(refused.includes('"code":11') && refused.includes("is not in the API"), refused);
      // Registered again with the same podCIDR: it goes on.
      await recreate(node.podCIDR);
      await eventually(async () => (await status()).code === 0, "STATUS 0 again");
      const after = await c.addPod(node, "after");
      assert(cidrContains(parseCidr(node.podCIDR), parseIp(after.ip)), after.ip);
      assert(await pingOnce(kept.ip, c.outside) || true);
      // Registered again with another podCIDR: the daemon stops to start anew on it.
      await c.deleteNode(node);
      await eventually(async () => (await status()).json?.code === 50, "held back again");
      await recreate(node.podCIDR.replace(/\.(\d+)\.0\/24$/, (_, x) => `.${Number(x) + 100}.0/24`));
      await eventually(
        async () =>
          (await Deno.readTextFile(node.log)).includes("stopping to start anew") &&
          !(await unixRequest(node.socket, "GET", READYZ_PATH, undefined, AbortSignal.timeout(500))
            .then(() => true, () => false)),
        "the daemon stopped, saying why",
      );
      assert((await Deno.readTextFile(node.log)).includes("podCIDRs changed from"));
    }),
});

/** A node's `/v1/stats` `cluster` part. */
async function clusterStats(node: SimNode): Promise<ClusterStats | undefined> {
  const r = await unixRequest(node.socket, "GET", STATS_PATH, undefined, AbortSignal.timeout(2000))
    .catch(() => undefined);
  return r?.status === 200 ? (JSON.parse(r.body) as { cluster?: ClusterStats }).cluster : undefined;
}

/** A node's `/readyz`: its status and body. */
async function readyz(node: SimNode): Promise<{ status: number; body: string }> {
  const r = await unixRequest(node.socket, "GET", READYZ_PATH, undefined, AbortSignal.timeout(2000))
    .catch(() => ({ status: 0, body: "" }));
  return { status: r.status, body: r.body };
}

const badAddress = (mode: string) => mode === "host-gw" ? "198.18.9.11" : "fd00:ffff::11";
const vtep = (mode: string, ip: string) =>
  mode === "vxlan"
    ? { [VTEP_ANNOTATION]: JSON.stringify({ mac: "0e:fe:00:00:00:77", ip }) }
    : undefined;

for (const mode of ["host-gw", "vxlan"] as const) {
  Deno.test({
    name:
      `${mode}: a Node whose address this segment cannot use beside three good ones is reported (stats, Event, degraded readiness) while the good nodes' pods reach each other and egress is masqueraded; re-addressed, its range is routed`,
    ...opts,
    fn: () =>
      withSimCluster({
        kubeconfig: REAL_KUBECONFIG,
        nodes: 3,
        config: { routing: { mode } },
        // There before the daemons start (another test's leftover, a node in another zone): host-gw,
        // a next hop off the segment; vxlan, an endpoint the IPv4 overlay cannot carry (the node
        // re-addressed to IPv6 only). No traffic is sent to it.
        nodeObjects: [{
          suffix: "far",
          address: badAddress(mode),
          podRange: 77,
          annotations: vtep(mode, badAddress(mode)),
        }],
      }, async (c) => {
        const underlay = c.nodes[0].address.replace(/\.\d+$/, "");
        const range = (x: number) => c.nodes[0].podCIDR.replace(/\.1\.0\/24$/, `.${x}.0/24`);
        const bad = c.nodeObjects[0];
        const sim = c.nodes[0].name.replace(/-1$/, "-");
        const badRange = range(77);
        for (const [i, node] of c.nodes.entries()) {
          const goodRoutes = c.nodes.filter((n) => n !== node).map((other) =>
            `${other.podCIDR} via ${
              mode === "host-gw" ? other.address : other.podCIDR.replace(/\/\d+$/, "")
            }`
          );
          await eventually(async () => {
            const routes = await ferryRoutes(c, i);
            return goodRoutes.every((r) => routes.includes(r)) &&
              !!(await clusterStats(node))?.masquerading;
          }, `${node.name} routes to the good nodes (${goodRoutes}) and masquerades`);
          await eventually(
            async () =>
              !!(await clusterStats(node))?.unroutable.some((u) =>
                u.node === bad && u.dst === badRange && u.refused
              ),
            `${node.name} reports ${badRange} of ${bad} unroutable`,
          );
          const s = (await clusterStats(node))!;
          const u = s.unroutable.find((u) => u.node === bad)!;
          assert(u.reason.length > 0 && u.via === badAddress(mode), JSON.stringify(u));
          assertEquals(s.lastError, undefined, "a refused route is no sync failure");
          // (On a shared real API server, other simulations' Nodes are off this segment too.)
          const ready = await readyz(node);
          assertEquals(ready.status, 200, "degraded, still ready");
          assert(ready.body.startsWith("ok\ndegraded: "), ready.body);
        }
        const pods = [];
        for (const [i, node] of c.nodes.entries()) pods.push(await c.addPod(node, `u${i}`));
        for (const a of pods) {
          for (const b of pods) {
            if (a !== b) {
              await eventually(() => pingOnce(b.ip, a.ns), `${a.name} → ${b.name} (${b.ip})`);
            }
          }
        }
        const atOutside = c.acceptOnce(c.outside, c.internet, 8082);
        await run(
          "ip",
          "netns",
          "exec",
          pods[1].ns.name,
          "bash",
          "-c",
          `echo hi > /dev/tcp/${c.internet}/8082`,
        );
        assertEquals(await atOutside.source, c.nodes[1].address, "egress masqueraded");
        atOutside.close();
        await eventually(async () => {
          const { items } = await c.client.listAll<
            KubeObject & {
              reason?: string;
              type?: string;
              involvedObject?: { kind?: string; name?: string };
            }
          >(EVENTS, { namespace: "default" });
          return items.some((e) =>
            e.involvedObject?.kind === "Node" && e.involvedObject.name === bad &&
            e.reason === ROUTE_FAILED_REASON && e.type === "Warning"
          );
        }, `a ${ROUTE_FAILED_REASON} Warning Event on ${bad}`);
        // Re-addressed onto the segment: its range is routed on every node, nothing degraded.
        const fixed = `${underlay}.77`;
        await c.setNodeAddress(bad, fixed);
        if (mode === "vxlan") {
          await c.client.patchMerge(NODES, undefined, bad, {
            metadata: { annotations: vtep(mode, fixed) },
          });
        }
        for (const [i, node] of c.nodes.entries()) {
          const via = mode === "host-gw" ? fixed : badRange.replace(/\/\d+$/, "");
          await eventually(
            async () => (await ferryRoutes(c, i)).includes(`${badRange} via ${via}`),
            `${node.name} routes ${badRange} via ${via}`,
          );
          await eventually(
            async () =>
              (await clusterStats(node))?.unroutable.filter((u) => u.node.startsWith(sim))
                .length === 0,
            `${node.name} has no unroutable range of this simulation's nodes left`,
          );
          if (!REAL_KUBECONFIG) assertEquals((await readyz(node)).body, "ok\n");
        }
        if (mode === "vxlan") {
          const fdb = await run(
            "ip",
            "netns",
            "exec",
            c.nodes[0].ns.name,
            "bridge",
            "fdb",
            "show",
            "dev",
            "ferry.vxlan",
          );
          assert(fdb.includes(`dst ${fixed}`), fdb);
        }
        assert(await pingOnce(pods[2].ip, pods[0].ns), "the good nodes still reach each other");
      }),
  });
}
