import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { CNI_ERROR, CniError } from "../../../lib/cni/errors.ts";
import {
  cidrContains,
  cidrsOverlap,
  formatIp,
  parseCidr,
  parseIp,
} from "../../../daemon/ipam/cidr.ts";
import { installNetworkBlockCrd } from "../../../daemon/dev/crds.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";
import { kubeNetworkBlockApi } from "../../../daemon/ipam/network_block_api.ts";
import { LEASES, NETWORKBLOCKS, NODES } from "../../../daemon/k8s/resources.ts";
import type { Node } from "kubernetes-types/core/v1.d.ts";
import { DeadNodeBlocks } from "../../../daemon/gc/dead_node_blocks.ts";
import { LeaderLease } from "../../../daemon/k8s/leader_lease.ts";
import { kubeLeaseApi } from "../../../daemon/k8s/lease_api.ts";
import { KubeApiError } from "../../../daemon/k8s/errors.ts";
import { type NetworkBlockObject, networkBlockRange } from "../../../daemon/ipam/nad_blocks.ts";
import { type NadIpamConfig, parseWhereabouts, rangeHolds } from "../../../daemon/ipam/nad_ipam.ts";
import { NadNetworkIpam, type NetworkBlockApi } from "../../../daemon/ipam/nad_network_ipam.ts";
import { freshCidr24, until } from "./_pools.ts";
import { type KubeTarget, REAL_KUBECONFIG, withKube } from "../k8s/_target.ts";

interface Env {
  k: KubeTarget;
  api: NetworkBlockApi;
  /** A network_name unique to this test. */
  net: string;
  /** Opens node `short`'s IPAM on `stateDir` (one per node and test). */
  open(
    short: string,
    stateDir: string,
    releaseAfterMs?: number,
    recorded?: (owner: { containerId: string; ifname: string }) => boolean,
    api?: NetworkBlockApi,
    aheadSpreadMs?: number,
  ): Promise<NadNetworkIpam>;
  /** The blocks of this test's nodes in the API now. */
  blocks(): Promise<NetworkBlockObject[]>;
}

/** Runs `fn` on the API under test; every block of the test's nodes is removed afterwards. */
function withNadIpam(fn: (env: Env) => Promise<void>): Promise<void> {
  return withKube(async (k) => {
    await installNetworkBlockCrd(k.client);
    const lease = { namespace: "default", name: `ferry-nad-claims-${k.id}` };
    const api = kubeNetworkBlockApi(k.client, lease);
    const opened: NadNetworkIpam[] = [];
    const node = (short: string) => `${short}-${k.id}`;
    const blocks = async () =>
      (await k.client.listAll<NetworkBlockObject>(NETWORKBLOCKS, {})).items.filter((b) =>
        b.spec?.node.endsWith(`-${k.id}`)
      );
    try {
      await fn({
        k,
        api,
        net: `net-${k.id}`,
        async open(short, stateDir, releaseAfterMs = 600_000, recorded, other, aheadSpreadMs) {
          const ipam = await NadNetworkIpam.open({
            nodeName: node(short),
            api: other ?? api,
            aheadSpreadMs,
            stateDir,
            releaseAfterMs,
            logger: getLogger(["ferry", "ipam"]),
            recorded,
          });
          opened.push(ipam);
          return ipam;
        },
        blocks,
      });
    } finally {
      for (const ipam of opened) await ipam.close();
      for (const b of await blocks()) {
        await k.client.delete(NETWORKBLOCKS, undefined, b.metadata!.name!).catch(() => {});
      }
      await k.client.delete(LEASES, lease.namespace, lease.name).catch(() => {});
    }
  });
}

const W = "pod default/p: NetworkAttachmentDefinition default/n";
const conf = (ipam: Record<string, unknown>): NadIpamConfig =>
  parseWhereabouts({ type: "whereabouts", ...ipam }, W);
const owner = (i: number | string) => ({ containerId: `c${i}`, ifname: "net1" });
const addr = (cidr: string) => cidr.split("/")[0];

/** Three nodes' state directories. */
async function threeDirs<T>(fn: (dirs: string[]) => Promise<T>): Promise<T> {
  return await withTempDir((a) => withTempDir((b) => withTempDir((c) => fn([a, b, c]))));
}

/** Asserts the blocks in the API overlap nowhere within a space. */
function assertNoOverlap(blocks: NetworkBlockObject[]): void {
  for (const [i, a] of blocks.entries()) {
    for (const b of blocks.slice(i + 1)) {
      if (a.spec!.network !== b.spec!.network) continue;
      assert(
        !cidrsOverlap(parseCidr(a.spec!.cidr), parseCidr(b.spec!.cidr)),
        `blocks ${a.spec!.cidr} (${a.spec!.node}) and ${b.spec!.cidr} (${b.spec!.node}) overlap`,
      );
    }
  }
}

