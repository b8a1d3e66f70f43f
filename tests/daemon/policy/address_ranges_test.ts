// An ipBlock rule's addresses as interval set elements (daemon/policy/address_ranges.ts): each
// block's CIDR less its excepts, blocks added up, and an address lies in the ranges exactly when
// the semantics (compile.ts ipInBlock, any block) say the rule's blocks allow it.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { blockRanges } from "../../../daemon/policy/address_ranges.ts";
import { type AddressBlock, ipInBlock } from "../../../daemon/policy/compile.ts";
import { parseIp } from "../../../daemon/ipam/cidr.ts";

Deno.test("a block less its excepts is the ranges around them, written as prefixes where they are one", () => {
  assertEquals(blockRanges([{ cidr: "10.9.0.7/8", except: ["10.1.0.0/16"] }], 4), [
    "10.0.0.0/16",
    "10.2.0.0-10.255.255.255",
  ]);
  assertEquals(blockRanges([{ cidr: "fd00::/32", except: ["fd00::5/128"] }], 6), [
    "fd00::-fd00::4",
    "fd00::6-fd00:0:ffff:ffff:ffff:ffff:ffff:ffff",
  ]);
  assertEquals(blockRanges([{ cidr: "0.0.0.0/0", except: [] }], 4), ["0.0.0.0/0"]);
  assertEquals(blockRanges([{ cidr: "10.0.0.0/8", except: ["10.0.0.0/7"] }], 4), []);
  assertEquals(blockRanges([{ cidr: "10.0.0.0/8", except: [] }], 6), [], "no IPv6 address");
});

Deno.test("what one block excepts another block of the rule may still allow (the blocks add up)", () => {
  const blocks = [
    { cidr: "10.0.0.0/8", except: ["10.1.0.0/16"] },
    { cidr: "10.1.2.0/24", except: [] },
  ];
  assertEquals(blockRanges(blocks, 4), ["10.0.0.0/16", "10.1.2.0/24", "10.2.0.0-10.255.255.255"]);
});

/** Whether `ip` lies in one of the interval elements. */
function inRanges(ip: string, ranges: string[]): boolean {
  const v = parseIp(ip).value;
  return ranges.some((r) => {
    if (r.includes("-")) {
      const [a, b] = r.split("-");
      return parseIp(a).value <= v && v <= parseIp(b).value;
    }
    const [addr, len] = r.split("/");
    if (!len) return parseIp(addr).value === v;
    return ipInBlock(ip, { cidr: r, except: [] });
  });
}

Deno.test("for random blocks and excepts, an address is in the ranges exactly when some block allows it", () => {
  // A small deterministic generator: the same cases on every run.
  let seed = 42;
  const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
  const prefix = (base: number, len: number) => {
    const v = (base >>> 0) & (len === 0 ? 0 : (~0 << (32 - len)) >>> 0);
    return `${[24, 16, 8, 0].map((s) => (v >>> s) & 255).join(".")}/${len}`;
  };
  for (let c = 0; c < 200; c++) {
    const blocks: AddressBlock[] = Array.from({ length: 1 + rand(3) }, () => {
      const cidr = prefix(0x0a000000 | rand(1 << 16) << 8, 16 + rand(9));
      return {
        cidr,
        except: Array.from(
          { length: rand(5) },
          () => prefix(0x0a000000 | rand(1 << 16) << 8 | rand(256), 20 + rand(13)),
        ),
      };
    });
    const ranges = blockRanges(blocks, 4);
    for (let i = 0; i < 300; i++) {
      // Addresses near the blocks' and excepts' edges, and anywhere in 10.0.0.0/8.
      const edges = blocks.flatMap((b) => [b.cidr, ...b.except]).map((t) => t.split("/")[0]);
      const near = i % 2
        ? parseIp(edges[rand(edges.length)]).value + BigInt(rand(3)) - 1n
        : BigInt(0x0a000000 | rand(1 << 24));
      const ip = [24n, 16n, 8n, 0n].map((s) => (near >> s) & 255n).join(".");
      const want = blocks.some((b) => ipInBlock(ip, b));
      assert(
        inRanges(ip, ranges) === want,
        `${ip} with ${JSON.stringify(blocks)}: ranges ${JSON.stringify(ranges)} say ${!want}`,
      );
    }
  }
});
