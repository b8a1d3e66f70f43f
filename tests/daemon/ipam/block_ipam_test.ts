// Pool IPAM (ipam.mode pool) against the API under test: the stand-in by default, the real
// kube-apiserver in `deno task test:real`.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { addToIp, cidrContains, formatIp, parseCidr } from "../../../daemon/ipam/cidr.ts";
import { IPBLOCKS, IPPOOLS } from "../../../daemon/k8s/resources.ts";
import type { IpBlockObject, IpPoolObject } from "../../../daemon/ipam/ip_pools.ts";
import type { BlockSummary } from "../../../daemon/ipam/block_ipam.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";
import { BridgeDriver } from "../../../daemon/drivers/bridge.ts";
import type { Plumber } from "../../../daemon/net/plumber.ts";
import { CniError } from "../../../lib/cni/errors.ts";
import { freshCidr24, until, withPool } from "./_pools.ts";

const owner = (n: number | string, ifname = "eth0") => ({ containerId: `c${n}`, ifname });
const pod = (n: number | string) => ({ namespace: "default", name: `pod-${n}`, uid: `uid-${n}` });
const inAny = (ip: string, blocks: string[]) =>
  blocks.some((b) => cidrContains(parseCidr(b), parseCidr(`${ip}/32`).network));

Deno.test("a node claims a block at start, allocates inside it and records each allocation on the block", () =>
  withPool(
    { cidrs: [freshCidr24()], blockSize: { ipv4: 28 } },
    (env) =>
      withTempDir(async (dir) => {
        const ipam = await env.open("n1", dir);
        const [v4] = ipam.allocators();
        const [block] = ipam.stats().blocks;
        assert(block, "a block is claimed at start");
        const gateway = formatIp(addToIp(parseCidr(block).network, 1n));
        assertEquals(env.gateways.get("n1"), [`+${gateway}/28`]);
        const leases = await Promise.all([1, 2, 3].map((i) => v4.allocate(owner(i), pod(i))));
        for (const l of leases) {
          assert(inAny(l.ip, [block]), `${l.ip} in ${block}`);
          assertEquals(l.prefix, 28);
          assertEquals(l.gateway, gateway);
        }
        // The same owner gets the same address back.
        assertEquals((await v4.allocate(owner(2), pod(2))).ip, leases[1].ip);
        await ipam.flush(AbortSignal.timeout(10_000));
        const [obj] = await env.blocks();
        assertEquals(obj.spec!.node, env.node("n1"));
        assertEquals(obj.spec!.cidr, block);
        assertEquals(
          obj.spec!.allocations!.map((a) => [a.ip, a.containerID, a.ifname, a.podUID, a.name])
            .sort(),
          leases.map((l, i) => [l.ip, `c${i + 1}`, "eth0", `uid-${i + 1}`, `pod-${i + 1}`]).sort(),
        );
        await v4.release(owner(2));
        await ipam.flush(AbortSignal.timeout(10_000));
        const [after] = await env.blocks();
        assertEquals(
          after.spec!.allocations!.map((a) => a.ip).sort(),
          [leases[0].ip, leases[2].ip].sort(),
        );
      }),
  ));

Deno.test("a full block makes the node claim another; an exhausted pool is code 101 naming pool and node", () =>
  withPool(
    { cidrs: [freshCidr24().replace(/0\/24$/, "0/27")], blockSize: { ipv4: 29 } },
    (env) =>
      withTempDir(async (dir) => {
        // A /27 in /29 blocks: 4 blocks of 5 addresses (network, gateway and broadcast kept out).
        const ipam = await env.open("n1", dir);
        const [v4] = ipam.allocators();
        const ips = await Promise.all(
          Array.from({ length: 20 }, (_, i) => v4.allocate(owner(i), pod(i))),
        );
        assertEquals(new Set(ips.map((l) => l.ip)).size, 20);
        assertEquals(ipam.stats().blocks.length, 4);
        for (const l of ips) assert(inAny(l.ip, ipam.stats().blocks));
        const e = await assertRejects(() => v4.allocate(owner("x"), pod("x")), CniError);
        assertEquals(e.code, 101);
        assert(e.message.includes(env.pool) && e.message.includes("n1"), e.message);
        await ipam.flush(AbortSignal.timeout(10_000));
        const objs = await env.blocks();
        assertEquals(objs.reduce((n, b) => n + (b.spec!.allocations?.length ?? 0), 0), 20);
      }),
  ));

