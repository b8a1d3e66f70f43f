// The simulated cluster (daemon/dev/cluster_sim.ts) in pool IPAM: nodes without podCIDRs, one
// IPPool, daemons in `ipam.mode: auto` (which picks the pool). On the stand-in, or in `test:real`
// on a real kube-apiserver. Needs root and nft.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { type SimCluster, type SimPod, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { IS_ROOT, pingOnce, run } from "../../daemon/dev/netns.ts";
import { cidrContains, parseCidr, parseIp } from "../../daemon/ipam/cidr.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { READYZ_PATH, STATS_PATH } from "../../lib/socket_api.ts";
import { cniEnv, netconf, runShimAt } from "../../daemon/dev/harness.ts";
import { waitReady } from "../../daemon/dev/cluster_sim.ts";
import { waitForDaemon } from "../../daemon/dev/daemon_process.ts";
import { EVENTS, IPBLOCKS, IPPOOLS, PODS } from "../../daemon/k8s/resources.ts";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import type { KubeObject } from "../../daemon/k8s/client.ts";
import type { IpBlockObject } from "../../daemon/ipam/ip_pools.ts";
import { eventually, ferryRoutes } from "./_cluster.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft };

const inBlocks = (ip: string, blocks: string[] = []) =>
  blocks.some((b) => cidrContains(parseCidr(b), parseIp(ip)));

/** STATUS through a node's shim (CNI 1.1). */
function shimStatus(node: { shim: string }) {
  return runShimAt(
    node.shim,
    { CNI_COMMAND: "STATUS", CNI_PATH: "/usr/lib/cni" },
    netconf("1.1.0"),
  );
}

async function stats(c: SimCluster, i: number): Promise<Record<string, unknown>> {
  const res = await unixRequest(
    c.nodes[i].socket,
    "GET",
    STATS_PATH,
    undefined,
    AbortSignal.timeout(5000),
  );
  return JSON.parse(res.body);
}

for (const routing of ["host-gw", "vxlan"] as const) {
  Deno.test({
    name:
      `pool IPAM, ${routing}: nodes without podCIDRs claim blocks, pods get addresses from their node's blocks, reach each other unmasqueraded and the outside masqueraded; a removed node's routes go and its blocks are reclaimed`,
    ...opts,
    fn: () =>
      withSimCluster({
        kubeconfig: REAL_KUBECONFIG,
        nodes: 3,
        pool: { blockSize: { ipv4: 27 } },
        config: { routing: { mode: routing }, gc: { reclaimIntervalSeconds: 1 } },
      }, async (c) => {
        // Every node claimed one block at start; every other node routes to it.
        await eventually(async () => (await c.blocks()).size === 3, "three nodes hold blocks");
        const blocks = await c.blocks();
        for (const block of [...blocks.values()].flat()) {
          assert(cidrContains(parseCidr(c.pool!.cidrs[0]), parseCidr(block).network), block);
          assertEquals(parseCidr(block).prefix, 27);
        }
        const via = (n: SimCluster["nodes"][number], block: string) =>
          routing === "host-gw" ? n.address : block.replace(/\/\d+$/, "");
        for (const [i, node] of c.nodes.entries()) {
          const expected = c.nodes.filter((n) => n !== node)
            .flatMap((n) => blocks.get(n.name)!.map((b) => `${b} via ${via(n, b)}`)).sort();
          await eventually(
            async () => (await ferryRoutes(c, i)).join() === expected.join(),
            `${node.name} routes ${expected.join(", ")}`,
          );
          const cluster = (await stats(c, i)).cluster as { ipamMode?: string };
          assertEquals(cluster.ipamMode, "pool", "ipam auto picked the pool");
        }
        const pods: SimPod[] = [];
        for (const [i, node] of c.nodes.entries()) pods.push(await c.addPod(node, `p${i}`));
        for (const pod of pods) {
          assert(
            inBlocks(pod.ip, blocks.get(pod.node.name)),
            `${pod.ip} in ${pod.node.name}'s blocks`,
          );
        }
        for (const a of pods) {
          for (const b of pods) {
            if (a !== b) assert(await pingOnce(b.ip, a.ns), `${a.name} → ${b.name} (${b.ip})`);
          }
        }
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
        assertEquals(await atPod.source, pods[0].ip, "pod to pod keeps the pod's address");
        atPod.close();
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
        assertEquals(
          await atOutside.source,
          c.nodes[2].address,
          "egress leaves with the node's address",
        );
        atOutside.close();
        // The block object records the pod.
        await eventually(async () => {
          const obj = await c.client.get<IpBlockObject>(
            IPBLOCKS,
            undefined,
            blocks.get(c.nodes[0].name)![0].replace(/[.:/]/g, "-"),
          );
          return obj.spec?.allocations?.some((a) =>
            a.ip === pods[0].ip && a.containerID === pods[0].containerId
          ) ?? false;
        }, "the block records the pod's allocation");
        await c.removePod(pods[2]);
        await c.deleteNode(c.nodes[2]);
        for (const i of [0, 1]) {
          await eventually(
            async () => (await ferryRoutes(c, i)).length === 1,
            `node ${i + 1} dropped its route to the removed node`,
          );
        }
        // Its blocks go back to the pool (the Lease holder reclaims them); the others' stay. On
        // the real API server the reclaim Lease outlives the simulated clusters: a daemon of the
        // test before, killed at its end, may still hold it for the default three intervals of
        // 10 s from its last renewal, before one of these daemons (1 s) can take it over.
        await eventually(
          async () => !(await c.blocks()).has(c.nodes[2].name),
          "the removed node's blocks were reclaimed",
          45_000,
        );
        assertEquals((await c.blocks()).size, 2);
        for (const pod of pods.slice(0, 2)) assertEquals((await c.removePod(pod)).code, 0);
      }),
  });
}

