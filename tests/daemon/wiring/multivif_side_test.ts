import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import { ferryPodRanges } from "../../../daemon/wiring/multivif_side.ts";
import { DEFAULT_CONFIG } from "../../../daemon/config/config.ts";
import { CniError } from "../../../lib/cni/errors.ts";
import type { KubeSide } from "../../../daemon/wiring/kube_side.ts";

const kubeWith = (synced: boolean) =>
  ({
    watcher: { synced },
    pools: { poolCidrs: () => ["10.97.0.0/16"] },
    nodes: { list: () => [{ podCIDRs: ["10.244.2.0/24"] }, { podCIDRs: ["10.244.3.0/24"] }] },
  }) as unknown as Pick<KubeSide, "watcher" | "pools" | "nodes">;

Deno.test("issue #42 item 3: before the node's watches have listed, a NAD cannot be checked: code 11, not an unchecked ADD", () => {
  const config = {
    ...DEFAULT_CONFIG,
    ipam: { ...DEFAULT_CONFIG.ipam, mode: "kubernetes" as const },
  };
  const e = assertThrows(() => ferryPodRanges(kubeWith(false), config, () => ["10.244.1.0/24"]));
  assertEquals((e as CniError).code, 11, (e as Error).message);
  assertEquals(ferryPodRanges(kubeWith(true), config, () => ["10.244.1.0/24"]), [
    "10.244.1.0/24",
    "10.97.0.0/16",
    "10.244.2.0/24",
    "10.244.3.0/24",
  ]);
});