Deno.test("the allocations of a burst reach the block object together: one write per writeDelayMs, not one per ADD", async () => {
  await withNadIpam(async (env) => {
    await withTempDir(async (dir) => {
      let updates = 0;
      const api: NetworkBlockApi = {
        ...env.api,
        claimTurn: () => env.api.claimTurn(),
        update: (b) => (updates++, env.api.update(b)),
      };
      const ipam = await NadNetworkIpam.open({
        nodeName: `n1-${env.k.id}`,
        api,
        stateDir: dir,
        releaseAfterMs: 600_000,
        writeDelayMs: 1000,
        logger: getLogger(["ferry", "ipam"]),
      });
      try {
        // A /20: its blocks (a sixty-fourth of it) hold the whole burst. The space is the
        // test's own network_name, whatever other tests' ranges.
        const c = conf({ range: "10.250.0.0/20", network_name: env.net });
        const pod = (i: number) => ({ namespace: "default", name: `p${i}`, uid: `u${i}` });
        await ipam.add(c, "default/macvlan", owner(0), pod(0));
        const written = async (n: number) =>
          (await env.blocks()).reduce((k, b) => k + (b.spec?.allocations?.length ?? 0), 0) >= n;
        await until(() => written(1), 10_000);
        const before = updates;
        // Twenty ADDs 20 ms apart: a burst of 400 ms.
        for (let i = 1; i <= 20; i++) {
          await ipam.add(c, "default/macvlan", owner(i), pod(i));
          await new Promise((r) => setTimeout(r, 20));
        }
        await until(() => written(21), 10_000).catch(() => {
          throw new Error("the burst's 20 allocations were not all written to the block in 10 s");
        });
        assert(updates - before <= 2, `${updates - before} writes of the block for 20 ADDs`);
      } finally {
        await ipam.close();
      }
    });
  });
});

Deno.test("three nodes share a /24: 60 pods round-robin get 60 distinct addresses of the range, recorded in non-overlapping blocks", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      const nodes = await Promise.all(["n1", "n2", "n3"].map((n, i) => env.open(n, dirs[i])));
      const c = conf({ range: freshCidr24(), network_name: env.net });
      const got = await Promise.all(
        Array.from({ length: 60 }, (_, i) =>
          nodes[i % 3].add(c, "default/macvlan", owner(i), {
            namespace: "default",
            name: `p${i}`,
            uid: `u${i}`,
          })),
      );
      const ips = got.map((r) => addr(r.ips[0].address));
      assertEquals(new Set(ips).size, 60, `duplicates among ${ips.join(" ")}`);
      for (const ip of ips) assert(rangeHolds(c.ranges[0], parseIp(ip)), `${ip} outside range`);
      for (const n of nodes) await n.flush(AbortSignal.timeout(20_000));
      const blocks = await env.blocks();
      assertNoOverlap(blocks);
      const recorded = blocks.flatMap((b) => b.spec!.allocations ?? []).map((a) => a.ip).sort();
      assertEquals(recorded, [...ips].sort(), "every allocation is recorded in its node's block");
      for (const b of blocks) {
        for (const a of b.spec!.allocations ?? []) {
          assert(parseCidr(b.spec!.cidr) && a.name?.startsWith("p"), "allocations name their pod");
        }
      }
    });
  });
});

Deno.test("a /27 shared by three nodes serves all 30 addresses however the pods are placed, then answers 101 naming the network and the range", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      const nodes = await Promise.all(["n1", "n2", "n3"].map((n, i) => env.open(n, dirs[i])));
      const base = freshCidr24().replace(".0/24", ".32/27");
      const c = conf({ range: base, network_name: env.net });
      // Uneven: 20 on n1, 8 on n2, 2 on n3, interleaved.
      const placement = [...Array(20).fill(0), ...Array(8).fill(1), ...Array(2).fill(2)]
        .sort(() => Math.random() - 0.5);
      const got = await Promise.all(
        placement.map((n, i) => nodes[n].add(c, "default/telco", owner(i))),
      );
      const ips = got.map((r) => addr(r.ips[0].address));
      assertEquals(new Set(ips).size, 30, `duplicates among ${ips.join(" ")}`);
      const e = await assertRejects(() => nodes[2].add(c, "default/telco", owner("x")), CniError);
      assertEquals(e.code, CNI_ERROR.ADDRESSES_EXHAUSTED);
      assert(e.message.includes("network default/telco"), e.message);
      assert(e.message.includes(`range ${base}`), e.message);
      // A release on one node lets another node have that address.
      const [freed] = await nodes[0].release(owner(placement.indexOf(0)));
      let again: string | undefined;
      await until(async () => {
        again = await nodes[2].add(c, "default/telco", owner("y")).then(
          (r) => addr(r.ips[0].address),
          () => undefined,
        );
        return again !== undefined;
      });
      assertEquals(again, freed);
    });
  });
});