Deno.test("two nodes racing for the same blocks never share one, nor an address", () =>
  withPool(
    { cidrs: [freshCidr24().replace(/0\/24$/, "0/26")], blockSize: { ipv4: 28 } },
    (env) =>
      withTempDir(async (dir) => {
        // Views that never learn of new blocks: every claim races on the API's AlreadyExists alone.
        const stale = { pool: (n: string) => env.map.pool(n), blocks: (): BlockSummary[] => [] };
        const a = await env.open("n1", `${dir}/a`, { view: stale });
        const b = await env.open("n2", `${dir}/b`, { view: stale });
        const [va] = a.allocators();
        const [vb] = b.allocators();
        // 4 blocks of 13 addresses: 52 in all; each node asks for 30.
        const settle = (p: Promise<{ ip: string }>) => p.then((l) => l.ip, (e) => e as CniError);
        const [gotA, gotB] = await Promise.all([
          Promise.all(
            Array.from({ length: 30 }, (_, i) => settle(va.allocate(owner(`a${i}`), pod(`a${i}`)))),
          ),
          Promise.all(
            Array.from({ length: 30 }, (_, i) => settle(vb.allocate(owner(`b${i}`), pod(`b${i}`)))),
          ),
        ]);
        const ips = [...gotA, ...gotB].filter((x): x is string => typeof x === "string");
        assertEquals(new Set(ips).size, ips.length, "no address twice");
        // Demand (60) exceeds the pool (52): every block gets claimed, and a node refuses only
        // once its own blocks are full, with code 101.
        assertEquals(a.stats().blocks.length + b.stats().blocks.length, 4);
        for (const [ipam, got] of [[a, gotA], [b, gotB]] as const) {
          const capacity = ipam.stats().blocks.length * 13;
          assertEquals(got.filter((x) => typeof x === "string").length, Math.min(30, capacity));
          for (const e of got.filter((x) => x instanceof CniError) as CniError[]) {
            assertEquals(e.code, 101, e.message);
          }
        }
        const blocksA = a.stats().blocks;
        const blocksB = b.stats().blocks;
        assertEquals(blocksA.filter((x) => blocksB.includes(x)), [], "no block held by both");
        assert(a.stats().claimRaces + b.stats().claimRaces > 0, "the nodes did race");
        await Promise.all([a.flush(), b.flush()]);
        for (const obj of await env.blocks()) {
          const mine = obj.spec!.node === env.node("n1") ? blocksA : blocksB;
          assert(mine.includes(obj.spec!.cidr), `${obj.spec!.cidr} belongs to ${obj.spec!.node}`);
        }
      }),
  ));

Deno.test("a block changed by someone else is re-read and written again (409 then retry)", () =>
  withPool(
    { cidrs: [freshCidr24()], blockSize: { ipv4: 28 } },
    (env) =>
      withTempDir(async (dir) => {
        const ipam = await env.open("n1", dir);
        const [v4] = ipam.allocators();
        await v4.allocate(owner(1), pod(1));
        await ipam.flush();
        // Someone else updates the block: the node's copy is now stale.
        const [obj] = await env.blocks();
        await env.k.client.update(IPBLOCKS, {
          ...obj,
          metadata: { ...obj.metadata, labels: { ...obj.metadata!.labels, touched: "yes" } },
        });
        const l2 = await v4.allocate(owner(2), pod(2));
        await ipam.flush(AbortSignal.timeout(10_000));
        assert(ipam.stats().conflicts >= 1, "the stale write met a 409");
        const [after] = await env.blocks();
        assertEquals(after.metadata!.labels!.touched, "yes");
        assert(after.spec!.allocations!.some((a) => a.ip === l2.ip));
      }),
  ));

Deno.test("a burst of allocations costs at most one block write each", () =>
  withPool(
    { cidrs: [freshCidr24()], blockSize: { ipv4: 26 } },
    (env) =>
      withTempDir(async (dir) => {
        const ipam = await env.open("n1", dir);
        const [v4] = ipam.allocators();
        await Promise.all(Array.from({ length: 50 }, (_, i) => v4.allocate(owner(i), pod(i))));
        await ipam.flush(AbortSignal.timeout(10_000));
        const { writes } = ipam.stats();
        assert(writes >= 1 && writes <= 50, `${writes} writes for 50 allocations`);
        const [obj] = await env.blocks();
        assertEquals(obj.spec!.allocations!.length, 50);
      }),
  ));