Deno.test({
  name:
    "pool IPAM: 200 ADDs at once over three nodes with small blocks, one daemon killed mid-burst: blocks claimed under load, no address twice, nothing leaked",
  ...opts,
  fn: () =>
    withSimCluster({
      kubeconfig: REAL_KUBECONFIG,
      nodes: 3,
      pool: { blockSize: { ipv4: 28 } },
      config: { ipam: { mode: "pool", blockReleaseSeconds: 1 } },
    }, async (c) => {
      // 13 addresses per block: ~67 pods per node need 6 blocks each, claimed mid-burst.
      const names = Array.from({ length: 200 }, (_, i) => `b${i}`);
      const burst = Promise.all(names.map((name, i) => c.addPod(c.nodes[i % 3], name, 60_000)));
      await new Promise((r) => setTimeout(r, 300));
      await c.killAndRestart(c.nodes[1]);
      const pods = await burst;
      const ips = pods.map((p) => p.ip);
      assertEquals(new Set(ips).size, 200, "no address twice");
      const blocks = await c.blocks();
      for (const pod of pods) {
        assert(
          inBlocks(pod.ip, blocks.get(pod.node.name)),
          `${pod.ip} in ${pod.node.name}'s blocks`,
        );
      }
      const all = [...blocks.values()].flat();
      assertEquals(new Set(all).size, all.length, "no block held twice");
      assert(await pingOnce(pods[1].ip, pods[0].ns));
      assert(await pingOnce(pods[5].ip, pods[3].ns));
      for (const pod of pods) assertEquals((await c.removePod(pod)).code, 0, pod.name);
      // Once empty, every node gives its blocks back but its first, and records no allocation.
      // A block leaves the API first, then the node takes its gateway off the bridge and removes
      // its directory: wait for both.
      const stateOf = (node: (typeof c.nodes)[number]) =>
        node.socket.replace("/run/ferry.sock", "/state");
      await eventually(
        async () => {
          const now = await c.blocks();
          if (!c.nodes.every((n) => now.get(n.name)?.length === 1)) return false;
          for (const node of c.nodes) {
            const dirs = await Array.fromAsync(Deno.readDir(`${stateOf(node)}/ipam/blocks`));
            if (dirs.filter((d) => d.isDirectory).length !== 1) return false;
          }
          return true;
        },
        "every node is down to one block, in the API and on its disk",
        30_000,
      );
      const { items } = await c.client.listAll<IpBlockObject>(IPBLOCKS, {});
      for (const b of items.filter((b) => b.spec?.pool === c.pool!.name)) {
        assertEquals(b.spec!.allocations ?? [], [], `${b.spec!.cidr} records nothing`);
      }
      for (const node of c.nodes) {
        const state = stateOf(node);
        const held = [];
        for await (const block of Deno.readDir(`${state}/ipam/blocks`)) {
          for await (const f of Deno.readDir(`${state}/ipam/blocks/${block.name}`)) {
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
    "ipam auto on a node with neither podCIDRs nor a pool: not ready, STATUS names both; a podCIDR then opens it in kubernetes mode",
  ...opts,
  fn: () =>
    withSimCluster({
      kubeconfig: REAL_KUBECONFIG,
      nodes: 2,
      withoutPodCIDRs: [2],
      config: {
        podWaitSeconds: 1,
        ipam: { mode: "auto", pools: [`absent-${crypto.randomUUID()}`] },
      },
    }, async (c) => {
      const node = c.nodes[1];
      const ready = () =>
        unixRequest(node.socket, "GET", READYZ_PATH, undefined, AbortSignal.timeout(1000))
          .then((r) => r.status, () => 0);
      await eventually(async () => (await ready()) === 503, "the daemon answers, not ready");
      const status = () => shimStatus(node);
      // Until its Node reaches the watch it says so; then it names what it lacks.
      await eventually(
        async () => String((await status()).json?.msg).includes("has no spec.podCIDRs"),
        "STATUS names the missing podCIDRs",
      );
      const out = await status();
      assertEquals([out.code, out.json?.code], [1, 50]);
      const msg = String(out.json?.msg);
      assert(msg.includes("has no spec.podCIDRs and no IPPool named absent-"), msg);
      await eventually(
        async () => (await Deno.readTextFile(node.log)).includes("no IPPool named absent-"),
        "the log says why",
      );
      await c.assignPodCIDR(node);
      await waitReady(node);
      assertEquals(((await stats(c, 1)).cluster as { ipamMode?: string }).ipamMode, "kubernetes");
      const pod = await c.addPod(node, "late");
      assert(cidrContains(parseCidr(node.podCIDR), parseIp(pod.ip)), pod.ip);
    }),
});

Deno.test({
  name:
    "pool IPAM, dual stack: every node claims an IPv4 and an IPv6 block, and pods talk over both",
  ...opts,
  fn: () =>
    withSimCluster({
      kubeconfig: REAL_KUBECONFIG,
      nodes: 2,
      dualStack: true,
      pool: {},
    }, async (c) => {
      await eventually(async () => {
        const b = await c.blocks();
        return c.nodes.every((n) => b.get(n.name)?.length === 2);
      }, "both nodes hold a block per family");
      const blocks = await c.blocks();
      const a = await c.addPod(c.nodes[0], "a6");
      const b = await c.addPod(c.nodes[1], "b6");
      for (const pod of [a, b]) {
        assert(inBlocks(pod.ip, blocks.get(pod.node.name)), pod.ip);
        assert(pod.ip6 && inBlocks(pod.ip6, blocks.get(pod.node.name)), pod.ip6);
      }
      const v6block = blocks.get(c.nodes[1].name)!.find((x) => x.includes(":"))!;
      assertEquals(parseCidr(v6block).prefix, 122);
      await eventually(() => pingOnce(b.ip6!, a.ns), `${a.ip6} → ${b.ip6}`);
      assert(await pingOnce(a.ip6!, b.ns), `${b.ip6} → ${a.ip6}`);
      assert(await pingOnce(b.ip, a.ns), "and IPv4");
    }),
});

Deno.test({
  name:
    "pool IPAM: restarted after its IPPool was deleted, a node still answers DEL and releases the pod's address (new pods get a clear refusal)",
  ...opts,
  fn: () =>
    withSimCluster({
      kubeconfig: REAL_KUBECONFIG,
      nodes: 1,
      pool: { blockSize: { ipv4: 28 } },
    }, async (c) => {
      const [node] = c.nodes;
      const pod = await c.addPod(node, "kept");
      await c.killDaemon(node);
      await c.client.delete(IPPOOLS, undefined, c.pool!.name);
      await c.startDaemon(node);
      await waitReady(node);
      // DEL answers 0 (not 11: the node's blocks open its network without the pool).
      const del = await c.removePod(pod);
      assertEquals(del.code, 0, del.stdout + del.stderr);
      await eventually(async () => {
        const blocks = await c.client.listAll<IpBlockObject>(IPBLOCKS, {});
        return blocks.items.every((b) => !(b.spec?.allocations ?? []).some((a) => a.ip === pod.ip));
      }, `${pod.ip} released in its block`);
      // No address of the deleted pool is handed out any more, and the refusal says why.
      const refused = await c.addPod(node, "fresh").then(() => "", (e: Error) => e.message);
      assert(refused.includes(`IPPool ${c.pool!.name} does not exist`), refused);
    }),
});

Deno.test({
  name:
    "pool IPAM: a second daemon with a node name already taken allocates nothing and touches no block; STATUS, readiness and ADD say why",
  ...opts,
  fn: () =>
    withSimCluster({
      kubeconfig: REAL_KUBECONFIG,
      nodes: 1,
      pool: { blockSize: { ipv4: 28 } },
    }, async (c) => {
      const [node] = c.nodes;
      const pod = await c.addPod(node, "owner");
      const blocksBefore = await c.client.listAll<IpBlockObject>(IPBLOCKS, {});
      const impostor = await c.startImpostor(node);
      await waitForDaemon(impostor.socket, impostor.log);
      const ready = await unixRequest(
        impostor.socket,
        "GET",
        READYZ_PATH,
        undefined,
        AbortSignal.timeout(5000),
      );
      assertEquals(ready.status, 503);
      const refused = await shimStatus(impostor);
      assertEquals(refused.code, 1, refused.stdout);
      assertEquals(refused.json?.code, 50, refused.stdout);
      assert(
        String(refused.json?.msg).includes(`holds node ${node.name}'s identity`),
        refused.stdout,
      );
      const ns = `fyx-${crypto.randomUUID().slice(0, 6)}`;
      await run("ip", "netns", "add", ns);
      try {
        const add = await runShimAt(
          impostor.shim,
          cniEnv("ADD", { path: `/var/run/netns/${ns}` }, "impostor1", "eth0", {
            name: pod.name,
            uid: pod.uid!,
          }),
          netconf(),
        );
        assertEquals(add.json?.code, 11, add.stdout);
      } finally {
        await run("ip", "netns", "del", ns);
      }
      // Its state holds no block, and no block object changed.
      const state = impostor.socket.replace("/run/ferry.sock", "/state");
      assertEquals(await Deno.stat(`${state}/ipam/blocks`).then(() => true, () => false), false);
      const blocksAfter = await c.client.listAll<IpBlockObject>(IPBLOCKS, {});
      assertEquals(
        blocksAfter.items.map((b) => `${b.metadata?.name}@${b.metadata?.resourceVersion}`).sort(),
        blocksBefore.items.map((b) => `${b.metadata?.name}@${b.metadata?.resourceVersion}`).sort(),
      );
      assert((await Deno.readTextFile(impostor.log)).includes("another Ferry daemon"));
      // The node's own daemon goes on.
      assertEquals((await c.removePod(pod)).code, 0);
    }),
});

Deno.test({
  name:
    "pool IPAM: an IPPool whose block size does not fit its CIDR keeps the node not ready, STATUS says why, and an Event on the pool says it",
  ...opts,
  fn: () =>
    withSimCluster({
      kubeconfig: REAL_KUBECONFIG,
      nodes: 1,
      withoutPodCIDRs: [1],
      pool: { blockSize: { ipv4: 8 } },
    }, async (c) => {
      const [node] = c.nodes;
      const why = `IPPool ${c.pool!.name}: block size /8 does not fit`;
      await eventually(async () => {
        const answer = await shimStatus(node);
        return answer.json?.code === 50 && String(answer.json?.msg).includes(why);
      }, "STATUS 50 naming the pool and why");
      const ready = await unixRequest(
        node.socket,
        "GET",
        READYZ_PATH,
        undefined,
        AbortSignal.timeout(5000),
      );
      assertEquals(ready.status, 503);
      await eventually(async () => {
        const { items } = await c.client.listAll<
          KubeObject & {
            reason?: string;
            message?: string;
            involvedObject?: { kind?: string; name?: string };
          }
        >(EVENTS, { namespace: "default" });
        return items.some((e) =>
          e.involvedObject?.kind === "IPPool" && e.involvedObject.name === c.pool!.name &&
          e.reason === "InvalidIPPool" && (e.message ?? "").includes("block size /8 does not fit")
        );
      }, "an InvalidIPPool Event on the pool");
    }),
});

/** Runs `deno task ipam-check` against the simulated cluster; its exit code and JSON report. */
async function ipamCheck(
  c: SimCluster,
): Promise<
  { code: number; report: { findings: { kind: string; ip?: string; message: string }[] } }
> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      "--frozen",
      new URL("../../daemon/tools/ipam_check.ts", import.meta.url).pathname,
      "--kubeconfig",
      c.kubeconfig,
      "--json",
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  try {
    return { code: out.code, report: JSON.parse(text) };
  } catch {
    throw new Error(`ipam-check printed no report: ${text}${new TextDecoder().decode(out.stderr)}`);
  }
}

Deno.test({
  name:
    "ipam check: clean on a healthy pool cluster (exit 0); an address on two pods and a leaked allocation are found (exit 1)",
  ...opts,
  fn: () =>
    withSimCluster({
      kubeconfig: REAL_KUBECONFIG,
      nodes: 2,
      pool: { blockSize: { ipv4: 27 } },
    }, async (c) => {
      const pods = [
        await c.addPod(c.nodes[0], "chk-a"),
        await c.addPod(c.nodes[1], "chk-b"),
      ];
      // network-status follows each ADD's answer.
      await eventually(async () => {
        const { items } = await c.client.listAll<Pod>(PODS, { namespace: "default" });
        return pods.every((p) =>
          items.find((i) => i.metadata?.name === p.name)?.metadata?.annotations?.[
            "k8s.v1.cni.cncf.io/network-status"
          ]
        );
      }, "network-status on both pods");
      await eventually(async () => {
        const { items } = await c.client.listAll<IpBlockObject>(IPBLOCKS, {});
        return items.filter((b) => b.spec?.pool === c.pool!.name)
          .reduce((n, b) => n + (b.spec?.allocations?.length ?? 0), 0) === 2;
      }, "both allocations written to their blocks");
      const clean = await ipamCheck(c);
      // A shared real server may hold other runs' objects: only this cluster's findings count.
      const ours = (f: { ip?: string; message: string }) =>
        c.nodes.some((n) => f.message.includes(n.name)) || pods.some((p) => f.ip === p.ip);
      assertEquals(clean.report.findings.filter(ours), []);
      if (!REAL_KUBECONFIG) assertEquals(clean.code, 0);
      // A pod claiming a's address on the other node (as a second allocator would give it).
      await c.client.create<Pod>(PODS, {
        metadata: {
          name: `chk-twin-${pods[0].name}`,
          namespace: "default",
          annotations: {
            "k8s.v1.cni.cncf.io/network-status": JSON.stringify([
              { name: "ferry", interface: "eth0", ips: [pods[0].ip], default: true },
            ]),
          },
        },
        spec: {
          nodeName: c.nodes[1].name,
          containers: [{ name: "c", image: "registry.invalid/pause:3.9" }],
        },
      });
      // An allocation whose pod is gone.
      const { items } = await c.client.listAll<IpBlockObject>(IPBLOCKS, {});
      const mine = items.find((b) => b.spec?.node === c.nodes[0].name)!;
      const leaked = pods[0].ip.replace(/\d+$/, (d) => String(Number(d) + 7));
      await c.client.update(IPBLOCKS, {
        ...mine,
        spec: {
          ...mine.spec!,
          allocations: [...mine.spec!.allocations!, {
            ip: leaked,
            podUID: "gone-uid",
            containerID: "gone",
            ifname: "eth0",
            namespace: "default",
            name: "gone",
          }],
        },
      } as IpBlockObject);
      try {
        const dirty = await ipamCheck(c);
        assertEquals(dirty.code, 1);
        const found = dirty.report.findings.map((f) => `${f.kind} ${f.ip}`);
        assert(found.includes(`duplicate ${pods[0].ip}`), found.join("\n"));
        assert(found.includes(`leak ${leaked}`), found.join("\n"));
      } finally {
        await c.client.delete(PODS, "default", `chk-twin-${pods[0].name}`, {
          gracePeriodSeconds: 0,
        })
          .catch(() => {});
      }
    }),
});