Deno.test("a static address is reserved in the space: the allocator skips it and a second pod asking for it is refused", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      const [n1, n2] = await Promise.all(["n1", "n2"].map((n, i) => env.open(n, dirs[i])));
      const cidr = freshCidr24().replace(".0/24", ".0/28");
      const c = conf({ range: cidr, network_name: env.net });
      const prefix = cidr.split(".").slice(0, 3).join(".");
      const fixed = `${prefix}.5`;
      const s = await n1.add(c, "default/n", owner("s"), undefined, [`${fixed}/28`]);
      assertEquals(s.ips.map((i) => i.address), [`${fixed}/28`]);
      const e = await assertRejects(
        () => n2.add(c, "default/n", owner("t"), undefined, [`${fixed}/28`]),
        CniError,
      );
      assertEquals(e.code, CNI_ERROR.INVALID_CONFIG);
      assert(e.message.includes(`static address ${fixed}`), e.message);
      const rest = await Promise.all(
        Array.from({ length: 13 }, (_, i) => [n1, n2][i % 2].add(c, "default/n", owner(i))),
      );
      const ips = rest.map((r) => addr(r.ips[0].address));
      assert(!ips.includes(fixed), `the static ${fixed} was handed out: ${ips.join(" ")}`);
      assertEquals(new Set([...ips, fixed]).size, 14);
      await assertRejects(() => n2.add(c, "default/n", owner("z")), CniError);
    });
  });
});

Deno.test("two NADs with one network_name share the space; without it, or with another, they do not", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      const [n1, n2] = await Promise.all(["n1", "n2"].map((n, i) => env.open(n, dirs[i])));
      const range = freshCidr24().replace(".0/24", ".0/29"); // 6 addresses
      const a = conf({ range, network_name: env.net });
      const b = conf({ range, network_name: env.net, exclude: [] });
      const ips = await Promise.all(
        Array.from(
          { length: 6 },
          (_, i) =>
            (i % 2 ? n1 : n2).add(i < 3 ? a : b, i < 3 ? "default/a" : "default/b", owner(i)),
        ),
      );
      assertEquals(new Set(ips.map((r) => r.ips[0].address)).size, 6);
      await assertRejects(() => n1.add(b, "default/b", owner("x")), CniError);
      // Another network_name, or none, is another space: all six addresses are free there.
      for (const name of [`${env.net}-other`, undefined]) {
        const other = conf({ range, ...(name ? { network_name: name } : {}) });
        const o = await Promise.all(
          Array.from({ length: 6 }, (_, i) => n1.add(other, "default/other", owner(`${name}${i}`))),
        );
        assertEquals(new Set(o.map((r) => r.ips[0].address)).size, 6, `space of ${name}`);
      }
      // Overlapping ranges of one name share it (the default): the /28 around the full /29 has
      // 8 addresses left.
      const wider = conf({ range: range.replace(".0/29", ".0/28"), network_name: env.net });
      const w = await Promise.all(
        Array.from({ length: 8 }, (_, i) => n2.add(wider, "default/wider", owner(`w${i}`))),
      );
      const wips = w.map((r) => r.ips[0].address.split("/")[0]);
      for (const r of ips) {
        assert(!wips.includes(addr(r.ips[0].address)), "overlapping ranges share");
      }
      await assertRejects(() => n2.add(wider, "default/wider", owner("w-full")), CniError);
      // enable_overlapping_ranges false: that /28 is a space of its own, all 14 addresses free.
      const apart = conf({
        range: range.replace(".0/29", ".0/28"),
        network_name: env.net,
        enable_overlapping_ranges: false,
      });
      const p = await Promise.all(
        Array.from({ length: 14 }, (_, i) => n1.add(apart, "default/apart", owner(`p${i}`))),
      );
      assertEquals(new Set(p.map((r) => r.ips[0].address)).size, 14);
    });
  });
});

Deno.test("a restarted node keeps its pods' addresses; one whose state was lost adopts them from its blocks", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      const c = conf({ range: freshCidr24().replace(".0/24", ".0/28"), network_name: env.net });
      const n1 = await env.open("n1", dirs[0]);
      const pod = (i: number) => ({ namespace: "default", name: `p${i}`, uid: `u${i}` });
      const first = await Promise.all(
        [0, 1, 2].map((i) => n1.add(c, "default/n", owner(i), pod(i))),
      );
      await n1.flush(AbortSignal.timeout(20_000));
      await n1.close();
      const again = await env.open("n1", dirs[0]);
      assertEquals(
        (await again.add(c, "default/n", owner(1))).ips[0].address,
        first[1].ips[0].address,
        "the same owner gets its address back",
      );
      await again.close();
      // State lost: an empty directory; the block objects still record the allocations.
      const lost = await env.open("n1", dirs[2]);
      const fresh = await Promise.all(
        Array.from({ length: 11 }, (_, i) => lost.add(c, "default/n", owner(`f${i}`))),
      );
      const all = [...first, ...fresh].map((r) => r.ips[0].address);
      assertEquals(new Set(all).size, 14, `duplicates among ${all.join(" ")}`);
      // No DEL will come for the adopted ones: the sweep releases those whose pod is gone.
      const released = await lost.releaseAdoptedOfGonePods((p) => Promise.resolve(p.name === "p1"));
      assertEquals(released, [addr(first[1].ips[0].address)]);
      const next = await lost.add(c, "default/n", owner("after"));
      assertEquals(next.ips[0].address, first[1].ips[0].address);
    });
  });
});

