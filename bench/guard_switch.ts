/**
 * Port security's guard switched off and on in place, for the data-path benchmark
 * (`bench/dataplane_bench.ts`): the guard's only hook is the base chain `guard` of its bridge
 * table (`daemon/portsec/guard_table.ts`); off, that chain is gone from every node's namespace and
 * no bridge-family hook is left, which is the data path of a node with `portSecurity.enabled`
 * false (Ferry writes nothing else in the bridge family); on, the chain is back exactly as the
 * daemon wrote it. The table and its sets stay, so the daemon sees nothing to repair, and the
 * same pods on the same connection are measured both ways a fraction of a second apart.
 *
 * @module
 */
import { run } from "../daemon/dev/netns.ts";

/** The guard of a cluster's nodes, switched in place. */
export interface GuardSwitch {
  /**
   * Puts the guard's chain in (`on`) or takes it out on every node, and checks that it is so;
   * the same work either way, also when it already was.
   * @throws Error when a node's ruleset is not what `on` asks for afterwards.
   */
  set(on: boolean): Promise<void>;
}

/** `nft -f -` in namespace `ns` with `script` on stdin. */
async function nftIn(ns: string, script: string): Promise<void> {
  const child = new Deno.Command("ip", {
    args: ["netns", "exec", ns, "nft", "-f", "-"],
    stdin: "piped",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const w = child.stdin.getWriter();
  await w.write(new TextEncoder().encode(script));
  await w.close();
  const out = await child.output();
  if (!out.success) {
    throw new Error(`nft -f in ${ns} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
}

const listChain = (ns: string, table: string) =>
  run("ip", "netns", "exec", ns, "nft", "list", "chain", "bridge", table, "guard");

const bridgeHooks = async (ns: string) =>
  (await run("ip", "netns", "exec", ns, "nft", "list", "ruleset", "bridge"))
    .split("\n").filter((l) => l.includes(" hook ")).length;

/**
 * The switch of bridge table `table`'s guard in namespaces `namespaces` (the nodes'), as the
 * daemons wrote it; starts on.
 * @throws Error when a namespace has no such guard chain.
 *
 * @example
 * ```ts
 * const guard = await guardSwitch(c.nodes.map((n) => n.ns.name), "ferry-portsec");
 * await guard.set(false); // … measure …
 * await guard.set(true);
 * ```
 */
export async function guardSwitch(namespaces: string[], table: string): Promise<GuardSwitch> {
  const saved = new Map<string, string>();
  for (const ns of namespaces) {
    const chain = await listChain(ns, table);
    if (!chain.includes("hook prerouting")) {
      throw new Error(`no guard chain in table bridge ${table} of ${ns}: ${chain}`);
    }
    saved.set(ns, chain);
  }
  return {
    async set(on) {
      for (const [ns, chain] of saved) {
        // One transaction: the chain as it is goes, and comes back whole (on) or empty and
        // hookless (off), so that `set` does the same work either way.
        const gone = `flush chain bridge ${table} guard\ndelete chain bridge ${table} guard\n`;
        await nftIn(ns, gone + (on ? chain : `add chain bridge ${table} guard\n`));
        if (on) {
          const now = await listChain(ns, table);
          if (now !== chain) {
            throw new Error(`the guard of ${ns} came back changed:\n${now}\nwas:\n${chain}`);
          }
        } else {
          const hooks = await bridgeHooks(ns);
          if (hooks) throw new Error(`${hooks} bridge hooks left in ${ns} with the guard off`);
        }
      }
    },
  };
}
