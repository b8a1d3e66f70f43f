// Reclaiming the blocks of deleted nodes, on the API under test (the stand-in, or the real
// kube-apiserver in `test:real`): two daemons compete through one Lease.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import type { Node } from "kubernetes-types/core/v1.d.ts";
import { DeadNodeBlocks } from "../../../daemon/gc/dead_node_blocks.ts";
import { LeaderLease } from "../../../daemon/k8s/leader_lease.ts";
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