Deno.test("an empty block is given back after releaseAfterMs, a static address's at once", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      const c = conf({ range: freshCidr24(), network_name: env.net });
      const n1 = await env.open("n1", dirs[0], 200);
      await n1.add(c, "default/n", owner(1));
      const static4 = formatIp({ family: 4, value: c.ranges[0].cidr.network.value + 200n });
      await n1.add(c, "default/n", owner(2), undefined, [`${static4}/24`]);
      await n1.flush(AbortSignal.timeout(20_000));
      assertEquals((await env.blocks()).length, 2);
      await n1.release(owner(2));
      await n1.release(owner(1));
      await until(async () => (await env.blocks()).length === 0);
      assertEquals(n1.stats().blocks, []);
    });
  });
});

Deno.test("a node down to half a block free claims its next block ahead of need, and gives it back when it stays unused", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      const c = conf({ range: "10.77.0.0/20", network_name: env.net }); // blocks of 32
      const n1 = await env.open("n1", dirs[0]);
      for (let i = 0; i < 15; i++) await n1.add(c, "default/n", owner(i));
      assertEquals(n1.stats().claims, 1, "one block while more than half of it is free");
      await n1.add(c, "default/n", owner(15)); // 16 of 32 (or 31) left
      await until(() => n1.stats().claimsAhead === 1).catch(() => {
        throw new Error(
          `no block claimed ahead with half a block free: ${JSON.stringify(n1.stats())}`,
        );
      });
      assertEquals(n1.stats().blocks.length, 2, "the second block is held before any ADD needs it");
      // The ADDs that fill the first block and start the second make no claim of their own.
      for (let i = 16; i < 33; i++) await n1.add(c, "default/n", owner(i));
      assertEquals(n1.stats().claims, 2, JSON.stringify(n1.stats()));
      // Another node's block claimed ahead that no ADD ever uses is given back.
      const n2 = await env.open("n2", dirs[1], 300);
      for (let i = 0; i < 16; i++) await n2.add(c, "default/n", owner(`b${i}`));
      await until(() => n2.stats().claimsAhead === 1 && n2.stats().released === 1).catch(() => {
        throw new Error(`the unused block was not given back: ${JSON.stringify(n2.stats())}`);
      });
      assertEquals(n2.stats().blocks.length, 1, "the block in use stays");
      await n2.flush(AbortSignal.timeout(20_000));
      const left = (await env.blocks()).filter((b) => b.spec!.node.startsWith("n2-"));
      assertEquals(left.length, 1, `n2's blocks in the API: ${left.map((b) => b.spec!.cidr)}`);
    });
  });
});

Deno.test("a block found empty at start (claimed ahead, never used) is given back; the one in use stays", async () => {
  await withNadIpam(async (env) => {
    await withTempDir(async (dir) => {
      const c = conf({ range: "10.79.0.0/20", network_name: env.net }); // blocks of 32
      const before = await env.open("n1", dir);
      for (let i = 0; i < 16; i++) await before.add(c, "default/n", owner(i));
      await until(() => before.stats().claimsAhead === 1);
      await before.close();
      const after = await env.open("n1", dir, 300);
      assertEquals(after.stats().blocks.length, 2, "both blocks are this node's at start");
      await until(() => after.stats().released === 1).catch(() => {
        throw new Error(`the empty block was not given back: ${JSON.stringify(after.stats())}`);
      });
      assertEquals((await env.blocks()).length, 1, "the block holding 16 pods stays");
      assertEquals(after.addressesOf(owner(3)).length, 1, "its pods keep their addresses");
    });
  });
});

Deno.test("an ADD that needs the block a claim ahead is waiting to start gets it without waiting out the spread", async () => {
  await withNadIpam(async (env) => {
    await withTempDir(async (dir) => {
      const c = conf({ range: "10.80.0.0/20", network_name: env.net }); // blocks of 32
      // A spread of an hour: only an ADD's need (or the close) starts the claim.
      const n1 = await env.open("n1", dir, 600_000, undefined, undefined, 3_600_000);
      for (let i = 0; i < 16; i++) await n1.add(c, "default/n", owner(i));
      assertEquals(n1.stats().claims, 1, "the claim ahead waits out its spread");
      let timer: ReturnType<typeof setTimeout> | undefined;
      const bounded = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () =>
            reject(
              new Error(`the ADDs past the first block waited: ${JSON.stringify(n1.stats())}`),
            ),
          20_000,
        );
      });
      try {
        await Promise.race([
          (async () => {
            for (let i = 16; i < 40; i++) await n1.add(c, "default/n", owner(i));
          })(),
          bounded,
        ]);
      } finally {
        clearTimeout(timer);
      }
      assertEquals(n1.stats().claims, 2, JSON.stringify(n1.stats()));
      assertEquals(n1.stats().claimsAhead, 1, "the claim that served them was the one made ahead");
      // Another claim ahead now waits out its spread; closing gives it up at once.
      for (let i = 40; i < 50; i++) await n1.add(c, "default/n", owner(i));
      await n1.close();
      assertEquals(n1.stats().claims, 2, "no claim after the close");
    });
  });
});

