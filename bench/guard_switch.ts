/**
 * Port security's guard switched in place, for the data-path benchmark
 * (`bench/dataplane_bench.ts`): the guard's only hook is the base chain `guard` of its bridge
 * table (`daemon/portsec/guard_table.ts`). Off, that chain is empty and hookless on every node and
 * no bridge-family hook is left, which is the data path of a node with `portSecurity.enabled`
 * false (Ferry writes nothing else in the bridge family); on, the chain is back exactly as the
 * daemon wrote it (the daemon's own script, `guardChainScript`: nft's listing, read back, would
 * check the ethertype another way); at its least, the chain holds one rule (see {@link GuardState}). The table and
 * its sets stay, so the daemon sees nothing to repair, and the same pods on the same connection
 * are measured each way a fraction of a second apart.
 *
 * @module
 */
import { NftRunner } from "../daemon/cluster/masquerade.ts";
import { run } from "../daemon/dev/netns.ts";
import { guardChainScript, type GuardOptions } from "../daemon/portsec/guard_table.ts";

/**
 * What the guard's chain holds: the daemon's (`on`), nothing and no hook (`off`), or the least
 * guard port security can be (`lookup`): the hook and one rule, one lookup of each frame's port,
 * source MAC and IPv4 source in the daemon's own `sarp` set, dropping a miss; the floor of any
 * guard that binds addresses to ports with per-pod set elements.
 */
export type GuardState = "on" | "off" | "lookup";

/** The guard of a cluster's nodes, switched in place. */
export interface GuardSwitch {
  /**
   * Puts the guard's chain in `state` on every node, and checks that it is so; the same work
   * whatever the state, also when it already was.
   * @throws Error when a node's ruleset is not what `state` asks for afterwards (`on`: listed
   * otherwise than the daemon's chain was).
   */
  set(state: GuardState): Promise<void>;
}

/** The `lookup` state's chain of table `table`. */
export function lookupChain(table: string): string {
  return [
    `table bridge ${table} {`,
    "  chain guard {",
    "    type filter hook prerouting priority -300; policy accept;",
    "    iifname . ether saddr . ip saddr != @sarp drop",
    "  }",
    "}",
    "",
  ].join("\n");
}

/** Runs the switch's scripts (`nft -f -` through `nsenter` into a node's namespace). */
const nft = new NftRunner({ family: "bridge" });

/** `script` as one transaction in namespace `ns` (by name). */
const nftIn = (ns: string, script: string) => nft.applyIn(`/var/run/netns/${ns}`, script);

const listChain = (ns: string, table: string) =>
  run("ip", "netns", "exec", ns, "nft", "list", "chain", "bridge", table, "guard");

const bridgeHooks = async (ns: string) =>
  (await run("ip", "netns", "exec", ns, "nft", "list", "ruleset", "bridge"))
    .split("\n").filter((l) => l.includes(" hook ")).length;

/**
 * The switch of bridge table `table`'s guard in namespaces `namespaces` (the nodes'), as the
 * daemons wrote it with `opts` (their VXLAN port, with `routing.mode` vxlan); starts on.
 * @throws Error when a namespace has no such guard chain.
 *
 * @example
 * ```ts
 * const guard = await guardSwitch(c.nodes.map((n) => n.ns.name), "ferry-portsec");
 * await guard.set("off"); // … measure …
 * await guard.set("on");
 * ```
 */
export async function guardSwitch(
  namespaces: string[],
  table: string,
  opts: GuardOptions = {},
): Promise<GuardSwitch> {
  const own = guardChainScript(table, opts);
  const saved = new Map<string, string>();
  for (const ns of namespaces) {
    const chain = await listChain(ns, table);
    if (!chain.includes("hook prerouting")) {
      throw new Error(`no guard chain in table bridge ${table} of ${ns}: ${chain}`);
    }
    saved.set(ns, chain);
  }
  return {
    async set(state) {
      for (const [ns, chain] of saved) {
        // One transaction: the chain as it is goes, and comes back whole (on), as the least guard
        // (lookup) or empty and hookless (off), so that `set` does the same work either way.
        const gone = `flush chain bridge ${table} guard\ndelete chain bridge ${table} guard\n`;
        const next = state === "on"
          ? own
          : state === "lookup"
          ? lookupChain(table)
          : `add chain bridge ${table} guard\n`;
        await nftIn(ns, gone + next);
        if (state === "lookup") {
          const rules = (await listChain(ns, table)).split("\n").filter((l) => l.includes("@sarp"));
          if (rules.length !== 1) {
            throw new Error(`the least guard of ${ns} has ${rules.length} rules`);
          }
        } else if (state === "on") {
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
