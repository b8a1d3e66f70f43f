import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { parseCidr } from "../../../daemon/ipam/cidr.ts";
import { defaultRange, LocalPool } from "../../../daemon/ipam/local_pool.ts";
import { RangeAllocator } from "../../../daemon/ipam/allocator.ts";
import { CniError } from "../../../lib/cni/errors.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";
import { ManualClock, settled } from "./_clock.ts";
import { freshCidr24, withPool } from "./_pools.ts";

const owner = (n: number) => ({ containerId: `c${n}`, ifname: "eth0" });
const DELAY = 5000;

/** A full /29 (.2-.6) on a manual clock, quarantine `DELAY`. */
async function fullRange(dir: string, clock: ManualClock) {
  const pool = await LocalPool.open(dir, defaultRange(parseCidr("10.0.0.0/29")), {
    reuseDelayMs: DELAY,
    clock,
  });
  const alloc = new RangeAllocator(pool);
  const ips: string[] = [];
  for (let i = 0; i < 5; i++) ips.push((await alloc.allocate(owner(i))).ip);
  assertEquals(pool.free, 0);
  return { pool, alloc, ips };
}

Deno.test("an ADD whose range's only free address is quarantined waits and gets it as soon as its quarantine ends", async () => {
  await withTempDir(async (dir) => {
    const clock = new ManualClock();
    const { alloc, ips } = await fullRange(dir, clock);
    const released = clock.now();
    await alloc.release(owner(2));
    const add = alloc.allocate(owner(9), undefined, { until: clock.now() + 60_000 });
    await clock.untilSleeping(1, add, "the ADD in a range whose only free address is quarantined");
    assertEquals(clock.sleeping, [released + DELAY], "it sleeps until the quarantine ends");
    clock.advanceTo(released + DELAY - 1);
    assertEquals(await settled(add), false, "answered before the quarantine ended");
    clock.advanceTo(released + DELAY);
    assertEquals((await add).ip, ips[2], "the address out of quarantine");
  });
});

Deno.test("an ADD whose deadline comes before the quarantine ends gets 101 naming the quarantine", async () => {
  await withTempDir(async (dir) => {
    const clock = new ManualClock();
    const { alloc } = await fullRange(dir, clock);
    await alloc.release(owner(2));
    const err = await assertRejects(
      () => alloc.allocate(owner(9), undefined, { until: clock.now() + DELAY - 1 }),
      CniError,
    );
    assertEquals(err.code, 101);
    assert(err.message.includes("reuse quarantine"), err.message);
    assert(err.message.includes("ipam.reuseDelaySeconds"), err.message);
    assert(err.message.includes("deadline"), err.message);
    assertEquals(clock.sleeping, [], "nothing waited");
  });
});

Deno.test("of two ADDs waiting for the quarantine, one gets the first address out, the other waits for the next", async () => {
  await withTempDir(async (dir) => {
    const clock = new ManualClock();
    const { alloc, ips } = await fullRange(dir, clock);
    const t0 = clock.now();
    await alloc.release(owner(1));
    clock.advanceTo(t0 + 1000);
    await alloc.release(owner(3));
    const wait = { until: t0 + 60_000 };
    const a = alloc.allocate(owner(8), undefined, wait);
    const b = alloc.allocate(owner(9), undefined, wait);
    await clock.untilSleeping(2, Promise.race([a, b]), "two ADDs of a full range");
    clock.advanceTo(t0 + DELAY);
    const first = await Promise.race([a.then(() => "a"), b.then(() => "b")]);
    const [winner, loser] = first === "a" ? [a, b] : [b, a];
    assertEquals((await winner).ip, ips[1]);
    await clock.untilSleeping(1, loser, "the ADD that lost the first address");
    assertEquals(clock.sleeping, [t0 + 1000 + DELAY], "it waits for the second");
    clock.advanceTo(t0 + 1000 + DELAY);
    assertEquals((await loser).ip, ips[3]);
  });
});

Deno.test("of two ADDs waiting for one quarantined address, the one that does not get it answers 101", async () => {
  await withTempDir(async (dir) => {
    const clock = new ManualClock();
    const { alloc, ips } = await fullRange(dir, clock);
    const t0 = clock.now();
    await alloc.release(owner(1));
    const wait = { until: t0 + 60_000 };
    const outcomes = [8, 9].map((n) =>
      alloc.allocate(owner(n), undefined, wait).then((l) => l.ip, (e: CniError) => e.code)
    );
    await clock.untilSleeping(2, Promise.race(outcomes), "two ADDs of a full range");
    clock.advanceTo(t0 + DELAY);
    assertEquals((await Promise.all(outcomes)).sort(), [101, ips[1]].sort());
  });
});

Deno.test("an ADD waiting for the quarantine holds up no DEL or other ADD of its range, and ends when its requester hangs up", async () => {
  await withTempDir(async (dir) => {
    const clock = new ManualClock();
    const { alloc, pool } = await fullRange(dir, clock);
    await alloc.release(owner(2));
    const hangUp = new AbortController();
    const add = alloc.allocate(owner(9), undefined, {
      until: clock.now() + 60_000,
      signal: hangUp.signal,
    });
    await clock.untilSleeping(1, add, "the ADD of a full range");
    // Meanwhile: a DEL and an ADD that does not wait are answered at once.
    assertEquals(await alloc.release(owner(3)), "10.0.0.5");
    const other = await assertRejects(() => alloc.allocate(owner(10)), CniError);
    assertEquals(other.code, 101);
    assertEquals(pool.free, 0);
    hangUp.abort(new Error("the runtime hung up"));
    const err = await assertRejects(() => add);
    assertEquals((err as Error).message, "the runtime hung up");
    assertEquals(alloc.addressOf(owner(9)), undefined, "nothing allocated for it");
  });
});

Deno.test("without a deadline an allocation does not wait for the quarantine", async () => {
  await withTempDir(async (dir) => {
    const clock = new ManualClock();
    const { alloc } = await fullRange(dir, clock);
    await alloc.release(owner(2));
    const err = await assertRejects(() => alloc.allocate(owner(9)), CniError);
    assertEquals(err.code, 101);
    assert(err.details.includes("quarantine"), err.details);
  });
});

Deno.test("a pool node whose blocks are full and whose pool has no block left waits for its quarantined address", () =>
  withPool(
    { cidrs: [freshCidr24().replace(/0\/24$/, "0/29")], blockSize: { ipv4: 29 } },
    (env) =>
      withTempDir(async (dir) => {
        // One /29 block of 5 addresses, and no other block in the pool.
        const clock = new ManualClock();
        const ipam = await env.open("n1", dir, { reuseDelayMs: DELAY, clock });
        const [v4] = ipam.allocators();
        const ips: string[] = [];
        for (let i = 0; i < 5; i++) ips.push((await v4.allocate(owner(i))).ip);
        const full = await assertRejects(() => v4.allocate(owner(7)), CniError);
        assertEquals(full.code, 101, full.message);
        const released = clock.now();
        await v4.release(owner(4));
        const add = v4.allocate(owner(9), undefined, { until: released + 60_000 });
        await clock.untilSleeping(1, add, "the pool node's ADD");
        assertEquals(clock.sleeping, [released + DELAY]);
        clock.advanceTo(released + DELAY);
        assertEquals((await add).ip, ips[4]);
      }),
  ));
