import { assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import {
  type WhereaboutsPoolObject,
  whereaboutsReservations,
} from "../../../daemon/ipam/whereabouts_pools.ts";
import { WhereaboutsReservations } from "../../../daemon/ipam/whereabouts_migration.ts";

const pool = (
  range: string,
  allocations: Record<string, { id?: string; podref?: string; ifname?: string }>,
): WhereaboutsPoolObject => ({
  metadata: { name: "p", namespace: "kube-system" },
  spec: { range, allocations },
});

Deno.test("whereabouts' IPPool allocations are offsets from the address of its range", () => {
  const got = whereaboutsReservations([
    pool("192.168.2.0/24", {
      "1": { id: "c1", podref: "default/a", ifname: "net1" },
      "37": { id: "c2", podref: "default/b" },
      "x": { id: "c3", podref: "default/c" },
      "9": { id: "c4" },
    }),
    pool("2001::/116", { "4094": { id: "c5", podref: "ns/d", ifname: "net2" } }),
    pool("not a range", { "1": { id: "c6", podref: "ns/e" } }),
  ]);
  assertEquals(got, [
    { ip: "192.168.2.1", podRef: "default/a", containerId: "c1", ifname: "net1" },
    { ip: "192.168.2.37", podRef: "default/b", containerId: "c2", ifname: "" },
    { ip: "2001::ffe", podRef: "ns/d", containerId: "c5", ifname: "net2" },
  ]);
});

Deno.test("only the addresses of live pods are kept from use, re-read at each refresh", async () => {
  const live = new Set(["default/a"]);
  let pools = [pool("10.1.0.0/24", {
    "5": { id: "c1", podref: "default/a" },
    "6": { id: "c2", podref: "default/gone" },
  })];
  const wa = new WhereaboutsReservations({
    list: () => Promise.resolve(pools),
    podExists: (ns, name) => Promise.resolve(live.has(`${ns}/${name}`)),
    logger: getLogger(["ferry", "test"]),
  });
  await wa.refresh();
  assertEquals(wa.holder("10.1.0.5"), { namespace: "default", name: "a" });
  assertEquals(wa.holder("10.1.0.6"), undefined, "its pod is gone");
  live.delete("default/a");
  pools = [];
  await wa.refresh();
  assertEquals(wa.holder("10.1.0.5"), undefined);
});
