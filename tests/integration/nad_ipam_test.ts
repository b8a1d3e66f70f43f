// Whereabouts IPAM configs served natively (`multiNetwork.whereaboutsIpam: native`) on the
// simulated cluster, on the stand-in or, in `test:real`, on a real kube-apiserver: a macvlan NAD
// on the nodes' shared underlay, its range shared by three nodes without an address twice, pods
// reaching each other on it, DEL and the reconcile loop giving the addresses back. Needs root.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { type SimCluster, type SimPod, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { installNetworkBlockCrd } from "../../daemon/dev/crds.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { IS_ROOT, pingOnce, run } from "../../daemon/dev/netns.ts";
import { EVENTS, NETWORKBLOCKS, NETWORKOWNERS } from "../../daemon/k8s/resources.ts";
import type { Event } from "kubernetes-types/core/v1.d.ts";
import type { NetworkBlockObject } from "../../daemon/ipam/nad_blocks.ts";
import type { NetworkOwnerObject } from "../../daemon/ipam/nad_space_owners.ts";
import { eventually } from "./_cluster.ts";
import { withNads } from "./_nads.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { STATS_PATH } from "../../lib/socket_api.ts";
import { readClusterState } from "../../daemon/tools/ipam_check.ts";
import { networkFindings } from "../../daemon/ipam/nad_integrity.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft };

/** The native serving, and a reconcile loop quick enough for a test. */
const CONFIG = {
  multiNetwork: { whereaboutsIpam: "native" },
  gc: { graceSeconds: 1, intervalSeconds: 2 },
};

async function net1(pod: SimPod): Promise<string[]> {
  const out = await run("ip", "-n", pod.ns.name, "-j", "-4", "addr", "show", "dev", "net1")
    .catch(() => "[]");
  const [link] = JSON.parse(out) as { addr_info: { local: string }[] }[];
  return link?.addr_info.map((a) => a.local) ?? [];
}

/** A macvlan NAD on the underlay with whereabouts IPAM `ipam`, removed afterwards. */
async function withNad<T>(
  c: SimCluster,
  ipam: Record<string, unknown>,
  fn: (name: string) => Promise<T>,
): Promise<T> {
  return await withNads(c, async ({ t, create }) => {
    await installNetworkBlockCrd(c.client);
    const name = `wa-${t}`;
    await create(name, {
      cniVersion: "0.3.1",
      type: "macvlan",
      master: "eth0",
      mode: "bridge",
      ipam: { type: "whereabouts", ...ipam },
    });
    return await fn(name);
  });
}

/** The allocations the API records in the blocks of `network_name` `space`. */
async function recorded(c: SimCluster, space: string): Promise<string[]> {
  const { items } = await c.client.listAll<NetworkBlockObject>(NETWORKBLOCKS, {});
  return items.filter((b) => b.spec?.network.startsWith(`${space}/`))
    .flatMap((b) => (b.spec!.allocations ?? []).map((a) => `${a.ip} ${a.name}`)).sort();
}

/** The blocks of `network_name` `space` in the API now. */
async function blocksOf(c: SimCluster, space: string): Promise<NetworkBlockObject[]> {
  const { items } = await c.client.listAll<NetworkBlockObject>(NETWORKBLOCKS, {});
  return items.filter((b) => b.spec?.network.startsWith(`${space}/`));
}

/** Deletes every block of `space`, and the owners of its ranges (what the test made). */
async function dropBlocks(c: SimCluster, space: string): Promise<void> {
  for (const b of await blocksOf(c, space)) {
    await c.client.delete(NETWORKBLOCKS, undefined, b.metadata!.name!).catch(() => {});
  }
  const { items } = await c.client.listAll<NetworkOwnerObject>(NETWORKOWNERS, {});
  for (const o of items.filter((o) => o.spec?.network.startsWith(`${space}/`))) {
    await c.client.delete(NETWORKOWNERS, undefined, o.metadata!.name!).catch(() => {});
  }
}