Deno.test("an empty block is given back after the grace period; the node's first block stays", () =>
  withPool(
    { cidrs: [freshCidr24()], blockSize: { ipv4: 29 } },
    (env) =>
      withTempDir(async (dir) => {
        const ipam = await env.open("n1", dir, { releaseAfterMs: 200 });
        const [v4] = ipam.allocators();
        for (let i = 0; i < 12; i++) await v4.allocate(owner(i), pod(i));
        assertEquals(ipam.stats().blocks.length, 3);
        const first = ipam.stats().blocks[0];
        for (let i = 0; i < 12; i++) await v4.release(owner(i));
        await until(() => ipam.stats().released === 2);
        assertEquals(ipam.stats().blocks, [first]);
        const removed = env.gateways.get("n1")!.filter((g) => g.startsWith("-"));
        assertEquals(removed.length, 2);
        await until(async () => (await env.blocks()).length === 1);
        assertEquals((await env.blocks())[0].spec!.cidr, first);
        // The next allocation comes from the kept block.
        assert(inAny((await v4.allocate(owner("n"), pod("n"))).ip, [first]));
      }),
  ));

Deno.test("a block of a pool the node no longer uses keeps its addresses, hands out none, and is given back once empty", () =>
  withPool(
    { cidrs: [freshCidr24()], blockSize: { ipv4: 28 } },
    (env) =>
      withTempDir(async (dir) => {
        // The node used another pool before its config named this one.
        const old = `old-${env.pool}`;
        const oldCidr = freshCidr24();
        await env.k.client.create(IPPOOLS, {
          metadata: { name: old },
          spec: { cidrs: [oldCidr], blockSize: { ipv4: 28 } },
        } as IpPoolObject);
        try {
          await until(() => !!env.map.pool(old));
          const before = await env.open("n1", dir, { pools: [old] });
          const kept = await before.allocators()[0].allocate(owner(1), pod(1));
          assert(inAny(kept.ip, [oldCidr]), `${kept.ip} in ${oldCidr}`);
          await before.flush(AbortSignal.timeout(10_000));
          await before.close();
          const [oldBlock] = before.stats().blocks;

          const ipam = await env.open("n1", dir, { releaseAfterMs: 200 });
          const [v4] = ipam.allocators();
          // A block of the configured pool is claimed at start, beside the old one.
          const [current] = ipam.stats().blocks.filter((b) => b !== oldBlock);
          assert(current, `no block of ${env.pool} claimed: ${ipam.stats().blocks}`);
          assertEquals(ipam.stats().blocks.sort(), [oldBlock, current].sort());
          assertEquals(v4.addressOf(owner(1)), kept.ip, "the running pod keeps its address");
          const fresh = await Promise.all([2, 3, 4].map((i) => v4.allocate(owner(i), pod(i))));
          for (const f of fresh) assert(inAny(f.ip, [current]), `${f.ip} not in ${current}`);
          // Every free address the node can hand out is in the configured pool's block.
          assertEquals(v4.free, 16 - 3 - 3);
          // Its last address released, the old block is given back; the current one stays.
          assertEquals(await v4.release(owner(1)), kept.ip);
          await until(() => ipam.stats().released === 1);
          assertEquals(ipam.stats().blocks, [current]);
          assert(
            env.gateways.get("n1")!.includes(
              `-${formatIp(addToIp(parseCidr(oldBlock).network, 1n))}/28`,
            ),
            `the old gateway stays on the bridge: ${env.gateways.get("n1")}`,
          );
          await until(async () => (await env.blocks(old)).length === 0);
        } finally {
          for (const b of await env.blocks(old)) {
            await env.k.client.delete(IPBLOCKS, undefined, b.metadata!.name!).catch(() => {});
          }
          await env.k.client.delete(IPPOOLS, undefined, old).catch(() => {});
        }
      }),
  ));

