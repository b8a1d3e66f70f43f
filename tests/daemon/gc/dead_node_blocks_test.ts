// Reclaiming the blocks of deleted nodes, on the API under test (the stand-in, or the real
// kube-apiserver in `test:real`): two daemons compete through one Lease.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import type { Node } from "kubernetes-types/core/v1.d.ts";
import { DeadNodeBlocks } from "../../../daemon/gc/dead_node_blocks.ts";
import { LeaderLease, type LeaseApi } from "../../../daemon/k8s/leader_lease.ts";
import type { BlockApi } from "../../../daemon/ipam/block_ipam.ts";
import type { NetworkBlockObject } from "../../../daemon/ipam/nad_blocks.ts";
import { kubeLeaseApi } from "../../../daemon/k8s/lease_api.ts";
import { KubeApiError } from "../../../daemon/k8s/errors.ts";
import { LEASES, NODES } from "../../../daemon/k8s/resources.ts";
import { formatCidr, parseCidr } from "../../../daemon/ipam/cidr.ts";
import { blockName } from "../../../daemon/ipam/ip_pools.ts";
import { freshCidr24, withPool } from "../ipam/_pools.ts";

Deno.test("blocks of a deleted node are reclaimed exactly once by two competing daemons; a live node's stay", () =>
  withPool({ cidrs: [freshCidr24()], blockSize: { ipv4: 28 } }, async (env) => {
    const { client, id } = env.k;
    const live = `n-live-${id}`;
    const ghost = `n-ghost-${id}`;
    const lease = `ferry-test-${id}`;
    await client.create<Node>(NODES, { metadata: { name: live } });
    try {
      const base = parseCidr(env.map.pool(env.pool)!.spec!.cidrs![0]);
      const cidrs = [0, 1, 2, 3].map((i) =>
        formatCidr({
          network: { ...base.network, value: base.network.value + BigInt(16 * i) },
          prefix: 28,
        })
      );
      for (const [i, cidr] of cidrs.entries()) {
        await env.api.create({
          metadata: { name: blockName(parseCidr(cidr)) },
          spec: { pool: env.pool, cidr, node: i === 0 ? live : ghost, allocations: [] },
        });
      }
      await env.untilBlocks(4);
      const reclaimer = (identity: string) =>
        new DeadNodeBlocks({
          lease: new LeaderLease(kubeLeaseApi(client, "kube-system", lease), identity, 15_000),
          // This test's pool only: on a shared real server, blocks another run left behind
          // (their nodes long gone) are not this test's to count.
          pools: {
            get synced() {
              return env.map.synced;
            },
            pool: (name) => env.map.pool(name),
            blocks: () => env.map.blocks().filter((b) => b.pool === env.pool),
          },
          // The worst case: a watch that knows no node at all; the API decides.
          nodeKnown: () => false,
          nodesSynced: () => true,
          nodeExists: (name) =>
            client.get(NODES, undefined, name).then(() => true, (e) => {
              if (e instanceof KubeApiError && e.isNotFound) return false;
              throw e;
            }),
          api: env.api,
          intervalMs: 60_000,
          logger: getLogger(["ferry", "gc"]),
        });
      const a = reclaimer("daemon-a");
      const b = reclaimer("daemon-b");
      for (let i = 0; i < 3; i++) await Promise.all([a.tick(), b.tick()]);
      await env.untilBlocks(1);
      const left = await env.blocks();
      assertEquals(left.map((x) => x.spec!.node), [live]);
      assertEquals(a.stats().reclaimed + b.stats().reclaimed, 3, "each block reclaimed once");
      assertEquals([a.stats().leader, b.stats().leader].filter(Boolean).length, 1, "one leader");
      assert(a.stats().reclaimed === 0 || b.stats().reclaimed === 0, "only the leader reclaims");
    } finally {
      await client.delete(NODES, undefined, live).catch(() => {});
      await client.delete(LEASES, "kube-system", lease).catch(() => {});
    }
  }));

Deno.test("while the pool watch has not listed (auto mode on a node with podCIDRs never starts it), a deleted node's NAD blocks and pool blocks are reclaimed from storage, never from the unlisted watch; at close the Lease is given up and another daemon takes it at once", async () => {
  const leases: { lease?: Parameters<LeaseApi["create"]>[0] } = {};
  const leaseApi: LeaseApi = {
    get: () => Promise.resolve(leases.lease),
    create: (l) =>
      Promise.resolve(leases.lease = { ...l, metadata: { ...l.metadata, resourceVersion: "1" } }),
    update: (l) => Promise.resolve(leases.lease = l),
  };
  const nadBlock = (name: string, node: string): NetworkBlockObject => ({
    metadata: { name, uid: `uid-${name}`, resourceVersion: "7" },
    spec: { network: "ippool:p/v4", range: "r", cidr: "192.168.9.1/32", node, allocations: [] },
  });
  const stored = [nadBlock("nb-ghost", "ghost"), nadBlock("nb-live", "live")];
  const poolDeletes: string[] = [];
  const reclaimer = new DeadNodeBlocks({
    lease: new LeaderLease(leaseApi, "daemon-a", 30_000),
    // The watch of auto mode, never started: unsynced, and it would list a ghost's pool block.
    pools: {
      synced: false,
      pool: () => undefined,
      blocks: () => {
        throw new Error("the unlisted watch's blocks were read");
      },
    },
    networks: {
      list: () => Promise.resolve([...stored]),
      delete: (name, uid, rv) => {
        assertEquals([uid, rv], [`uid-${name}`, "7"], "deleted with its uid and resourceVersion");
        stored.splice(stored.findIndex((b) => b.metadata!.name === name), 1);
        return Promise.resolve();
      },
    },
    nodeKnown: (name) => name === "live",
    nodesSynced: () => true,
    nodeExists: (name) => Promise.resolve(name === "live"),
    api: {
      list: () =>
        Promise.resolve(
          ["ghost", "live"].map((node) => ({
            metadata: { name: `${node}-pool-block`, uid: `uid-${node}`, resourceVersion: "3" },
            spec: { pool: "p", cidr: "10.9.0.0/28", node, allocations: [] },
          })),
        ),
      get: (name: string) => {
        poolDeletes.push(`get ${name}`);
        const node = name.replace(/-pool-block$/, "");
        return Promise.resolve({
          metadata: { name, uid: `uid-${node}`, resourceVersion: "3" },
          spec: { pool: "p", cidr: "10.9.0.0/28", node, allocations: [] },
        });
      },
      delete: (name: string) => {
        poolDeletes.push(`delete ${name}`);
        return Promise.resolve();
      },
    } as unknown as BlockApi,
    intervalMs: 60_000,
    logger: getLogger(["ferry", "gc"]),
  });
  await reclaimer.tick();
  assertEquals(stored.map((b) => b.metadata!.name), ["nb-live"], "the ghost's NAD block reclaimed");
  assertEquals(
    poolDeletes,
    ["get ghost-pool-block", "delete ghost-pool-block"],
    "the ghost's pool block, found in storage, reclaimed; the live node's kept",
  );
  assertEquals(reclaimer.stats(), { leader: true, reclaimed: 2 });
  // Given up at close: another daemon leads at its next look, not once the Lease has expired.
  const other = new LeaderLease(leaseApi, "daemon-b", 30_000);
  assertEquals(await other.acquireOrRenew(), false, "daemon-a still holds it");
  await reclaimer.close();
  assertEquals(leases.lease?.spec?.holderIdentity, "", "given up");
  assertEquals(await other.acquireOrRenew(), true, "taken at once");
});