Deno.test({
  name:
    "a whereabouts macvlan NAD served natively across three nodes: 60 pods, 60 distinct addresses, pods on different nodes reach each other on it, DEL gives every address back",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 3, config: CONFIG }, async (c) => {
      const space = `sim-${crypto.randomUUID().slice(0, 6)}`;
      const third = 100 + Math.floor(Math.random() * 100);
      try {
        await withNad(
          c,
          { range: `192.168.${third}.0/24`, network_name: space },
          async (nad) => {
            const pods = await Promise.all(
              Array.from({ length: 60 }, (_, i) =>
                c.addPod(c.nodes[i % 3], `wa${i}`, 60_000, {
                  annotations: { "k8s.v1.cni.cncf.io/networks": nad },
                })),
            );
            const ips: string[] = [];
            for (const pod of pods) {
              const got = await net1(pod);
              assertEquals(got.length, 1, `${pod.name} on ${pod.node.name}: net1 has ${got}`);
              assert(got[0].startsWith(`192.168.${third}.`), `${pod.name}: ${got[0]}`);
              ips.push(got[0]);
            }
            assertEquals(new Set(ips).size, 60, `an address twice: ${[...ips].sort().join(" ")}`);
            // Each pod reaches a pod of each other node on net1 (macvlan bridge mode: not its own
            // node's host, but every other pod on the underlay).
            const unreachable: string[] = [];
            await Promise.all(pods.map(async (pod, i) => {
              for (const j of [(i + 1) % 60, (i + 2) % 60]) {
                if (!(await pingOnce(ips[j], pod.ns)) && !(await pingOnce(ips[j], pod.ns))) {
                  unreachable.push(`${pod.name} (${ips[i]}) -> ${pods[j].name} (${ips[j]})`);
                }
              }
            }));
            assertEquals(unreachable, [], "pods that could not reach each other on net1");
            await eventually(
              async () => (await recorded(c, space)).length === 60,
              "the 60 allocations recorded in the network's blocks",
              30_000,
            );
            // ipam check's NAD half over this network: nothing overlapping, twice or leaked.
            const state = await readClusterState(c.client);
            const mine = (state.networkBlocks ?? []).filter((b) =>
              b.spec?.network.startsWith(`${space}/`)
            );
            assertEquals(networkFindings({ ...state, networkBlocks: mine }), []);
            // Each node's /v1/stats shows its blocks of the network.
            for (const node of c.nodes) {
              const res = await unixRequest(
                node.socket,
                "GET",
                STATS_PATH,
                undefined,
                AbortSignal.timeout(5000),
              );
              const nad = JSON.parse(res.body).nadIpam as { blocks: string[]; claims: number };
              assert(
                nad?.blocks.some((b) => b.startsWith(`${space}/`)) && nad.claims > 0,
                `${node.name}: ${res.body.slice(0, 300)}`,
              );
            }
            for (const pod of pods) assertEquals((await c.removePod(pod)).code, 0, pod.name);
            await eventually(
              async () => (await recorded(c, space)).length === 0,
              "no allocation left in the network's blocks after the DELs",
              30_000,
            );
          },
        );
      } finally {
        await dropBlocks(c, space);
      }
    }),
});

Deno.test({
  name:
    "a pod deleted without DEL has its NAD network's address released by the reconcile loop, which another pod then gets",
  ...opts,
  fn: () =>
    withSimCluster({
      kubeconfig: REAL_KUBECONFIG,
      nodes: 2,
      // A released address is kept from reuse for 1 s (the quarantine), then its block goes.
      config: { ...CONFIG, ipam: { reuseDelaySeconds: 1 } },
    }, async (c) => {
      const space = `sim-${crypto.randomUUID().slice(0, 6)}`;
      const third = 100 + Math.floor(Math.random() * 100);
      try {
        // A range of one address: only a release lets a second pod in.
        await withNad(
          c,
          {
            range: `192.168.${third}.0/24`,
            range_start: `192.168.${third}.9`,
            range_end: `192.168.${third}.9`,
            network_name: space,
          },
          async (nad) => {
            const annotations = { "k8s.v1.cni.cncf.io/networks": nad };
            const a = await c.addPod(c.nodes[0], "gone", 30_000, { annotations });
            assertEquals(await net1(a), [`192.168.${third}.9`]);
            await eventually(
              async () => (await recorded(c, space)).length === 1,
              "the pod's allocation recorded",
              30_000,
            );
            await c.deletePodObject(a);
            await eventually(
              async () => (await recorded(c, space)).length === 0,
              "the reconcile loop released the deleted pod's address",
              60_000,
            );
            await eventually(
              async () => (await blocksOf(c, space)).length === 0,
              "the single-address block given back once its quarantine is over",
              30_000,
            );
            const b = await c.addPod(c.nodes[1], "next", 60_000, { annotations });
            assertEquals(await net1(b), [`192.168.${third}.9`], "the released address is reused");
            assertEquals((await c.removePod(b)).code, 0);
          },
        );
      } finally {
        await dropBlocks(c, space);
      }
    }),
});