Deno.test("an ADD waiting on a claim ahead of need that fails claims for itself", async () => {
  await withNadIpam(async (env) => {
    await withTempDir(async (dir) => {
      const c = conf({ range: "10.81.0.0/20", network_name: env.net }); // blocks of 32
      let creates = 0;
      const held = Promise.withResolvers<void>();
      const api: NetworkBlockApi = {
        ...env.api,
        create: async (block) => {
          // The second create (the claim ahead of need) hangs, then fails.
          if (++creates === 2) {
            await held.promise;
            throw new KubeApiError(500, "InternalError", "etcd went away");
          }
          return await env.api.create(block);
        },
      };
      const n1 = await env.open("n1", dir, 600_000, undefined, api, 0);
      for (let i = 0; i < 16; i++) await n1.add(c, "default/n", owner(i));
      await until(() => creates === 2);
      // Fill the first block; the ADD after it waits on the claim ahead (it is called as soon as
      // the one before is answered, and reaches that wait before any timer runs).
      const first = networkBlockRange(c.ranges[0], parseCidr(n1.held()[0].cidr))!;
      const capacity = Number(first.end.value - first.start.value + 1n);
      const rest = (async () => {
        for (let i = 16; i < 40; i++) await n1.add(c, "default/n", owner(i));
      })();
      await until(() => n1.allocations().length === capacity);
      held.resolve();
      await rest;
      assertEquals(
        n1.addressesOf(owner(39)).length,
        1,
        "the ADDs past the first block were served",
      );
      assertEquals(n1.stats().claimsAhead, 0, JSON.stringify(n1.stats()));
      assertEquals(n1.stats().claims, 2, "the waiting ADD claimed the second block itself");
    });
  });
});

Deno.test("a claim's settle reads the space from storage; only its first candidate comes from the watch cache", async () => {
  await withNadIpam(async (env) => {
    await withTempDir(async (dir) => {
      const c = conf({ range: freshCidr24(), network_name: env.net });
      const calls: string[] = [];
      const api: NetworkBlockApi = {
        ...env.api,
        list: (f) => {
          calls.push(f.network !== undefined ? (f.cached ? "cached" : "storage") : "node");
          return env.api.list(f);
        },
        create: (b) => {
          calls.push("create");
          return env.api.create(b);
        },
      };
      const n1 = await env.open("n1", dir, 600_000, undefined, api);
      await n1.add(c, "default/n", owner(1));
      const from = calls.indexOf("create");
      assert(from > 0 && calls[from - 1] === "cached", `the candidate's list: ${calls}`);
      assertEquals(calls[from + 1], "storage", `the settle must list from storage: ${calls}`);
    });
  });
});

Deno.test({
  name: "a lagging watch cache never makes a range look full: the last free address is still found",
  // The real server's watch cache cannot be held back on purpose; the stand-in's can.
  ignore: REAL_KUBECONFIG !== undefined,
  fn: () =>
    withNadIpam(async (env) => {
      await threeDirs(async (dirs) => {
        const c = conf({ range: "10.82.0.0/27", network_name: env.net }); // single-address blocks
        const n1 = await env.open("n1", dirs[0]);
        const n2 = await env.open("n2", dirs[1]);
        for (let i = 0; i < 30; i++) await n1.add(c, "default/n", owner(i));
        env.k.standin!.stallWatchCache();
        try {
          const freed = n1.addressesOf(owner(0))[0];
          await n1.release(owner(0));
          await until(async () => (await env.blocks()).length === 29);
          const got = await n2.add(c, "default/n", owner("x"));
          assertEquals(addr(got.ips[0].address), freed, "the address given back is found");
        } finally {
          env.k.standin!.resumeWatchCache();
        }
      });
    }),
});

Deno.test("a claim ahead of need listing when the IPAM closes creates nothing", async () => {
  await withNadIpam(async (env) => {
    await withTempDir(async (dir) => {
      const c = conf({ range: "10.83.0.0/20", network_name: env.net }); // blocks of 32
      let creates = 0;
      const gate = { armed: false, ...Promise.withResolvers<void>() };
      const listing = Promise.withResolvers<void>();
      const api: NetworkBlockApi = {
        ...env.api,
        list: async (f) => {
          if (gate.armed) {
            listing.resolve();
            await gate.promise;
          }
          return await env.api.list(f);
        },
        create: (b) => {
          creates++;
          return env.api.create(b);
        },
      };
      const n1 = await env.open("n1", dir, 600_000, undefined, api, 0);
      await n1.add(c, "default/n", owner(0));
      // The block's addresses: 31 in a block at the range's edge (its network or broadcast
      // address is not handed out), 32 elsewhere; which block a node gets first varies.
      const [block] = n1.stats().blocks;
      const edge = / 10\.83\.(0\.0|15\.224)\/27$/.test(block);
      const adds = (edge ? 31 : 32) - 16;
      for (let i = 1; i < adds - 1; i++) await n1.add(c, "default/n", owner(i));
      gate.armed = true;
      await n1.add(c, "default/n", owner(adds - 1)); // half a block left: the claim ahead lists
      await listing.promise;
      const before = creates;
      const closing = n1.close();
      gate.resolve();
      await closing;
      assertEquals(creates, before, "a block was created after close");
      assertEquals(n1.stats().claims, 1);
    });
  });
});

