/**
 * Masquerade: traffic from this node's pods to anything that is not a pod (nor a configured
 * exception, nor a broadcast, multicast or link-local destination: bridged traffic passes the
 * same hook) leaves with the node's address; pod-to-pod traffic keeps the pod's. One nftables
 * table (family `inet`) is Ferry's; it is replaced whole in one `nft -f` transaction whenever the
 * ranges change, and deleted on uninstall (`nft delete table inet ferry`).
 *
 * @module
 */
import { type ChildOutput, ChildSet } from "../runtime/child_set.ts";
import { Deadline } from "../runtime/deadline.ts";

/**
 * IPv4 destinations that stay on the link: limited broadcast, multicast. (Not 169.254.0.0/16:
 * a cloud's metadata service, 169.254.169.254, is reached through the node and must see its
 * address.)
 */
const LINK_ONLY_4 = ["255.255.255.255/32", "224.0.0.0/4"];
/** IPv6 destinations that stay on the link (or are multicast): link-local, multicast. */
const LINK_ONLY_6 = ["fe80::/10", "ff00::/8"];

/**
 * The ruleset text for `nft -f`: creates the table if missing, deletes it and creates it again
 * with its content, all in one transaction (no moment without rules).
 *
 * @example
 * ```ts
 * masqueradeRuleset("ferry", ["10.244.1.0/24"], ["10.244.0.0/16"]);
 * ```
 */
export function masqueradeRuleset(table: string, own: string[], noMasquerade: string[]): string {
  const lines = [`table inet ${table}`, `delete table inet ${table}`, `table inet ${table} {`];
  const rules: string[] = [];
  for (const [family, v6] of [["ip", false], ["ip6", true]] as const) {
    const mine = own.filter((c) => c.includes(":") === v6);
    if (!mine.length) continue;
    // What never leaves the link is never masqueraded: bridged broadcast, multicast and
    // link-local traffic (which the bridge's netfilter hooks also see) keeps its sender.
    const linkOnly = v6 ? LINK_ONLY_6 : LINK_ONLY_4;
    const others = [
      ...new Set([...mine, ...noMasquerade.filter((c) => c.includes(":") === v6), ...linkOnly]),
    ];
    const type = v6 ? "ipv6_addr" : "ipv4_addr";
    const n = v6 ? "6" : "4";
    lines.push(
      `  set pods${n} { type ${type}; flags interval; auto-merge; elements = { ${
        mine.join(", ")
      } } }`,
      `  set cluster${n} { type ${type}; flags interval; auto-merge; elements = { ${
        others.join(", ")
      } } }`,
    );
    rules.push(`    ${family} saddr @pods${n} ${family} daddr != @cluster${n} masquerade`);
  }
  lines.push(
    "  chain postrouting {",
    "    type nat hook postrouting priority srcnat; policy accept;",
    ...rules,
    "  }",
    "}",
  );
  return lines.join("\n") + "\n";
}

/** Applies and removes Ferry's nftables table. */
export interface Nft {
  /** Runs a ruleset as one transaction (given up, the process killed, when `signal` aborts). */
  apply(ruleset: string, signal?: AbortSignal): Promise<void>;
  /** Deletes the table; a missing one is fine. */
  remove(table: string): Promise<void>;
  /**
   * `nft -j list table inet <table>`: its JSON, or undefined when there is no such table;
   * rejects when the listing fails otherwise; given up (the process killed) when `signal` aborts.
   */
  listJson?(table: string, signal?: AbortSignal): Promise<string | undefined>;
  /** Runs a ruleset as one transaction inside the network namespace at path `netns`. */
  applyIn?(netns: string, ruleset: string): Promise<void>;
  /** Kills every process still running (the daemon stops) and refuses new runs. */
  close?(): void;
}

