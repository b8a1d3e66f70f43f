/**
 * The node-local half of `ipam check`, run by the daemon after every sweep of its reconcile loop:
 * its attachment records, its allocations and the ranges it holds, compared
 * ({@link nodeFindings}). A finding counts once it was there at two checks in a row (an ADD in
 * flight holds an address a moment before its record is written); it is then logged once, counted
 * in the metrics (`ferry_ipam_conflicts`, `ferry_ipam_leaked_addresses`), and an address recorded
 * for two interfaces is a Warning Event (`IPAddressConflict`) on each pod concerned.
 *
 * NAD networks served natively (whereabouts configs in native mode, the `ferry` type) are checked
 * the same way, each address space on its own ({@link nodeNetworkFindings}: the node's NAD
 * allocations against its attachment records and its NetworkBlocks), and counted per space
 * (`ferry_nad_ipam_conflicts{network}`, `ferry_nad_ipam_leaked_addresses{network}`).
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { PodRef } from "../../lib/cni/args.ts";
import type { NetConf } from "../../lib/cni/schemas.ts";
import type { Attachment } from "../records/attachment_store.ts";
import { type Finding, nodeFindings } from "./integrity.ts";
import {
  type NetworkFinding,
  nodeNetworkFindings,
  type NodeNetworkState,
} from "./nad_integrity.ts";
import type { Owner } from "./local_pool.ts";

/** What the check reads and where it reports. */
export interface NodeCheckDeps {
  /** The node's attachment records. */
  records: () => Attachment[];
  /** The default network's allocations now (none before it opens), each with whether adopted. */
  allocations: () => { ip: string; owner: Owner; adopted: boolean }[];
  /** The ranges it allocates in now. */
  ranges: () => string[];
  /** What the node's NAD IPAM holds now; undefined while it is not open (nothing to check). */
  networks?: () => NodeNetworkState["allocations"] | undefined;
  /** Whether a NAD attachment's IPAM (its first plugin's config) is served natively. */
  servedNatively?: (conf: NetConf) => boolean;
  /** Records a Warning Event on a pod (best effort). */
  event?: (pod: PodRef, reason: string, message: string) => void;
  /** Where to log. */
  logger: Logger;
}

/** What the last check found (counted findings only). */
export interface NodeCheckStats {
  /** Checks run. */
  checks: number;
  /** Addresses recorded twice, allocated outside the node's ranges, recorded but not allocated. */
  conflicts: number;
  /** Addresses allocated to owners with no record. */
  leaked: number;
  /** The counted findings' sentences. */
  findings: string[];
  /**
   * NAD networks served natively, per address space this node holds blocks of (or has findings
   * in): the same counts. `conflicts` and `leaked` above are the default network's.
   */
  networks?: { network: string; conflicts: number; leaked: number }[];
}

const CONFLICTS = new Set(["duplicate", "overlap", "mismatch", "misplaced"]);
const keyOf = (f: Finding) => `${f.kind} ${f.ip ?? ""} ${f.message}`;
const ipsOf = (r: Attachment) => (r.result.ips ?? []).map((ip) => ip.address.split("/")[0]);
const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);

/** A whereabouts config's static `addresses` (in its results, never allocated). */
function staticsOf(conf: NetConf): string[] {
  const ipam: unknown = conf.ipam;
  const list = isObject(ipam) ? ipam.addresses : undefined;
  return Array.isArray(list)
    ? list.flatMap((a) =>
      isObject(a) && typeof a.address === "string" ? [a.address.split("/")[0]] : []
    )
    : [];
}

/**
 * The check.
 *
 * @example
 * ```ts
 * const check = new NodeCheck({ records, allocations, ranges, logger });
 * await gcSweep(); check.run();
 * check.stats().conflicts;
 * ```
 */
export class NodeCheck {
  readonly #d: NodeCheckDeps;
  #previous = new Set<string>();
  readonly #reported = new Set<string>();
  #stats: NodeCheckStats = { checks: 0, conflicts: 0, leaked: 0, findings: [] };

  /** Creates the check. */
  constructor(deps: NodeCheckDeps) {
    this.#d = deps;
  }

