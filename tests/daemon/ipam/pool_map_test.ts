import { assertEquals } from "deno-std/assert/mod.js";
import { PoolMap } from "../../../daemon/ipam/pool_map.ts";

Deno.test("a pool for NAD networks is not the default network's: never claimed from, routed or taken as pod space, but listed among all pools", () => {
  const map = new PoolMap();
  map.upsertPool({ metadata: { name: "default" }, spec: { cidrs: ["10.244.0.0/16"] } });
  map.upsertPool({
    metadata: { name: "telco" },
    spec: { use: "networks", cidrs: ["192.168.50.0/24"] },
  });
  assertEquals(map.poolCidrs(), ["10.244.0.0/16"]);
  assertEquals(map.pools().map((p) => p.metadata?.name), ["default"]);
  assertEquals(map.pool("telco"), undefined);
  assertEquals(map.pool("default")?.metadata?.name, "default");
  assertEquals(map.allPools().map((p) => p.metadata?.name), ["default", "telco"]);
});