Deno.test("close: a write under way finishes and nothing follows it: a block deleted meanwhile is not re-created", () =>
  withPool(
    { cidrs: [freshCidr24()], blockSize: { ipv4: 28 } },
    (env) =>
      withTempDir(async (dir) => {
        // The block's next update waits at this gate, as a write the API is slow to answer.
        const gate = Promise.withResolvers<void>();
        let gating = false;
        const inUpdate = Promise.withResolvers<void>();
        const creates: string[] = [];
        const api = {
          ...env.api,
          create: (b: IpBlockObject) => {
            creates.push(b.metadata!.name!);
            return env.api.create(b);
          },
          update: async (b: IpBlockObject) => {
            // Only the writes after the gate is set (not one the claim at start may bring).
            if (gating) {
              inUpdate.resolve();
              await gate.promise;
            }
            return env.api.update(b);
          },
        };
        const ipam = await env.open("n1", dir, { api });
        assertEquals(creates.length, 1, "the block claimed at start");
        gating = true;
        await ipam.allocators()[0].allocate(owner(1), pod(1));
        await inUpdate.promise;
        const closed = ipam.close();
        // Meanwhile the block's object goes (as the test's or an operator's clean-up).
        const [obj] = await env.blocks();
        await env.k.client.delete(IPBLOCKS, undefined, obj.metadata!.name!);
        gate.resolve();
        await closed;
        assertEquals(creates.length, 1, "the block was re-created after close");
        assertEquals(await env.blocks(), []);
      }),
  ));

Deno.test("close: a writer backing off after a failed write does not keep close waiting", () =>
  withPool(
    { cidrs: [freshCidr24()], blockSize: { ipv4: 28 } },
    (env) =>
      withTempDir(async (dir) => {
        let failed = () => {};
        const failing = new Promise<void>((r) => failed = r);
        const api = {
          ...env.api,
          update: () => {
            failed();
            return Promise.reject(new Error("the API is unreachable"));
          },
        };
        const ipam = await env.open("n1", dir, { api });
        await ipam.allocators()[0].allocate(owner(1), pod(1));
        await failing;
        // The writer now sleeps before trying again (half a second, doubling up to 30 s).
        await new Promise((r) => setTimeout(r, 50));
        assertEquals(ipam.stats().pending, 1);
        let timer: ReturnType<typeof setTimeout> | undefined;
        const settled = await Promise.race([
          ipam.close().then(() => true),
          new Promise<false>((r) => timer = setTimeout(() => r(false), 20_000)),
        ]);
        clearTimeout(timer);
        assert(settled, "close waited for the back-off (or hung)");
      }),
  ));

Deno.test("restart: the node's files win over its block objects, and a lost directory adopts the object's allocations", () =>
  withPool(
    { cidrs: [freshCidr24()], blockSize: { ipv4: 28 } },
    (env) =>
      withTempDir(async (dir) => {
        const first = await env.open("n1", dir);
        const [v4] = first.allocators();
        const held = await Promise.all([1, 2, 3].map((i) => v4.allocate(owner(i), pod(i))));
        await first.flush();
        await first.close();
        // While the daemon is down the object gains an allocation the node never made.
        const [obj] = await env.blocks();
        const bogus = held[0].ip.replace(/\d+$/, (d) => String(Number(d) + 10));
        await env.k.client.update(IPBLOCKS, {
          ...obj,
          spec: {
            ...obj.spec!,
            allocations: [...obj.spec!.allocations!, {
              ip: bogus,
              podUID: "u",
              containerID: "ghost",
              ifname: "eth0",
            }],
          },
        } as IpBlockObject);
        const second = await env.open("n1", dir);
        await second.flush(AbortSignal.timeout(10_000));
        const [fixed] = await env.blocks();
        assertEquals(
          fixed.spec!.allocations!.map((a) => a.ip).sort(),
          held.map((l) => l.ip).sort(),
        );
        assertEquals(second.stats().blocks, first.stats().blocks);
        await second.close();
        // The state directory is lost: the object's allocations are adopted, never handed out again.
        await Deno.remove(`${dir}/ipam`, { recursive: true });
        const third = await env.open("n1", dir);
        const [v4b] = third.allocators();
        for (const [i, l] of held.entries()) assertEquals(v4b.addressOf(owner(i + 1)), l.ip);
        const fresh = await Promise.all(
          Array.from({ length: 10 }, (_, i) => v4b.allocate(owner(`f${i}`), pod(`f${i}`))),
        );
        for (const f of fresh) assert(!held.some((h) => h.ip === f.ip), `${f.ip} handed out twice`);
      }),
  ));

