import { assertEquals, assertNotEquals, assertRejects } from "deno-std/assert/mod.js";
import { parseCidr } from "../../../daemon/ipam/cidr.ts";
import { defaultRange, LocalPool } from "../../../daemon/ipam/local_pool.ts";
import { CniError } from "../../../lib/cni/errors.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";

const owner = (n: number) => ({ containerId: `c${n}`, ifname: "eth0" });

Deno.test("the default range skips network, gateway and broadcast", () => {
  const r = defaultRange(parseCidr("10.0.0.0/29"));
  assertEquals([r.gateway.value, r.start.value, r.end.value].map(Number), [
    0x0a000001,
    0x0a000001,
    0x0a000006,
  ]);
});

Deno.test("addresses are distinct, stable per owner, and exhaustion is code 101", async () => {
  await withTempDir(async (dir) => {
    const pool = await LocalPool.open(dir, defaultRange(parseCidr("10.0.0.0/29")));
    const got = [];
    for (let i = 0; i < 5; i++) got.push(await pool.allocate(owner(i)));
    assertEquals(got, ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]);
    assertEquals(await pool.allocate(owner(2)), "10.0.0.4");
    const err = await assertRejects(() => pool.allocate(owner(9)), CniError);
    assertEquals(err.code, 101);
    assertEquals(pool.free, 0);
  });
});

Deno.test("concurrent allocations never hand out the same address", async () => {
  await withTempDir(async (dir) => {
    const pool = await LocalPool.open(dir, defaultRange(parseCidr("10.0.0.0/24")));
    const ips = await Promise.all(Array.from({ length: 50 }, (_, i) => pool.allocate(owner(i))));
    assertEquals(new Set(ips).size, 50);
  });
});

Deno.test("a reopened pool remembers allocations and releases", async () => {
  await withTempDir(async (dir) => {
    const range = defaultRange(parseCidr("10.0.0.0/24"));
    const first = await LocalPool.open(dir, range);
    const a = await first.allocate(owner(1));
    const b = await first.allocate(owner(2));
    assertEquals(await first.release(owner(1)), a);
    assertEquals(await first.release(owner(1)), undefined);
    const again = await LocalPool.open(dir, range);
    assertEquals(again.addressOf(owner(2)), b);
    assertEquals(again.addressOf(owner(1)), undefined);
    assertNotEquals(await again.allocate(owner(3)), b);
  });
});

Deno.test("an address file made by another process is never handed out twice", async () => {
  await withTempDir(async (dir) => {
    const pool = await LocalPool.open(dir, defaultRange(parseCidr("10.0.0.0/24")));
    await Deno.writeTextFile(`${dir}/10.0.0.2`, "other\neth0");
    assertEquals(await pool.allocate(owner(1)), "10.0.0.3");
  });
});

Deno.test("an allocation file that names no owner keeps its address taken until repaired, then is freed", async () => {
  await withTempDir(async (dir) => {
    const range = defaultRange(parseCidr("10.0.0.0/29"));
    // What a daemon killed between creating the file and writing it left behind.
    await Deno.writeTextFile(`${dir}/10.0.0.2`, "");
    await Deno.writeTextFile(`${dir}/.10.0.0.3.abcd.tmp`, "c9\neth0");
    const pool = await LocalPool.open(dir, range);
    assertEquals(pool.unreadable(), ["10.0.0.2"]);
    assertNotEquals(await pool.allocate(owner(1)), "10.0.0.2");
    assertEquals(await pool.repair(new Map()), { restored: [], freed: ["10.0.0.2"] });
    assertEquals(pool.free, 4);
    const names = [];
    for await (const e of Deno.readDir(dir)) names.push(e.name);
    assertEquals(names.sort(), ["10.0.0.3"]);
  });
});

Deno.test("an unreadable allocation that a record names is given back to that owner", async () => {
  await withTempDir(async (dir) => {
    const range = defaultRange(parseCidr("10.0.0.0/29"));
    await Deno.writeTextFile(`${dir}/10.0.0.4`, "garbage with spaces");
    const pool = await LocalPool.open(dir, range);
    const result = await pool.repair(new Map([["10.0.0.4", owner(7)]]));
    assertEquals(result, { restored: ["10.0.0.4"], freed: [] });
    assertEquals(pool.addressOf(owner(7)), "10.0.0.4");
    assertEquals(await Deno.readTextFile(`${dir}/10.0.0.4`), "c7\neth0");
    const reopened = await LocalPool.open(dir, range);
    assertEquals(reopened.addressOf(owner(7)), "10.0.0.4");
  });
});

Deno.test("an allocation file is never seen empty: it appears with its owner or not at all", async () => {
  await withTempDir(async (dir) => {
    const pool = await LocalPool.open(dir, defaultRange(parseCidr("10.0.0.0/24")));
    const seen: string[] = [];
    const watcher = Deno.watchFs(dir);
    const watching = (async () => {
      for await (const ev of watcher) {
        for (const p of ev.paths) {
          const name = p.slice(p.lastIndexOf("/") + 1);
          if (name.startsWith(".")) continue;
          const text = await Deno.readTextFile(p).catch(() => undefined);
          if (text !== undefined) seen.push(text);
        }
      }
    })();
    await Promise.all(Array.from({ length: 50 }, (_, i) => pool.allocate(owner(i))));
    await new Promise((r) => setTimeout(r, 100));
    watcher.close();
    await watching;
    assertEquals(seen.length > 0, true);
    assertEquals(seen.filter((t) => !/^c\d+\neth0$/.test(t)), []);
  });
});

Deno.test("a released address is not handed out again during its quarantine, then it is", async () => {
  await withTempDir(async (dir) => {
    const pool = await LocalPool.open(dir, defaultRange(parseCidr("10.0.0.0/29")), {
      reuseDelayMs: 300,
    });
    const all = [];
    for (let i = 0; i < 5; i++) all.push(await pool.allocate(owner(i)));
    await pool.release(owner(2));
    assertEquals(pool.free, 0, "the quarantined address does not count as free");
    const err = await assertRejects(() => pool.allocate(owner(7)), CniError);
    assertEquals(err.code, 101);
    assertEquals(err.details.includes("quarantine"), true, err.details);
    await new Promise((r) => setTimeout(r, 350));
    assertEquals(pool.free, 1);
    assertEquals(await pool.allocate(owner(7)), all[2]);
  });
});

Deno.test("while others are free, a just-released address is skipped", async () => {
  await withTempDir(async (dir) => {
    const pool = await LocalPool.open(dir, defaultRange(parseCidr("10.0.0.0/24")), {
      reuseDelayMs: 60_000,
    });
    const first = await pool.allocate(owner(1));
    await pool.release(owner(1));
    for (let i = 2; i < 200; i++) assertNotEquals(await pool.allocate(owner(i)), first);
  });
});
