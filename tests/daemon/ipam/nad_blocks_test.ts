import { assert, assertEquals } from "deno-std/assert/mod.js";
import {
  type Cidr,
  cidrsOverlap,
  formatCidr,
  formatIp,
  parseCidr,
} from "../../../daemon/ipam/cidr.ts";
import {
  blockPrefixFor,
  mayClaimAhead,
  networkBlockName,
  networkBlockRange,
  nextFreeNetworkBlock,
  wantsBlockAhead,
} from "../../../daemon/ipam/nad_blocks.ts";
import { parseWhereabouts } from "../../../daemon/ipam/nad_ipam.ts";

const range = (ipam: Record<string, unknown>) =>
  parseWhereabouts({ type: "whereabouts", ...ipam }, "t").ranges[0];

Deno.test("blocks hold at most 1/64 of their range: small ranges are claimed one address at a time", () => {
  assertEquals(blockPrefixFor(range({ range: "10.0.0.0/28" })), 32);
  assertEquals(blockPrefixFor(range({ range: "10.0.0.0/25" })), 32, "126 addresses: singles");
  assertEquals(blockPrefixFor(range({ range: "10.0.0.0/24" })), 31);
  assertEquals(blockPrefixFor(range({ range: "10.0.0.0/20" })), 27);
  assertEquals(blockPrefixFor(range({ range: "10.0.0.0/8" })), 27, "at most 32 addresses");
  assertEquals(blockPrefixFor(range({ range: "fd00::/64" })), 123);
  assertEquals(blockPrefixFor(range({ range: "fd00::/120" })), 127);
});

Deno.test("when no block of the range's size is free, smaller ones fill what is left, down to single addresses", () => {
  const r = range({ range: "10.0.0.0/24" }); // blocks of 2
  const taken: Cidr[] = [];
  for (;;) {
    const next = nextFreeNetworkBlock(r, taken, "n1");
    if (!next) break;
    for (const t of taken) {
      assert(!cidrsOverlap(t, next), `${formatCidr(next)} overlaps ${formatCidr(t)}`);
    }
    taken.push(next);
  }
  let n = 0;
  for (const t of taken) {
    const p = networkBlockRange(r, t)!;
    n += Number(p.end.value - p.start.value + 1n);
  }
  assertEquals(n, 254, "every address of the range is in some block");
  // Some one-address holes (a /31 whose other half was taken by a single) get single blocks.
  const holey = [parseCidr("10.0.0.4/32"), parseCidr("10.0.0.9/32")];
  const all: Cidr[] = [...holey];
  for (let b = nextFreeNetworkBlock(r, all, "x"); b; b = nextFreeNetworkBlock(r, all, "x")) {
    all.push(b);
  }
  assert(all.some((c) => formatCidr(c) === "10.0.0.5/32"), "the other half of 10.0.0.4/31");
  assert(all.some((c) => formatCidr(c) === "10.0.0.8/32"), "the other half of 10.0.0.8/31");
});

Deno.test("a block hands out only its part of the range, without the range's exclusions", () => {
  const r = range({
    range: "10.0.0.0/24",
    range_start: "10.0.0.3",
    exclude: ["10.0.0.5"],
    gateway: "10.0.0.4",
  });
  const p = networkBlockRange(r, parseCidr("10.0.0.0/29"))!;
  assertEquals([formatIp(p.start), formatIp(p.end)], ["10.0.0.3", "10.0.0.7"]);
  assertEquals(formatCidr(p.subnet), "10.0.0.0/24", "addresses carry the range's prefix");
  assertEquals(networkBlockRange(r, parseCidr("10.0.0.4/31")), undefined, "all excluded");
  assertEquals(networkBlockRange(r, parseCidr("10.0.0.0/31")), undefined, "before range_start");
});

Deno.test("a block's name differs per space, so one CIDR in two spaces is two objects", () => {
  const c = parseCidr("10.0.0.8/29");
  const a = networkBlockName("blue/v4", c);
  assertEquals(/^nb-[0-9a-f]{8}-10-0-0-8-29$/.test(a), true, a);
  assert(a !== networkBlockName("v4", c));
});

Deno.test("a block is claimed ahead only at half a block free, in ranges with blocks of 4 or more", () => {
  const big = range({ range: "10.0.0.0/20" }); // blocks of 32
  assertEquals(wantsBlockAhead(big, 17), false, "more than half a block free");
  assertEquals(wantsBlockAhead(big, 16), true);
  assertEquals(wantsBlockAhead(big, 0), true);
  assertEquals(wantsBlockAhead(range({ range: "10.0.0.0/24" }), 0), false, "blocks of 2");
  assertEquals(wantsBlockAhead(range({ range: "10.0.0.0/28" }), 0), false, "single addresses");
  assertEquals(wantsBlockAhead(range({ range: "10.0.0.0/23" }), 2), true, "blocks of 4");
});

Deno.test("a claim ahead of need takes only a full-size block, while under three quarters of the range is claimed", () => {
  const r = range({ range: "10.0.0.0/20" }); // 128 blocks of 32
  const block = parseCidr("10.0.1.0/27");
  assertEquals(mayClaimAhead(r, block, 0), true);
  assertEquals(mayClaimAhead(r, block, 95), true);
  assertEquals(mayClaimAhead(r, block, 96), false, "three quarters claimed");
  assertEquals(mayClaimAhead(r, parseCidr("10.0.1.0/28"), 0), false, "a smaller block");
});