Deno.test("a range three quarters claimed gets no claim ahead of need, and an ADD that finds its blocks full still claims for itself", async () => {
  await withNadIpam(async (env) => {
    await withTempDir(async (dir) => {
      const c = conf({ range: "10.78.0.0/20", network_name: env.net }); // 128 blocks of 32
      const space = `${env.net}/v4`;
      // Other nodes hold the top three quarters of the range (as the API would list them).
      const phantoms: NetworkBlockObject[] = Array.from({ length: 96 }, (_, i) => ({
        metadata: { name: `phantom-${i}` },
        spec: {
          network: space,
          range: "x",
          cidr: `10.78.${4 + (i >> 3)}.${(i & 7) * 32}/27`,
          node: "elsewhere",
        },
      }));
      const api: NetworkBlockApi = {
        ...env.api,
        list: async (f) => [...await env.api.list(f), ...(f.network === space ? phantoms : [])],
      };
      let lists = 0;
      const counted: NetworkBlockApi = {
        ...api,
        list: (f) => {
          if (f.network !== undefined) lists++;
          return api.list(f);
        },
      };
      const n1 = await env.open("n1", dir, 600_000, undefined, counted, 0);
      for (let i = 0; i < 15; i++) await n1.add(c, "default/n", owner(i));
      // The 16th ADD asks for a claim ahead, which declines; the 33rd finds both of its blocks'
      // worth taken while that may still be under way, and must claim for itself.
      const got = await Promise.all(
        Array.from({ length: 18 }, (_, k) => n1.add(c, "default/n", owner(15 + k))),
      );
      const ips = got.map((r) => addr(r.ips[0].address));
      assertEquals(new Set(ips).size, 18, `duplicates among ${ips.join(" ")}`);
      assertEquals(n1.stats().claimsAhead, 0, "no claim ahead in a range three quarters claimed");
      assertEquals(n1.stats().claims, 2, `${JSON.stringify(n1.stats())}`);
      // Once declined, the range is not asked again after every ADD: down to half of the second
      // block and past it, no list of the space.
      const before = lists;
      for (let i = 33; i < 58; i++) await n1.add(c, "default/n", owner(i));
      assert(
        lists - before <= 1,
        `${lists - before} lists of the space for 25 ADDs after a decline`,
      );
      assertEquals(n1.stats().claims, 2, `${JSON.stringify(n1.stats())}`);
      for (const b of await env.blocks()) {
        assert(
          !phantoms.some((p) => cidrsOverlap(parseCidr(p.spec!.cidr), parseCidr(b.spec!.cidr))),
          `${b.spec!.cidr} overlaps another node's block`,
        );
      }
    });
  });
});

Deno.test("a deleted node's NAD blocks are reclaimed; a live node's stay, and their addresses go to the others", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      const { client, id } = env.k;
      const live = `n1-${id}`;
      const lease = `ferry-test-${id}`;
      await client.create<Node>(NODES, { metadata: { name: live } });
      try {
        const c = conf({ range: freshCidr24().replace(".0/24", ".0/28"), network_name: env.net });
        const n1 = await env.open("n1", dirs[0]);
        const ghost = await env.open("n2", dirs[1]); // no Node object: deleted
        await n1.add(c, "default/n", owner("live"));
        await Promise.all(
          Array.from({ length: 13 }, (_, i) => ghost.add(c, "default/n", owner(`g${i}`))),
        );
        await Promise.all([n1.flush(), ghost.flush()]);
        await ghost.close();
        await assertRejects(() => n1.add(c, "default/n", owner("more")), CniError);
        const reclaimer = new DeadNodeBlocks({
          lease: new LeaderLease(kubeLeaseApi(client, "default", lease), "daemon-a", 15_000),
          nodeKnown: () => false,
          nodesSynced: () => true,
          nodeExists: (name) =>
            client.get(NODES, undefined, name).then(() => true, (e) => {
              if (e instanceof KubeApiError && e.isNotFound) return false;
              throw e;
            }),
          // NAD networks' blocks only (no pool IPAM here).
          // This test's blocks only: others a shared real server holds are not this test's.
          networks: {
            list: async (f) =>
              (await env.api.list(f)).filter((b) => b.spec?.network.startsWith(`${env.net}/`)),
            delete: env.api.delete,
          },
          intervalMs: 60_000,
          logger: getLogger(["ferry", "gc"]),
        });
        await reclaimer.tick();
        const left = await env.blocks();
        assertEquals(left.map((b) => b.spec!.node), [live], "only the live node's block is left");
        assertEquals(reclaimer.stats().reclaimed, 13);
        const more = await Promise.all(
          Array.from({ length: 13 }, (_, i) => n1.add(c, "default/n", owner(`m${i}`))),
        );
        assertEquals(new Set(more.map((r) => r.ips[0].address)).size, 13);
      } finally {
        await client.delete(NODES, undefined, live).catch(() => {});
        await client.delete(LEASES, "default", lease).catch(() => {});
      }
    });
  });
});