/** How an {@link NftRunner} runs `nft`. */
export interface NftRunnerOptions {
  /** Replaces `nft` (found on PATH otherwise). */
  nft?: string;
  /** Replaces `nsenter` (found on PATH otherwise). */
  nsenter?: string;
  /** The family of the tables it lists and removes (default `inet`). */
  family?: "inet" | "bridge";
  /** Every run is given up (its process killed) after this long (default: no limit). */
  timeoutMs?: number;
  /** The set its processes run in (default: its own); closing it kills them. */
  children?: ChildSet;
}

/**
 * `nft` from Debian's nftables package. Every process it starts ends with it ({@link ChildSet}):
 * killed when its caller's signal aborts or its timeout passes, and all of them on
 * {@link NftRunner.close}.
 *
 * @example
 * ```ts
 * await new NftRunner().apply(masqueradeRuleset("ferry", own, cluster));
 * await new NftRunner({ family: "bridge", timeoutMs: 30_000 }).listJson("ferry-portsec");
 * ```
 */
export class NftRunner implements Nft {
  readonly #children: ChildSet;
  readonly #nft: string;
  readonly #nsenter: string;
  readonly #family: "inet" | "bridge";
  readonly #timeoutMs?: number;

  /** Options as {@link NftRunnerOptions} says; none: `nft` on PATH, `inet`, no time limit. */
  constructor(options: NftRunnerOptions = {}) {
    this.#nft = options.nft ?? "nft";
    this.#nsenter = options.nsenter ?? "nsenter";
    this.#family = options.family ?? "inet";
    this.#timeoutMs = options.timeoutMs;
    this.#children = options.children ?? new ChildSet();
  }

  /** Runs `nft -f -` with the ruleset on stdin. */
  apply(ruleset: string, signal?: AbortSignal): Promise<void> {
    return this.#run(this.#nft, ["-f", "-"], ruleset, signal);
  }

  /** The same inside the network namespace at path `netns` (`nsenter --net`). */
  applyIn(netns: string, ruleset: string): Promise<void> {
    return this.#run(this.#nsenter, [`--net=${netns}`, "--", this.#nft, "-f", "-"], ruleset);
  }

  async #run(cmd: string, args: string[], ruleset: string, signal?: AbortSignal): Promise<void> {
    const out = await this.#spawn(cmd, args, { stdin: ruleset, signal });
    if (!out.success) {
      throw new Error(`nft -f failed: ${new TextDecoder().decode(out.stderr).trim()}`);
    }
  }

  /** One process of the set, given up at the caller's signal or the runner's timeout. */
  async #spawn(
    cmd: string,
    args: string[],
    opts: { stdin?: string; stdout?: boolean; signal?: AbortSignal } = {},
  ): Promise<ChildOutput> {
    using deadline = this.#timeoutMs === undefined ? undefined : new Deadline(this.#timeoutMs);
    const signals = [opts.signal, deadline?.signal].filter((s) => s !== undefined);
    const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
    return await this.#children.run(cmd, args, { ...opts, signal });
  }

  /** `nft -j list table <family> <table>`; undefined when the table does not exist. */
  async listJson(table: string, signal?: AbortSignal): Promise<string | undefined> {
    const out = await this.#spawn(this.#nft, ["-j", "list", "table", this.#family, table], {
      stdout: true,
      signal,
    });
    if (out.success) return new TextDecoder().decode(out.stdout);
    // Undefined only for a table that is not there; any other failure (killed at its deadline
    // on a busy node) says nothing of the table.
    const why = new TextDecoder().decode(out.stderr).trim();
    if (/No such file or directory/.test(why)) return undefined;
    throw new Error(`nft -j list table ${this.#family} ${table} failed: ${why || "killed"}`);
  }

  /** `nft delete table <family> <table>`. */
  async remove(table: string): Promise<void> {
    const out = await this.#spawn(this.#nft, ["delete", "table", this.#family, table]);
    const err = new TextDecoder().decode(out.stderr);
    if (!out.success && !/No such file or directory/.test(err)) {
      throw new Error(`nft delete table failed: ${err.trim()}`);
    }
  }

  /** Kills every `nft` still running (in its set: a shared one with them) and refuses new runs. */
  close(): void {
    this.#children.close();
  }
}