  /** Runs one check; returns the findings counted by it. */
  run(): Finding[] {
    const records = this.#d.records().filter((r) =>
      (r.driver ?? "bridge") === "bridge" && !r.parent
    );
    const allocations = this.#d.allocations();
    const adopted = new Set(
      allocations.filter((a) => a.adopted).map((a) => `${a.owner.containerId}/${a.owner.ifname}`),
    );
    const found = nodeFindings({
      records: records.map((r) => ({
        containerId: r.containerId,
        ifname: r.ifname,
        ips: (r.result.ips ?? []).map((ip) => ip.address.split("/")[0]),
        pod: r.pod ? `${r.pod.namespace}/${r.pod.name}` : undefined,
      })),
      allocations,
      ranges: this.#d.ranges(),
      adopted: (o) => adopted.has(`${o.containerId}/${o.ifname}`),
    });
    const held = this.#d.networks?.();
    const all = this.#d.records();
    const nadRecords = held
      ? all.filter((r) => r.parent || r.defaultNetwork || (r.driver ?? "bridge") !== "bridge")
        .filter((r) => {
          const conf = r.chain?.[0] ?? r.conf;
          return !!conf && !!this.#d.servedNatively?.(conf);
        })
      : [];
    const recorded = new Set(all.map((r) => `${r.containerId}/${r.ifname}`));
    const networkFound: NetworkFinding[] = held
      ? nodeNetworkFindings({
        records: nadRecords.map((r) => ({
          containerId: r.containerId,
          ifname: r.ifname,
          ips: ipsOf(r),
          statics: staticsOf(r.chain?.[0] ?? r.conf!),
          pod: r.pod ? `${r.pod.namespace}/${r.pod.name}` : undefined,
          nad: r.network,
        })),
        recorded: (o) => recorded.has(`${o.containerId}/${o.ifname}`),
        allocations: held,
      })
      : [];
    const keys = new Set([...found, ...networkFound].map(keyOf));
    const countedNetworks = networkFound.filter((f) => this.#previous.has(keyOf(f)));
    const counted = found.filter((f) => this.#previous.has(keyOf(f)));
    this.#previous = keys;
    const report = (f: Finding, among: Attachment[]) => {
      const key = keyOf(f);
      if (this.#reported.has(key)) return;
      this.#reported.add(key);
      this.#d.logger.error("ipam check on this node: {kind}: {message}", {
        kind: f.kind,
        message: f.message,
      });
      if (f.kind === "duplicate" && f.ip) {
        for (const r of among) {
          if (!r.pod || !ipsOf(r).includes(f.ip)) continue;
          this.#d.event?.(r.pod, "IPAddressConflict", `Ferry: ${f.message}`);
        }
      }
    };
    for (const f of counted) report(f, records);
    for (const f of countedNetworks) report(f, nadRecords);
    // What is no longer found may be reported again should it come back.
    for (const key of [...this.#reported]) if (!keys.has(key)) this.#reported.delete(key);
    this.#stats = {
      checks: this.#stats.checks + 1,
      conflicts: counted.filter((f) => CONFLICTS.has(f.kind)).length,
      leaked: counted.filter((f) => f.kind === "leak").length,
      findings: [...counted, ...countedNetworks].map((f) => `${f.kind}: ${f.message}`),
      ...(this.#d.networks ? { networks: perNetwork(held ?? [], countedNetworks) } : {}),
    };
    return [...counted, ...countedNetworks];
  }

  /** What the last check counted. */
  stats(): NodeCheckStats {
    return {
      ...this.#stats,
      findings: [...this.#stats.findings],
      ...(this.#stats.networks ? { networks: this.#stats.networks.map((n) => ({ ...n })) } : {}),
    };
  }
}

/** The counts per address space: every space held here (0 when clean), and those with findings. */
function perNetwork(
  held: NodeNetworkState["allocations"],
  counted: NetworkFinding[],
): NodeCheckStats["networks"] {
  const by = new Map<string, { network: string; conflicts: number; leaked: number }>();
  const of = (network: string) => {
    let n = by.get(network);
    if (!n) by.set(network, n = { network, conflicts: 0, leaked: 0 });
    return n;
  };
  for (const a of held) of(a.network);
  for (const f of counted) {
    if (f.kind === "leak") of(f.network).leaked++;
    else if (CONFLICTS.has(f.kind)) of(f.network).conflicts++;
  }
  return [...by.values()].sort((a, b) => a.network.localeCompare(b.network));
}
