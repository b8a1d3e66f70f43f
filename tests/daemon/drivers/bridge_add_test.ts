// The bridge driver's ADD: the addresses are allocated while the kernel creates the veth pair,
// the pod end is configured only once they are allocated, and a failure on either side rolls
// back both (after the other has settled).
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { BridgeDriver } from "../../../daemon/drivers/bridge.ts";
import type { AddContext } from "../../../daemon/drivers/driver.ts";
import type { FamilyAllocator, Lease } from "../../../daemon/ipam/allocator.ts";
import type { Owner } from "../../../daemon/ipam/local_pool.ts";
import type { Plumber, VethSpec } from "../../../daemon/net/plumber.ts";
import { hostLinkName } from "../../../daemon/net/naming.ts";
import { CNI_ERROR, CniError } from "../../../lib/cni/errors.ts";

/** An allocator whose allocations finish when the test says. */
function gatedAllocator(family: 4 | 6, events: string[]) {
  const gate = Promise.withResolvers<void>();
  const held = new Map<string, string>();
  let fail: CniError | undefined;
  const allocator = {
    family,
    async allocate(owner: Owner): Promise<Lease> {
      events.push(`allocate v${family} start`);
      await gate.promise;
      if (fail) {
        events.push(`allocate v${family} failed`);
        throw fail;
      }
      const ip = family === 4 ? "10.1.0.2" : "fd00::2";
      held.set(owner.containerId, ip);
      events.push(`allocate v${family} done`);
      return { ip, prefix: family === 4 ? 24 : 64, gateway: family === 4 ? "10.1.0.1" : "fd00::1" };
    },
    release(owner: Owner): Promise<string | undefined> {
      const ip = held.get(owner.containerId);
      held.delete(owner.containerId);
      events.push(`release v${family}`);
      return Promise.resolve(ip);
    },
    addressOf: (owner: Owner) => held.get(owner.containerId),
    allocations: () => [],
    repair: () => Promise.resolve({ restored: [], freed: [] }),
    free: 1,
    subnets: () => [],
    gateways: () => [],
    usage: () => [],
  } satisfies FamilyAllocator;
  return {
    allocator,
    held,
    open: () => gate.resolve(),
    failWith(e: CniError) {
      fail = e;
      gate.resolve();
    },
  };
}

/**
 * A plumber that creates the pair (at once, after `created`, or failing), then waits for the
 * addresses.
 */
function recordingPlumber(events: string[], createFails = false, created?: Promise<void>): Plumber {
  return {
    async plugVeth(spec: VethSpec, addressed?: Promise<void>) {
      events.push("create pair");
      await created;
      if (createFails) throw new CniError(CNI_ERROR.IO_FAILURE, "failed to plug eth0", "EEXIST");
      await addressed;
      events.push(`configure pod end with ${spec.addresses.map((a) => a.cidr).join(",")}`);
    },
    unplugVeth(name: string) {
      events.push(`unplug ${name}`);
      return Promise.resolve();
    },
  } as unknown as Plumber;
}

const ctx = (): AddContext => ({
  key: { containerId: "c1", ifname: "eth0" },
  netns: "/var/run/netns/x",
  conf: { cniVersion: "1.1.0", name: "ferry", type: "ferry" },
  args: {},
  path: [],
});

/** The driver under test on bridge fb0. */
const bridgeDriver = (allocators: FamilyAllocator[], plumber: Plumber) =>
  new BridgeDriver({ allocators, plumber, bridge: "fb0", mtu: 1500 });

const settle = () => new Promise((r) => setTimeout(r, 10));

Deno.test("the pair is created while the addresses are allocated, and the pod end is configured only once they are", async () => {
  const events: string[] = [];
  const v4 = gatedAllocator(4, events);
  const v6 = gatedAllocator(6, events);
  const driver = bridgeDriver([v4.allocator, v6.allocator], recordingPlumber(events));
  const adding = driver.add(ctx());
  await settle();
  assertEquals(events, ["allocate v4 start", "allocate v6 start", "create pair"]);
  v6.open();
  await settle();
  assert(!events.some((e) => e.startsWith("configure")), "configured before v4 was allocated");
  v4.open();
  const plugged = await adding;
  assertEquals(events.at(-1), "configure pod end with 10.1.0.2/24,fd00::2/64");
  assertEquals(plugged.result.ips?.map((ip) => ip.address), ["10.1.0.2/24", "fd00::2/64"]);
});

Deno.test("an allocation that fails while the pair is created answers its own error and rolls the pair and the other family back", async () => {
  const events: string[] = [];
  const v4 = gatedAllocator(4, events);
  const v6 = gatedAllocator(6, events);
  const driver = bridgeDriver([v4.allocator, v6.allocator], recordingPlumber(events));
  const adding = driver.add(ctx());
  await settle();
  v4.open();
  v6.failWith(new CniError(CNI_ERROR.ADDRESSES_EXHAUSTED, "no free address in fd00::/64"));
  const e = await assertRejects(() => adding, CniError);
  assertEquals(e.code, CNI_ERROR.ADDRESSES_EXHAUSTED);
  assert(!events.some((x) => x.startsWith("configure")), events.join("; "));
  assert(events.includes(`unplug ${hostLinkName("c1", "eth0")}`), events.join("; "));
  assertEquals(v4.held.size, 0, "the other family's address is given back");
});

