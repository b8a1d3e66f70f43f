/**
 * Helpers the simulated-cluster tests share: Ferry's routes on a node, and waiting for a
 * condition.
 *
 * @module
 */
import type { SimCluster } from "../../daemon/dev/cluster_sim.ts";
import { run } from "../../daemon/dev/netns.ts";
import { FERRY_ROUTE_PROTOCOL } from "../../daemon/cluster/route_table.ts";

/** Ferry's routes on node `i` (protocol 199), as `dst via gateway`, sorted. */
export async function ferryRoutes(c: SimCluster, i: number): Promise<string[]> {
  const out = await run(
    "ip",
    "-n",
    c.nodes[i].ns.name,
    "-j",
    "route",
    "show",
    "proto",
    String(FERRY_ROUTE_PROTOCOL),
  );
  return (JSON.parse(out.trim() || "[]") as { dst: string; gateway: string }[])
    .map((r) => `${r.dst} via ${r.gateway}`)
    .sort();
}

/**
 * Waits (polling every `intervalMs`, up to `ms`) until `probe` holds; throws naming `what`
 * otherwise.
 */
export async function eventually(
  probe: () => Promise<boolean>,
  what: string,
  ms = 20_000,
  intervalMs = 50,
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