Deno.test("an ADD that fails on its second range gives back what it took, and keeps what the owner held before", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      const n1 = await env.open("n1", dirs[0]);
      const base = freshCidr24();
      const full = base.replace(".0/24", ".16/30"); // 2 addresses
      const one = conf({ range: base.replace(".0/24", ".0/28"), network_name: env.net });
      const two = conf({
        range: base.replace(".0/24", ".0/28"),
        ipRanges: [{ range: full }],
        network_name: env.net,
      });
      await n1.add(conf({ range: full, network_name: env.net }), "default/f", owner("f1"));
      await n1.add(conf({ range: full, network_name: env.net }), "default/f", owner("f2"));
      const held = await n1.add(one, "default/n", owner("x"));
      const e = await assertRejects(() => n1.add(two, "default/n", owner("x")), CniError);
      assertEquals(e.code, CNI_ERROR.ADDRESSES_EXHAUSTED);
      assertEquals(n1.addressesOf(owner("x")), [addr(held.ips[0].address)], "kept from before");
      await assertRejects(() => n1.add(two, "default/n", owner("y")), CniError);
      assertEquals(n1.addressesOf(owner("y")), [], "nothing left of the failed ADD");
    });
  });
});

Deno.test("an address whereabouts gave a live pod is never handed out; once that pod is gone the sweep frees it", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      const c = conf({ range: freshCidr24().replace(".0/24", ".0/28"), network_name: env.net });
      const theirs = formatIp({ family: 4, value: c.ranges[0].cidr.network.value + 3n });
      const ipam = await NadNetworkIpam.open({
        nodeName: `n1-${env.k.id}`,
        api: env.api,
        stateDir: dirs[0],
        releaseAfterMs: 600_000,
        logger: getLogger(["ferry", "ipam"]),
        foreign: (ip) => ip === theirs ? { namespace: "default", name: "wa-pod" } : undefined,
      });
      try {
        const got = await Promise.all(
          Array.from({ length: 13 }, (_, i) => ipam.add(c, "default/n", owner(i))),
        );
        const ips = got.map((r) => addr(r.ips[0].address));
        assert(!ips.includes(theirs), `${theirs} handed out: ${ips.join(" ")}`);
        await assertRejects(() => ipam.add(c, "default/n", owner("full")), CniError);
        await ipam.flush(AbortSignal.timeout(20_000));
        const recorded = (await env.blocks()).flatMap((b) => b.spec!.allocations ?? []);
        assertEquals(
          recorded.filter((a) => a.ip === theirs).map((a) => a.name),
          ["wa-pod"],
          "recorded for whereabouts' pod",
        );
        assertEquals(
          await ipam.releaseAdoptedOfGonePods(() => Promise.resolve(false)),
          [],
          "kept while the pod lives",
        );
      } finally {
        await ipam.close();
      }
      // Restarted (the set-aside address in its directory): still released once the pod is gone.
      const again = await env.open("n1", dirs[0]);
      assertEquals(await again.releaseAdoptedOfGonePods(() => Promise.resolve(true)), [theirs]);
    });
  });
});

Deno.test("an API failure while claiming is code 11 (the runtime retries), not an internal error", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      let down = true;
      const flaky: NetworkBlockApi = {
        ...env.api,
        list: (f) => down ? Promise.reject(new Error("cannot reach the API")) : env.api.list(f),
      };
      const ipam = await NadNetworkIpam.open({
        nodeName: `n1-${env.k.id}`,
        api: { ...flaky, list: (f) => f.node ? env.api.list(f) : flaky.list(f) },
        stateDir: dirs[0],
        releaseAfterMs: 600_000,
        logger: getLogger(["ferry", "ipam"]),
      });
      try {
        const c = conf({ range: freshCidr24(), network_name: env.net });
        const e = await assertRejects(() => ipam.add(c, "default/n", owner(1)), CniError);
        assertEquals(e.code, CNI_ERROR.TRY_AGAIN_LATER, e.message);
        assert(e.details?.includes("cannot reach the API"), e.details);
        down = false;
        assertEquals((await ipam.add(c, "default/n", owner(1))).ips.length, 1, "then it works");
      } finally {
        await ipam.close();
      }
    });
  });
});

Deno.test("at open, an address no attachment records (its ADD died with the daemon) is released, or left to the sweep when its block names the pod", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      const c = conf({ range: freshCidr24().replace(".0/24", ".0/28"), network_name: env.net });
      const n1 = await env.open("n1", dirs[0]);
      const kept = await n1.add(c, "default/n", owner("kept"));
      const died = await n1.add(c, "default/n", owner("died"));
      const named = await n1.add(c, "default/n", owner("named"), {
        namespace: "default",
        name: "pnamed",
        uid: "unamed",
      });
      await n1.flush(AbortSignal.timeout(20_000));
      await n1.close();
      // Restarted: only "kept" and "named" have records; "died"'s ADD never recorded.
      const recorded = (o: { containerId: string }) => o.containerId !== "cdied";
      const again = await env.open(
        "n1",
        dirs[0],
        undefined,
        (o) => recorded(o) && o.containerId === "ckept",
      );
      assertEquals(again.addressesOf(owner("kept")), [addr(kept.ips[0].address)], "recorded: kept");
      assertEquals(again.addressesOf(owner("died")), [], "no record, no pod named: released");
      assertEquals(
        again.addressesOf(owner("named")),
        [addr(named.ips[0].address)],
        "no record but its block names the pod: kept until the sweep finds the pod gone",
      );
      const released = await again.releaseAdoptedOfGonePods((p) =>
        Promise.resolve(p.name === "pnamed")
      );
      assertEquals(released, [addr(named.ips[0].address)]);
      assert(died.ips[0].address !== kept.ips[0].address);
    });
  });
});

