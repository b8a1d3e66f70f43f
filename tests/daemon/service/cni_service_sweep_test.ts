// The orphan sweep (CniService.sweepOrphans) against ADDs in flight: what an ADD has plugged but
// not yet recorded is never taken for an orphan, however long the ADD waits for its address
// (an address block claimed while the API is away took longer than the sweep's grace period in
// the full-size chaos run, and the sweep deleted the pair under the ADD: "find eth0: ENODEV").
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { AttachmentStore } from "../../../daemon/records/attachment_store.ts";
import { CniService } from "../../../daemon/service/cni_service.ts";
import type { DefaultNetwork } from "../../../daemon/service/default_network.ts";
import { BridgeDriver } from "../../../daemon/drivers/bridge.ts";
import type { Driver } from "../../../daemon/drivers/driver.ts";
import { RangeAllocator } from "../../../daemon/ipam/allocator.ts";
import { parseCidr } from "../../../daemon/ipam/cidr.ts";
import { defaultRange, LocalPool, type Owner } from "../../../daemon/ipam/local_pool.ts";
import { NetnsGuard } from "../../../daemon/net/netns_guard.ts";
import type { Plumber, VethSpec } from "../../../daemon/net/plumber.ts";
import { hostLinkName } from "../../../daemon/net/naming.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";
import type { CniRequest } from "../../../lib/envelope.ts";
import { CNI_ERROR, CniError } from "../../../lib/cni/errors.ts";

/** Any path is a pod's namespace. */
const podNamespaces = () => {
  const pod = () => ({ dev: 7, ino: 2, isFile: true });
  return new NetnsGuard([{ dev: 7, ino: 1 }], () => Promise.resolve(pod()), pod);
};

/** A kernel as the bridge driver sees it: a pair dies whole when its host end is removed. */
function kernel(ports: string[]): Plumber {
  return {
    async plugVeth(spec: VethSpec, addressed?: Promise<void>) {
      ports.push(spec.hostIfname);
      await addressed;
      if (!ports.includes(spec.hostIfname)) {
        throw new CniError(
          CNI_ERROR.IO_FAILURE,
          `failed to plug ${spec.ifname} in ${spec.netns}`,
          `find ${spec.ifname}: ENODEV: no such device`,
        );
      }
    },
    unplugVeth(name: string) {
      const i = ports.indexOf(name);
      if (i >= 0) ports.splice(i, 1);
      return Promise.resolve();
    },
    bridgePorts: () => Promise.resolve([...ports]),
  } as unknown as Plumber;
}

/** An allocator whose addresses come only once `gate` resolves (a block claimed slowly). */
class SlowAllocator extends RangeAllocator {
  constructor(pool: LocalPool, readonly gate: Promise<void>) {
    super(pool);
  }
  override async allocate(owner: Owner) {
    await this.gate;
    return super.allocate(owner);
  }
}

const add = (containerId: string): CniRequest => ({
  command: "ADD",
  containerId,
  netns: "/var/run/netns/p",
  ifname: "eth0",
  args: {},
  path: [],
  config: { cniVersion: "1.1.0", name: "ferry", type: "ferry" } as CniRequest["config"],
});

Deno.test("an ADD waiting for its address longer than the sweep's grace keeps its pair, and a real orphan beside it still goes", async () => {
  await withTempDir(async (dir) => {
    const pool = await LocalPool.open(`${dir}/ipam`, defaultRange(parseCidr("10.9.9.0/24")));
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const ports = [hostLinkName("lost", "eth0")];
    const bridge = new BridgeDriver({
      allocators: [new SlowAllocator(pool, gate)],
      plumber: kernel(ports),
      bridge: "fb0",
      mtu: 1500,
    });
    const store = await AttachmentStore.open(`${dir}/attachments`);
    const unused = {} as Driver;
    const service = new CniService({
      network: { current: bridge } as unknown as DefaultNetwork,
      networkWaitMs: 1000,
      drivers: { macvlan: unused, ipvlan: unused, delegate: unused, "nad-bridge": unused },
      store,
      netns: podNamespaces(),
      isReady: () => true,
      logger: getLogger(["ferry", "test"]),
    });
    const adding = service.add(add("slow"));
    const pair = hostLinkName("slow", "eth0");
    while (!ports.includes(pair)) await new Promise((r) => setTimeout(r, 1));
    // Sweeps with no grace at all, while the ADD still waits for its address.
    const seen = new Map<string, number>();
    const first = await service.sweepOrphans(seen, 0);
    const second = await service.sweepOrphans(seen, 0);
    assertEquals(first.links, [hostLinkName("lost", "eth0")], "the real orphan goes");
    assertEquals(second.links, [], "the ADD's pair is not an orphan");
    open();
    const result = await adding;
    assertEquals(result.ips?.map((ip) => ip.address), ["10.9.9.2/24"]);
    assertEquals(ports, [pair]);
    assert(store.get({ containerId: "slow", ifname: "eth0" }), "recorded");
    // Recorded, it is named by its record from now on.
    assertEquals((await service.sweepOrphans(seen, 0)).links, []);
  });
});
