import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import { cidrContains, formatCidr, formatIp, parseCidr } from "../../../daemon/ipam/cidr.ts";
import {
  blockName,
  blockRange,
  nextFreeBlock,
  parsePool,
  PoolError,
} from "../../../daemon/ipam/ip_pools.ts";
import { LocalPool } from "../../../daemon/ipam/local_pool.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";

const pool = (spec: Record<string, unknown>) => ({ metadata: { name: "p" }, spec });

Deno.test("a pool parses into one family per CIDR, IPv4 first, with default block sizes", () => {
  const fams = parsePool(pool({ cidrs: ["fd00:10::/56", "10.244.0.0/16"] }));
  assertEquals(fams.map((f) => [f.family, formatCidr(f.cidr), f.blockPrefix]), [
    [4, "10.244.0.0/16", 26],
    [6, "fd00:10::/56", 122],
  ]);
});

Deno.test("a pool that cannot be used names itself and the reason", () => {
  const bad: [Record<string, unknown>, string][] = [
    [{ cidrs: [] }, "spec.cidrs is empty"],
    [{ cidrs: ["10.0.0.0/16", "10.1.0.0/16"] }, "two IPv4 CIDRs"],
    [{ cidrs: ["10.0.0.0/24"], blockSize: { ipv4: 20 } }, "does not fit"],
    [{ cidrs: ["10.0.0.0/24"], blockSize: { ipv4: 31 } }, "does not fit"],
    [{ cidrs: ["10.0.0.0/33"] }, "spec.cidrs"],
    [{ cidrs: ["10.0.0.0/24"], excluded: ["10.0.0.9-10.0.0.3"] }, "spec.excluded"],
  ];
  for (const [spec, why] of bad) {
    const e = assertThrows(() => parsePool(pool(spec)), PoolError);
    assertEquals(e.message.startsWith("IPPool p: "), true, e.message);
    assertEquals(e.message.includes(why), true, `${e.message} should say ${why}`);
  }
});

Deno.test("a block's name is its CIDR as a valid object name", () => {
  assertEquals(blockName(parseCidr("10.244.0.64/26")), "10-244-0-64-26");
  assertEquals(blockName(parseCidr("fd00:10:244::40/122")), "fd00-10-244--40-122");
  const dns1123 = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
  assertEquals(dns1123.test(blockName(parseCidr("fd00::/122"))), true);
});

Deno.test("a block hands out neither its network, gateway, broadcast nor excluded addresses", async () => {
  const [fam] = parsePool(
    pool({ cidrs: ["10.9.0.0/24"], blockSize: { ipv4: 29 }, excluded: ["10.9.0.4-10.9.0.5"] }),
  );
  const range = blockRange(parseCidr("10.9.0.0/29"), fam.excluded)!;
  assertEquals(formatIp(range.gateway), "10.9.0.1");
  await withTempDir(async (dir) => {
    const local = await LocalPool.open(dir, range);
    assertEquals(local.free, 3);
    const got: string[] = [];
    for (let i = 0; i < 3; i++) {
      got.push(await local.allocate({ containerId: `c${i}`, ifname: "eth0" }));
    }
    assertEquals(got.sort(), ["10.9.0.2", "10.9.0.3", "10.9.0.6"]);
    assertEquals(local.free, 0);
  });
  // A block whose gateway or every address is excluded is never used.
  assertEquals(
    blockRange(parseCidr("10.9.0.8/29"), [{ start: 0x0a090009n, end: 0x0a090009n }]),
    undefined,
  );
  assertEquals(
    blockRange(parseCidr("10.9.0.8/29"), [{ start: 0x0a09000an, end: 0x0a09000en }]),
    undefined,
  );
});

Deno.test("the next free block skips taken, overlapping and wholly excluded blocks", () => {
  const [fam] = parsePool(
    pool({ cidrs: ["10.9.0.0/24"], blockSize: { ipv4: 26 }, excluded: ["10.9.0.128/26"] }),
  );
  const taken = [parseCidr("10.9.0.0/26"), parseCidr("10.9.0.200/30")];
  const seen = new Set<string>();
  for (let i = 0; i < 50; i++) {
    const block = nextFreeBlock(fam, taken, `node-${i}`);
    seen.add(formatCidr(block!));
  }
  // 10.9.0.0/26 taken, 10.9.0.128/26 excluded, 10.9.0.192/26 overlaps a taken /30.
  assertEquals([...seen], ["10.9.0.64/26"]);
  assertEquals(nextFreeBlock(fam, [...taken, parseCidr("10.9.0.64/26")], "n"), undefined);
});

Deno.test("nodes start their search for a block at different places", () => {
  const [fam] = parsePool(pool({ cidrs: ["10.0.0.0/16"] }));
  const firsts = new Set(
    Array.from({ length: 20 }, (_, i) => formatCidr(nextFreeBlock(fam, [], `node-${i}`)!)),
  );
  assertEquals(firsts.size > 15, true, `${firsts.size} distinct first blocks of 20 nodes`);
});

Deno.test("an IPv6 pool with astronomically many blocks still finds one quickly", () => {
  const [fam] = parsePool(pool({ cidrs: ["fd00::/48"] }));
  const block = nextFreeBlock(fam, [], "n1")!;
  assertEquals(block.prefix, 122);
  assertEquals(cidrContains(fam.cidr, block.network), true, formatCidr(block));
});
