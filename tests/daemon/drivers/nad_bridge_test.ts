// A native NAD bridge never lets a pod take an address another interface holds on the same bridge
// (the port-security attacker's finding 6: a second NAD naming the same bridge, with static IPAM
// and the victim's address, then answered ARP for it). Runs the reference `static` IPAM plugin.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { heldOnBridgeFrom, NadBridgeDriver } from "../../../daemon/drivers/nad_bridge.ts";
import type { Plumber } from "../../../daemon/net/plumber.ts";
import { CniError } from "../../../lib/cni/errors.ts";

const CNI_PATH = ["/usr/lib/cni", "/opt/cni/bin"];
const HAS_STATIC = await Deno.stat("/usr/lib/cni/static").then(() => true, () => false);

/** Plugs nothing; says every name is free. */
class FakePlumber implements Partial<Plumber> {
  unplugged: string[] = [];
  ensureBridge = () => Promise.resolve();
  plugVeth = () => Promise.resolve();
  unplugVeth = (name: string) => (this.unplugged.push(name), Promise.resolve());
  inspect = () => Promise.resolve(null);
  bridgePorts = () => Promise.resolve([]);
}

const add = (d: NadBridgeDriver, containerId: string, address: string, bridge = "br-t") =>
  d.add({
    key: { containerId, ifname: "net1" },
    netns: "/var/run/netns/p",
    conf: {
      cniVersion: "1.0.0",
      name: `lan-${containerId}`,
      type: "bridge",
      bridge,
      ipam: { type: "static", addresses: [{ address }] },
    } as never,
    args: {},
    path: CNI_PATH,
  });

Deno.test({
  name:
    "a native NAD bridge refuses an address another interface holds on the same bridge (plugged since start, or recorded), code 7, and undoes the ADD",
  ignore: !HAS_STATIC,
  fn: async () => {
    const records: Parameters<typeof heldOnBridgeFrom>[0] extends () => infer R ? R : never = [];
    const plumber = new FakePlumber();
    const d = new NadBridgeDriver(
      plumber as unknown as Plumber,
      5000,
      undefined,
      undefined,
      heldOnBridgeFrom(() => records),
    );
    await add(d, "victim", "192.168.50.7/24");
    const e = await assertRejects(() => add(d, "evil", "192.168.50.7/24"), CniError);
    assertEquals(e.code, 7, e.message);
    assert(e.message.includes("192.168.50.7"), e.message);
    assert(plumber.unplugged.length === 1, "the refused ADD's link was removed");
    // Another bridge, or another address: fine.
    await add(d, "other", "192.168.50.7/24", "br-other");
    await add(d, "evil2", "192.168.50.8/24");
    // After a restart the daemon knows the victim from its record alone.
    records.push({
      containerId: "victim",
      ifname: "net1",
      driver: "nad-bridge",
      conf: { cniVersion: "1.0.0", name: "lan", type: "bridge", bridge: "br-t" } as never,
      result: { cniVersion: "1.0.0", ips: [{ address: "192.168.50.7/24" }] },
    });
    const fresh = new NadBridgeDriver(
      plumber as unknown as Plumber,
      5000,
      undefined,
      undefined,
      heldOnBridgeFrom(() => records),
    );
    const again = await assertRejects(() => add(fresh, "evil", "192.168.50.7/24"), CniError);
    assertEquals(again.code, 7, again.message);
    // The victim's own re-ADD (same container and interface) is not refused by its own record.
    await add(fresh, "victim", "192.168.50.7/24");
  },
});