Deno.test("restart: a block whose object vanished while it held addresses is claimed again", () =>
  withPool(
    { cidrs: [freshCidr24()], blockSize: { ipv4: 28 } },
    (env) =>
      withTempDir(async (dir) => {
        const first = await env.open("n1", dir);
        const [v4] = first.allocators();
        const l = await v4.allocate(owner(1), pod(1));
        await first.flush();
        await first.close();
        const [obj] = await env.blocks();
        await env.k.client.delete(IPBLOCKS, undefined, obj.metadata!.name!);
        await env.untilBlocks(0);
        const second = await env.open("n1", dir);
        await second.flush(AbortSignal.timeout(10_000));
        const objs = await env.blocks();
        assertEquals(objs.length, 1);
        assertEquals(objs[0].spec!.node, env.node("n1"));
        assertEquals(objs[0].spec!.allocations!.map((a) => a.ip), [l.ip]);
      }),
  ));

Deno.test("restart: a block another node took meanwhile is reported lost and never allocated in", () =>
  withPool(
    { cidrs: [freshCidr24()], blockSize: { ipv4: 28 } },
    (env) =>
      withTempDir(async (dir) => {
        const first = await env.open("n1", `${dir}/n1`);
        const [v4] = first.allocators();
        const l = await v4.allocate(owner(1), pod(1));
        await first.flush();
        await first.close();
        const [obj] = await env.blocks();
        await env.k.client.delete(IPBLOCKS, undefined, obj.metadata!.name!);
        await env.k.client.create(IPBLOCKS, {
          metadata: { name: obj.metadata!.name },
          spec: { ...obj.spec!, node: env.node("n9"), allocations: [] },
        } as IpBlockObject);
        const second = await env.open("n1", `${dir}/n1`);
        assertEquals(second.stats().lost, [obj.spec!.cidr]);
        const [v4b] = second.allocators();
        assertEquals(v4b.addressOf(owner(1)), l.ip, "the pod keeps its address until deleted");
        const next = await v4b.allocate(owner(2), pod(2));
        assert(!inAny(next.ip, [obj.spec!.cidr]), `${next.ip} allocated in a lost block`);
        assertEquals(await v4b.release(owner(1)), l.ip);
      }),
  ));

Deno.test("overlapping pools never give two nodes overlapping blocks, however their claims interleave", () => {
  const base = freshCidr24().replace(/0\/24$/, "0/26");
  return withPool({ cidrs: [base], blockSize: { ipv4: 26 } }, async (env) => {
    // The probe's pair: one pool hands out the /26 whole, the other /28s of the same /26.
    const other = await env.extraPool("small", { cidrs: [base], blockSize: { ipv4: 28 } });
    // Views that never show new blocks: only the API can tell the nodes apart.
    const stale = {
      pool: (n: string) => env.map.pool(n),
      blocks: (): BlockSummary[] => [],
      pools: () => env.map.pools(),
    };
    for (let round = 0; round < 5; round++) {
      await withTempDir(async (dir) => {
        const [a, b] = await Promise.all([
          env.open(`a${round}`, `${dir}/a`, { view: stale }),
          env.open(`b${round}`, `${dir}/b`, { view: stale, pools: [other] }),
        ]);
        const settle = (p: Promise<{ ip: string }>) => p.then((l) => l.ip, () => undefined);
        const [va] = a.allocators(), [vb] = b.allocators();
        const ips = (await Promise.all([
          ...[1, 2, 3].map((i) => settle(va.allocate(owner(`a${i}`), pod(`a${i}`)))),
          ...[1, 2, 3].map((i) => settle(vb.allocate(owner(`b${i}`), pod(`b${i}`)))),
        ])).filter((ip): ip is string => !!ip);
        assertEquals(new Set(ips).size, ips.length, `round ${round}: no address twice: ${ips}`);
        const held = [...a.stats().blocks, ...b.stats().blocks].map((c) => parseCidr(c));
        for (let i = 0; i < held.length; i++) {
          for (let j = i + 1; j < held.length; j++) {
            assert(
              !cidrContains(held[i], held[j].network) && !cidrContains(held[j], held[i].network),
              `round ${round}: blocks ${a.stats().blocks} and ${b.stats().blocks} overlap`,
            );
          }
        }
        assert(held.length >= 1, "one of the nodes got the range");
        await Promise.all([a.close(), b.close()]);
        for (const obj of [...await env.blocks(), ...await env.blocks(other)]) {
          await env.k.client.delete(IPBLOCKS, undefined, obj.metadata!.name!);
        }
      });
    }
  });
});