Deno.test("a pair that cannot be created while the allocation is under way is rolled back only after the allocation settled", async () => {
  const events: string[] = [];
  const v4 = gatedAllocator(4, events);
  const driver = bridgeDriver([v4.allocator], recordingPlumber(events, true));
  const adding = driver.add(ctx());
  await settle();
  assertEquals(events, ["allocate v4 start", "create pair"]);
  v4.open();
  const e = await assertRejects(() => adding, CniError);
  assertEquals(e.code, CNI_ERROR.IO_FAILURE);
  // Released after it was allocated: no address is left held by a failed ADD.
  assertEquals(events.slice(2), ["allocate v4 done", events[3], "release v4"]);
  assert(events[3].startsWith("unplug "));
  assertEquals(v4.held.size, 0);
});

Deno.test("an allocation that fails before the plug waits for it is an error answer, not an unhandled rejection", async () => {
  // Deno fails the test (and would end the daemon) on a rejection nothing handled in time.
  const events: string[] = [];
  const v4 = gatedAllocator(4, events);
  const created = Promise.withResolvers<void>();
  const driver = bridgeDriver([v4.allocator], recordingPlumber(events, false, created.promise));
  const adding = driver.add(ctx());
  v4.failWith(new CniError(CNI_ERROR.ADDRESSES_EXHAUSTED, "no free address in 10.1.0.0/24"));
  await settle();
  assertEquals(events, ["allocate v4 start", "create pair", "allocate v4 failed"]);
  created.resolve();
  const e = await assertRejects(() => adding, CniError);
  assertEquals(e.code, CNI_ERROR.ADDRESSES_EXHAUSTED);
  assert(events.includes(`unplug ${hostLinkName("c1", "eth0")}`), events.join("; "));
});

Deno.test("the result is announced once the addresses are allocated, while the pair is still being created, and is the one ADD returns", async () => {
  const events: string[] = [];
  const v4 = gatedAllocator(4, events);
  const created = Promise.withResolvers<void>();
  const driver = bridgeDriver([v4.allocator], recordingPlumber(events, false, created.promise));
  let announced: { result: unknown; hostIfname?: string } | undefined;
  const adding = driver.add({
    ...ctx(),
    resultKnown: (result, hostIfname) => {
      events.push("result known");
      announced = { result, hostIfname };
    },
  });
  await settle();
  assertEquals(announced, undefined, "not before the addresses");
  v4.open();
  await settle();
  assertEquals(events, ["allocate v4 start", "create pair", "allocate v4 done", "result known"]);
  created.resolve();
  const plugged = await adding;
  assert(plugged.result === announced?.result, "the same result object");
  assertEquals(announced?.hostIfname, hostLinkName("c1", "eth0"));
  assertEquals(events.at(-1), "configure pod end with 10.1.0.2/24");
});

Deno.test("with port security the port is made in the guard's interface group and admitted in one write once the pod end is configured; a refused admission undoes the pair and releases the port", async () => {
  for (const refused of [false, true]) {
    const events: string[] = [];
    const v4 = gatedAllocator(4, events);
    v4.open();
    const plumber = recordingPlumber(events);
    const plug = plumber.plugVeth.bind(plumber);
    plumber.plugVeth = (spec: VethSpec, addressed?: Promise<void>) => {
      events.push(`group ${spec.hostGroup}`);
      return plug(spec, addressed);
    };
    const guard = {
      group: 0x46000001,
      admit(entry: { port: string; ips: string[] }) {
        events.push(`admit ${entry.port} ${entry.ips.join(",")}`);
        return refused
          ? Promise.reject(new CniError(CNI_ERROR.IO_FAILURE, "port security refused"))
          : Promise.resolve();
      },
      release(entry: { port: string }) {
        events.push(`release ${entry.port}`);
        return Promise.resolve();
      },
    };
    const driver = new BridgeDriver({
      allocators: [v4.allocator],
      plumber,
      bridge: "fb0",
      mtu: 1500,
      guard,
    });
    const port = hostLinkName("c1", "eth0");
    const added = await driver.add(ctx()).then(() => "added", (e: CniError) => e.message);
    assertEquals(added, refused ? "port security refused" : "added");
    assertEquals(events.filter((e) => !e.startsWith("allocate")), [
      `group ${0x46000001}`,
      "create pair",
      "configure pod end with 10.1.0.2/24",
      `admit ${port} 10.1.0.2`,
      ...(refused ? [`unplug ${port}`, "release v4", `release ${port}`] : []),
    ]);
  }
});