/** A /20 of this test's space (blocks of 32 addresses), its n1 block holding pods 0 and 1. */
async function nodeWithBlock(env: Env, dir: string) {
  const r = crypto.getRandomValues(new Uint8Array(1));
  const c = conf({ range: `10.${100 + (r[0] % 100)}.16.0/20`, network_name: env.net });
  const n1 = await env.open("n1", dir);
  const pod = (i: number | string) => ({ namespace: "default", name: `p${i}`, uid: `u${i}` });
  const held = [];
  for (const i of [0, 1]) {
    held.push(addr((await n1.add(c, "default/n", owner(i), pod(i))).ips[0].address));
  }
  await n1.flush(AbortSignal.timeout(20_000));
  const block = (await env.blocks()).find((b) => b.spec!.node === `n1-${env.k.id}`)!;
  assert(block, "n1 claimed a block");
  return { c, n1, pod, held, block, cidr: parseCidr(block.spec!.cidr) };
}

/** Asserts no address is held by two different owners on the two nodes. */
function assertNoTwice(a: NadNetworkIpam, b: NadNetworkIpam): void {
  const mine = new Map(a.allocations().map((x) => [x.ip, x.owner.containerId]));
  for (const x of b.allocations()) {
    const other = mine.get(x.ip);
    assert(
      other === undefined || other === x.owner.containerId,
      `${x.ip} live on ${other} and ${x.owner.containerId}`,
    );
  }
}

Deno.test("a NAD block whose object was deleted while another node claimed an overlapping block is lost: its pods keep their addresses, no ADD gets one of it", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      const { c, n1, held, block, cidr } = await nodeWithBlock(env, dirs[0]);
      const n2 = await env.open("n2", dirs[1]);
      await env.k.client.delete(NETWORKBLOCKS, undefined, block.metadata!.name!);
      // Meanwhile n2 reserves a free address of the block: its single-address block settles.
      const start = parseIp(addr(block.spec!.cidr)).value;
      const free = [...Array(30).keys()].map((i) =>
        formatIp({ family: 4, value: start + 5n + BigInt(i) })
      )
        .find((ip) => !held.includes(ip))!;
      await n2.add(c, "default/n", owner("s"), undefined, [`${free}/20`]);
      // A DEL on n1 has its block written: the overlap is found.
      await n1.release(owner(1));
      await n1.flush(AbortSignal.timeout(20_000));
      const after = await Promise.all(
        Array.from({ length: 40 }, (_, i) => n1.add(c, "default/n", owner(`a${i}`))),
      );
      const ips = after.map((r) => addr(r.ips[0].address));
      const inLost = ips.filter((ip) => cidrContains(cidr, parseIp(ip)));
      assertEquals(inLost, [], `ADDs got addresses of the lost block ${block.spec!.cidr}`);
      assertEquals(n1.addressesOf(owner(0)), [held[0]], "pod 0 keeps its address");
      assertNoTwice(n1, n2);
      // Once empty it is dropped, and the object it wrote again deleted.
      await n1.release(owner(0));
      await until(async () =>
        !(await env.blocks()).some((b) => b.metadata!.name === block.metadata!.name)
      );
    });
  });
});

Deno.test("a NAD block whose object is re-created naming another node is lost: its pods keep their addresses, no ADD gets one of it", async () => {
  await withNadIpam(async (env) => {
    await threeDirs(async (dirs) => {
      const { c, n1, held, block, cidr } = await nodeWithBlock(env, dirs[0]);
      await env.k.client.delete(NETWORKBLOCKS, undefined, block.metadata!.name!);
      const { uid: _u, resourceVersion: _r, creationTimestamp: _c, ...metadata } = block.metadata!;
      await env.k.client.create(NETWORKBLOCKS, {
        ...block,
        metadata,
        spec: { ...block.spec!, node: `n2-${env.k.id}` },
      } as NetworkBlockObject);
      const n2 = await env.open("n2", dirs[1]); // adopts what the object records
      await n1.release(owner(1));
      await n1.flush(AbortSignal.timeout(20_000));
      const after = await Promise.all(
        Array.from({ length: 40 }, (_, i) => n1.add(c, "default/n", owner(`a${i}`))),
      );
      const ips = after.map((r) => addr(r.ips[0].address));
      const inLost = ips.filter((ip) => cidrContains(cidr, parseIp(ip)));
      assertEquals(inLost, [], `ADDs got addresses of the lost block ${block.spec!.cidr}`);
      await Promise.all(
        Array.from({ length: 20 }, (_, i) => n2.add(c, "default/n", owner(`b${i}`))),
      );
      assertEquals(n1.addressesOf(owner(0)), [held[0]], "pod 0 keeps its address");
      assertNoTwice(n1, n2);
      await n1.release(owner(0));
      const again = (await env.blocks()).find((b) => b.metadata!.name === block.metadata!.name);
      assertEquals(again?.spec?.node, `n2-${env.k.id}`, "n2's object is left alone");
    });
  });
});