Deno.test("a node whose pools overlap another pool reports it, and says why no block is left", () => {
  const base = freshCidr24().replace(/0\/24$/, "0/28");
  return withPool({ cidrs: [base], blockSize: { ipv4: 28 } }, async (env) => {
    const other = await env.extraPool("twin", { cidrs: [base], blockSize: { ipv4: 28 } });
    await withTempDir(async (dir) => {
      const a = await env.open("a", `${dir}/a`);
      await env.untilBlocks(1);
      const b = await env.open("b", `${dir}/b`, { pools: [other] });
      const e = await assertRejects(() => b.allocators()[0].allocate(owner(1), pod(1)), CniError);
      assertEquals(e.code, 101);
      assert(e.details?.includes(`IPPool ${other} has no free block left`), e.details);
      assertEquals(b.stats().overlappingPools.length, 1, String(b.stats().overlappingPools));
      assert(b.stats().overlappingPools[0].includes("overlaps"));
      await Promise.all([a.close(), b.close()]);
    });
  });
});

Deno.test("a block deleted by hand while its node runs is written again at once, and no other node can take it", () =>
  withPool(
    { cidrs: [freshCidr24().replace(/0\/24$/, "0/28")], blockSize: { ipv4: 28 } },
    (env) =>
      withTempDir(async (dir) => {
        const a = await env.open("n1", `${dir}/a`);
        const [va] = a.allocators();
        const held = await Promise.all([1, 2].map((i) => va.allocate(owner(i), pod(i))));
        await a.flush(AbortSignal.timeout(10_000));
        const [before] = await env.blocks();
        await env.k.client.delete(IPBLOCKS, undefined, before.metadata!.name!);
        // The owner notices from its watch and writes the object again, allocations and all.
        await until(async () => {
          const [again] = await env.blocks();
          return again?.metadata?.uid !== before.metadata!.uid &&
            again?.spec?.allocations?.length === 2;
        });
        const [again] = await env.blocks();
        assertEquals(again.spec!.node, env.node("n1"));
        assertEquals(
          again.spec!.allocations!.map((x) => x.ip).sort(),
          held.map((l) => l.ip).sort(),
        );
        // The pool's only block is taken again: another node gets no address of it.
        await env.untilBlocks(1);
        const b = await env.open("n2", `${dir}/b`);
        const e = await assertRejects(() => b.allocators()[0].allocate(owner(9), pod(9)), CniError);
        assertEquals(e.code, 101);
        assertEquals(b.stats().blocks, []);
        // And the owner still allocates in it.
        assert(inAny((await va.allocate(owner(3), pod(3))).ip, a.stats().blocks));
      }),
  ));

Deno.test("restart: allocations adopted from a block object are kept by the sweep of unrecorded owners, and handed out to nobody", () =>
  withPool(
    { cidrs: [freshCidr24()], blockSize: { ipv4: 28 } },
    (env) =>
      withTempDir(async (dir) => {
        // The probe's case: the block object records pods whose node-local files are not here
        // (its spec.node edited, or a second daemon of the same name): no attachment record
        // names them on this node.
        const first = await env.open("n1", `${dir}/first`);
        const [v4] = first.allocators();
        const held = await Promise.all([1, 2, 3].map((i) => v4.allocate(owner(i), pod(i))));
        await first.flush();
        await first.close();
        const adopter = await env.open("n1", `${dir}/other`);
        const allocators = adopter.allocators();
        const bridge = new BridgeDriver({
          allocators,
          plumber: { bridgePorts: () => Promise.resolve([]) } as unknown as Plumber,
          bridge: "unused0",
          mtu: 1500,
        });
        // The start-up reconcile (and every sweep) releases the owners `orphans` names.
        const { owners } = await bridge.orphans([], []);
        assertEquals(owners, [], "adopted owners are not orphans");
        for (const [i, l] of held.entries()) {
          assertEquals(allocators[0].addressOf(owner(i + 1)), l.ip);
        }
        const fresh = await Promise.all(
          Array.from({ length: 8 }, (_, i) => allocators[0].allocate(owner(`f${i}`), pod(`f${i}`))),
        );
        for (const f of fresh) assert(!held.some((h) => h.ip === f.ip), `${f.ip} handed out twice`);
        // A DEL for an adopted container releases it as any other.
        assertEquals(await allocators[0].release(owner(1)), held[0].ip);
        // Adopted pods the API no longer has are released by the sweep; the others stay.
        const asked: string[] = [];
        const released = await adopter.releaseAdoptedOfGonePods((p) => {
          asked.push(p.name);
          return Promise.resolve(p.name === "pod-2");
        });
        assertEquals(released, [held[1].ip]);
        assertEquals(asked.sort(), ["pod-2", "pod-3"]);
        assertEquals(allocators[0].addressOf(owner(3)), held[2].ip);
        // Owners this node allocated and recorded nowhere are still orphans.
        assertEquals((await bridge.orphans([], [])).owners.length, 8);
      }),
  ));