Deno.test({
  name:
    "a daemon killed mid-burst of NAD pods and restarted: no address twice, none leaked, all given back after the DELs",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 3, config: CONFIG }, async (c) => {
      const space = `sim-${crypto.randomUUID().slice(0, 6)}`;
      const third = 100 + Math.floor(Math.random() * 100);
      try {
        await withNad(
          c,
          { range: `192.168.${third}.0/24`, network_name: space },
          async (nad) => {
            const burst = Promise.all(
              Array.from({ length: 45 }, (_, i) =>
                c.addPod(c.nodes[i % 3], `kb${i}`, 60_000, {
                  annotations: { "k8s.v1.cni.cncf.io/networks": nad },
                })),
            );
            await new Promise((r) => setTimeout(r, 300));
            await c.killAndRestart(c.nodes[1]);
            const pods = await burst;
            const ips: string[] = [];
            for (const pod of pods) {
              const got = await net1(pod);
              assertEquals(got.length, 1, `${pod.name} on ${pod.node.name}: net1 has ${got}`);
              ips.push(got[0]);
            }
            assertEquals(new Set(ips).size, 45, `an address twice: ${[...ips].sort().join(" ")}`);
            // What the blocks record is exactly what the pods hold: an ADD cut short by the kill
            // left nothing behind (or the reconcile loop took it back).
            const live = pods.map((p, i) => `${ips[i]} ${p.name}`).sort();
            let last: string[] = [];
            await eventually(
              async () => (last = await recorded(c, space)).join() === live.join(),
              "the blocks record exactly the live pods' addresses",
              60_000,
            ).catch((e) => {
              const extra = last.filter((x) => !live.includes(x));
              const missing = live.filter((x) => !last.includes(x));
              throw new Error(
                `${e.message}: recorded but not live ${extra}; live, unrecorded ${missing}`,
              );
            });
            // Each node's own self-check agrees: the network's space checked, nothing counted.
            for (const node of c.nodes) {
              let last = "";
              await eventually(
                async () => {
                  const res = await unixRequest(
                    node.socket,
                    "GET",
                    STATS_PATH,
                    undefined,
                    AbortSignal.timeout(5000),
                  );
                  const check = JSON.parse(res.body).ipamCheck as {
                    checks: number;
                    networks?: { network: string; conflicts: number; leaked: number }[];
                  };
                  last = JSON.stringify(check);
                  const mine = check.networks?.filter((n) => n.network.startsWith(`${space}/`));
                  return check.checks >= 2 && !!mine?.length &&
                    mine.every((n) => n.conflicts === 0 && n.leaked === 0);
                },
                `${node.name}'s ipam check of ${space} clean`,
                30_000,
              ).catch((e) => {
                throw new Error(`${e.message}: ${last}`);
              });
            }
            for (const pod of pods) assertEquals((await c.removePod(pod)).code, 0, pod.name);
            await eventually(
              async () => (await recorded(c, space)).length === 0,
              "no allocation left after the DELs",
              30_000,
            );
          },
        );
      } finally {
        await dropBlocks(c, space);
      }
    }),
});

Deno.test({
  name:
    "a NAD with a bad whereabouts config is refused with code 7 naming the key, an InvalidNetworkSelection Event on the pod, nothing left behind",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 1, config: CONFIG }, async (c) => {
      await withNad(
        c,
        { range: "192.168.120.0/24", ipRanges: [{ range: "192.168.121.9-192.168.121.300/24" }] },
        async (nad) => {
          const e = await c.addPod(c.nodes[0], "badwa", 0, {
            annotations: { "k8s.v1.cni.cncf.io/networks": nad },
          }).then(() => undefined, (e: Error) => e.message);
          assert(e?.includes('"code":7'), e);
          // Named as the guard reads it (keys folded as a Go plugin reads them) or as written.
          assert(e?.toLowerCase().includes("ipam.ipranges[0].range"), e);
          await eventually(async () => {
            const { items } = await c.client.listAll<Event>(EVENTS, { namespace: "default" });
            return items.some((ev) =>
              ev.involvedObject?.name?.startsWith("badwa") &&
              ev.reason === "InvalidNetworkSelection" &&
              (ev.message ?? "").toLowerCase().includes("ipam.ipranges[0].range")
            );
          }, "an InvalidNetworkSelection Event naming the key");
          const { items } = await c.client.listAll<NetworkBlockObject>(NETWORKBLOCKS, {});
          assertEquals(
            items.filter((b) => b.spec?.node === c.nodes[0].name),
            [],
            "no block claimed for the refused ADD",
          );
        },
      );
    }),
});
