import { assertEquals } from "deno-std/assert/mod.js";
import { BridgeDriver, type BridgeDriverDeps } from "../../../daemon/drivers/bridge.ts";
import { RangeAllocator } from "../../../daemon/ipam/allocator.ts";
import { parseCidr } from "../../../daemon/ipam/cidr.ts";
import { defaultRange, LocalPool } from "../../../daemon/ipam/local_pool.ts";
import type { Plumber, PodPort } from "../../../daemon/net/plumber.ts";
import type { Attachment } from "../../../daemon/records/attachment_store.ts";
import { hostLinkName, stableMac } from "../../../daemon/net/naming.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";

const plumber = (ports: string[], removed: string[]) =>
  ({
    bridgePorts: () => Promise.resolve(ports),
    unplugVeth: (name: string) => Promise.resolve(void removed.push(name)),
  }) as unknown as Plumber;

const record = (containerId: string): Attachment => ({
  containerId,
  ifname: "eth0",
  netns: "/var/run/netns/x",
  network: "ferry",
  hostIfname: hostLinkName(containerId, "eth0"),
  result: { cniVersion: "1.1.0" },
  createdAt: new Date().toISOString(),
});

Deno.test("orphans are Ferry's host links and address holders that no record (nor damaged key) names", async () => {
  await withTempDir(async (dir) => {
    const pool = await LocalPool.open(dir, defaultRange(parseCidr("10.9.9.0/24")));
    const removed: string[] = [];
    const ports = [
      hostLinkName("live", "eth0"),
      hostLinkName("lost", "eth0"),
      hostLinkName("damaged", "eth0"),
      "someone-elses0",
    ];
    const driver = new BridgeDriver({
      allocators: [new RangeAllocator(pool)],
      plumber: plumber(ports, removed),
      bridge: "fb0",
      mtu: 1500,
    });
    for (const c of ["live", "lost", "damaged"]) {
      await pool.allocate({ containerId: c, ifname: "eth0" });
    }
    const damaged = [{ containerId: "damaged", ifname: "eth0" }];
    const { links, owners } = await driver.orphans([record("live")], damaged);
    assertEquals(links, [hostLinkName("lost", "eth0")]);
    assertEquals(owners, [{ containerId: "lost", ifname: "eth0" }]);
    assertEquals(await driver.releaseOwner(owners[0]), 1);
    assertEquals(pool.addressOf({ containerId: "lost", ifname: "eth0" }), undefined);
    assertEquals(pool.allocations().length, 2);
  });
});

Deno.test("at start the ports of recorded pods are set as a plug sets them now (an older Ferry's learned and flooded), guarded when port security is on; other drivers' records are left alone", async () => {
  await withTempDir(async (dir) => {
    const pool = await LocalPool.open(dir, defaultRange(parseCidr("10.9.8.0/24")));
    const secured: PodPort[] = [];
    const driver = new BridgeDriver({
      allocators: [new RangeAllocator(pool)],
      plumber: {
        ...plumber([hostLinkName("kept", "eth0")], []),
        securePort: (p: PodPort) => Promise.resolve(void secured.push(p)),
      } as unknown as Plumber,
      bridge: "fb0",
      mtu: 1500,
      guard: { group: 7 } as unknown as BridgeDriverDeps["guard"],
    });
    await driver.reconcile([record("kept"), { ...record("nad"), driver: "macvlan" }]);
    assertEquals(secured, [{
      hostIfname: hostLinkName("kept", "eth0"),
      podMac: stableMac("kept", "eth0", "container"),
      guarded: true,
    }]);
  });
});