Deno.test("restart: a block object lost while the node was down is written again naming each allocation's pod, from the node's records", () =>
  withPool(
    { cidrs: [freshCidr24()], blockSize: { ipv4: 28 } },
    (env) =>
      withTempDir(async (dir) => {
        // What the node's attachment records say of each container.
        const records = new Map([1, 2].map((i) => [`c${i}/eth0`, pod(i)]));
        const podOf = (o: { containerId: string; ifname: string }) =>
          records.get(`${o.containerId}/${o.ifname}`);
        const first = await env.open("n1", dir, { podOf });
        const [v4] = first.allocators();
        const held = await Promise.all([1, 2].map((i) => v4.allocate(owner(i), pod(i))));
        await first.flush();
        await first.close();
        const [obj] = await env.blocks();
        await env.k.client.delete(IPBLOCKS, undefined, obj.metadata!.name!);
        await env.untilBlocks(0);
        const second = await env.open("n1", dir, { podOf });
        await second.flush(AbortSignal.timeout(10_000));
        const [again] = await env.blocks();
        assertEquals(
          again.spec!.allocations!.map((a) => [a.ip, a.podUID, a.namespace, a.name]).sort(),
          held.map((l, i) => [l.ip, `uid-${i + 1}`, "default", `pod-${i + 1}`]).sort(),
        );
      }),
  ));

Deno.test("a block re-pointed by hand to another node: the new node adopts what it records, the old keeps its pods' addresses and allocates no more in it; nothing is handed out twice", () =>
  withPool(
    { cidrs: [freshCidr24().replace(/0\/24$/, "0/27")], blockSize: { ipv4: 28 } },
    (env) =>
      withTempDir(async (dir) => {
        const a = await env.open("n1", `${dir}/a`);
        const b = await env.open("n2", `${dir}/b`);
        await env.untilBlocks(2);
        const [va] = a.allocators(), [vb] = b.allocators();
        const held = await Promise.all(
          [1, 2].map((i) => va.allocate(owner(`a${i}`), pod(`a${i}`))),
        );
        await a.flush(AbortSignal.timeout(10_000));
        const [aBlock] = a.stats().blocks;
        const obj = (await env.blocks()).find((x) => x.spec!.cidr === aBlock)!;
        await env.k.client.update(
          IPBLOCKS,
          { ...obj, spec: { ...obj.spec!, node: env.node("n2") } } as IpBlockObject,
        );
        await until(() => b.stats().blocks.includes(aBlock) && a.stats().lost.includes(aBlock));
        // n2 hands out none of n1's pods' addresses, in the block it was given or its own.
        const more = await Promise.all(
          Array.from(
            { length: 20 },
            (_, i) => vb.allocate(owner(`b${i}`), pod(`b${i}`)).then((l) => l.ip, () => ""),
          ),
        );
        for (const h of held) assert(!more.includes(h.ip), `${h.ip} handed out again`);
        // n1 allocates nowhere in it any more.
        const fresh = await va.allocate(owner("a3"), pod("a3")).then((l) => l.ip, () => "");
        assert(!fresh || !inAny(fresh, [aBlock]), `${fresh} in the block n1 lost`);
        // n1's pods go: its files of the block go with them.
        for (const i of [1, 2]) await va.release(owner(`a${i}`));
        await until(() => !a.stats().lost.includes(aBlock));
        // n2 releases the adopted allocations once their pods are gone from the API.
        const released = await b.releaseAdoptedOfGonePods(() => Promise.resolve(true));
        assertEquals(released.sort(), held.map((h) => h.ip).sort());
        await b.flush(AbortSignal.timeout(10_000));
        const after = (await env.blocks()).find((x) => x.spec!.cidr === aBlock)!;
        for (const h of held) {
          assert(!after.spec!.allocations!.some((x) => x.ip === h.ip), `${h.ip} still recorded`);
        }
      }),
  ));
