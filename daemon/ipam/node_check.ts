/**
 * The node-local half of `ipam check`, run by the daemon after every sweep of its reconcile loop:
 * its attachment records, its allocations and the ranges it holds, compared
 * ({@link nodeFindings}). A finding counts once it was there at two checks in a row (an ADD in
 * flight holds an address a moment before its record is written); it is then logged once, counted
 * in the metrics (`ferry_ipam_conflicts`, `ferry_ipam_leaked_addresses`), and an address recorded
 * for two interfaces is a Warning Event (`IPAddressConflict`) on each pod concerned.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { PodRef } from "../../lib/cni/args.ts";
import type { Attachment } from "../records/attachment_store.ts";
import { type Finding, nodeFindings } from "./integrity.ts";
import type { Owner } from "./local_pool.ts";

/** What the check reads and where it reports. */
export interface NodeCheckDeps {
  /** The node's attachment records. */
  records: () => Attachment[];
  /** The default network's allocations now (none before it opens), each with whether adopted. */
  allocations: () => { ip: string; owner: Owner; adopted: boolean }[];
  /** The ranges it allocates in now. */
  ranges: () => string[];
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
}

const CONFLICTS = new Set(["duplicate", "overlap", "mismatch"]);
const keyOf = (f: Finding) => `${f.kind} ${f.ip ?? ""} ${f.message}`;

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
    const keys = new Set(found.map(keyOf));
    const counted = found.filter((f) => this.#previous.has(keyOf(f)));
    this.#previous = keys;
    for (const f of counted) {
      const key = keyOf(f);
      if (this.#reported.has(key)) continue;
      this.#reported.add(key);
      this.#d.logger.error("ipam check on this node: {kind}: {message}", {
        kind: f.kind,
        message: f.message,
      });
      if (f.kind === "duplicate" && f.ip) {
        for (const r of records) {
          if (!r.pod || !(r.result.ips ?? []).some((ip) => ip.address.split("/")[0] === f.ip)) {
            continue;
          }
          this.#d.event?.(r.pod, "IPAddressConflict", `Ferry: ${f.message}`);
        }
      }
    }
    // What is no longer found may be reported again should it come back.
    for (const key of [...this.#reported]) if (!keys.has(key)) this.#reported.delete(key);
    this.#stats = {
      checks: this.#stats.checks + 1,
      conflicts: counted.filter((f) => CONFLICTS.has(f.kind)).length,
      leaked: counted.filter((f) => f.kind === "leak").length,
      findings: counted.map((f) => `${f.kind}: ${f.message}`),
    };
    return counted;
  }

  /** What the last check counted. */
  stats(): NodeCheckStats {
    return { ...this.#stats, findings: [...this.#stats.findings] };
  }
}
