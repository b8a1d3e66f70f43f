/**
 * `kubectl ferry status` as a person reads it: a block per node and a summary line. Pure; colours
 * only when asked for (the entry point asks when stdout is a terminal).
 *
 * @module
 */
import type { ClusterStatus, NodeStatus, RangeUse } from "./status.ts";

/** Colours, or none. */
export interface Paint {
  /** Good news. */
  ok(s: string): string;
  /** Bad news. */
  bad(s: string): string;
  /** Less important. */
  dim(s: string): string;
}

/** No colours. */
export const PLAIN: Paint = { ok: (s) => s, bad: (s) => s, dim: (s) => s };

/** ANSI colours, for a terminal. */
export const ANSI: Paint = {
  ok: (s) => `\x1b[32m${s}\x1b[0m`,
  bad: (s) => `\x1b[31m${s}\x1b[0m`,
  dim: (s) => `\x1b[2m${s}\x1b[0m`,
};

/** `3h12m`, `4m05s`, `12s`. */
export function duration(seconds: number): string {
  const d = Math.floor(seconds / 86400), h = Math.floor(seconds / 3600) % 24;
  const m = Math.floor(seconds / 60) % 60, s = seconds % 60;
  if (d) return `${d}d${h}h`;
  if (h) return `${h}h${String(m).padStart(2, "0")}m`;
  if (m) return `${m}m${String(s).padStart(2, "0")}s`;
  return `${s}s`;
}

/** A range's use with a bar of `width` cells. */
export function rangeLine(r: RangeUse, width = 20): string {
  const filled = Math.min(width, Math.ceil((r.used / r.size) * width));
  const free = r.size - r.used;
  const freeText = free > 1e9 ? `${free.toExponential(1)}` : String(free);
  return `${r.cidr.padEnd(18)} [${"#".repeat(filled)}${".".repeat(width - filled)}] ` +
    `${r.used} used, ${freeText} free`;
}

function nodeBlock(n: NodeStatus, routing: string | undefined, p: Paint): string[] {
  const lines = [`${n.node}  ${n.healthy ? p.ok("ok") : p.bad("UNHEALTHY")}`];
  const row = (label: string, text: string) => lines.push(`  ${label.padEnd(8)} ${text}`);
  if (n.pod) {
    row(
      "pod",
      `${n.pod.name}  ${n.pod.ready ? "ready" : p.bad("not ready")}  image ${n.pod.image}  ` +
        `restarts ${n.pod.restarts}` +
        (n.pod.uptimeSeconds !== undefined ? `  up ${duration(n.pod.uptimeSeconds)}` : ""),
    );
  }
  if (n.ipamMode || n.podsPlugged !== undefined) {
    row("ipam", `${n.ipamMode ?? "?"}  ${n.podsPlugged ?? "?"} interfaces plugged`);
  }
  for (const r of n.ranges) row("range", rangeLine(r));
  if (n.routes) {
    row(
      "routes",
      `${n.routes.inPlace}/${n.routes.expected} to other nodes' pods in place (routing ${
        routing ?? "?"
      })` + (n.routes.unroutable.length ? `, unroutable ${n.routes.unroutable.join(", ")}` : ""),
    );
  }
  if (n.policy) {
    row(
      "policy",
      `${n.policy.policies} policies, ${n.policy.isolatedPods} isolated pods, ` +
        `${n.policy.writes} table writes, ${n.policy.failures} failed` +
        (n.policy.lastWriteSecondsAgo !== undefined
          ? `, last write ${duration(n.policy.lastWriteSecondsAgo)} ago`
          : "") +
        (n.policy.lastFailureSecondsAgo !== undefined
          ? `, last failure ${duration(n.policy.lastFailureSecondsAgo)} ago`
          : ""),
    );
  }
  if (n.portSecurity) row("portsec", portSecurityText(n.portSecurity));
  for (const w of n.warnings.slice(-5)) {
    row("warning", p.dim(`${w.object} ${w.reason} ×${w.count}: ${w.message}`));
  }
  for (const why of n.problems) row("problem", p.bad(why));
  return lines;
}

/**
 * Port security's line: `on, 12 ports guarded, dropped arp 2, ipv4 3` (or `none dropped`), or
 * `off`.
 */
export function portSecurityText(ps: NonNullable<NodeStatus["portSecurity"]>): string {
  if (!ps.enabled) return "off";
  const kinds = Object.entries(ps.dropped).filter(([, n]) => n > 0).sort(([a], [b]) =>
    a.localeCompare(b)
  );
  return `on, ${ps.guardedPorts ?? "?"} ports guarded, ` +
    (kinds.length ? `dropped ${kinds.map(([k, n]) => `${k} ${n}`).join(", ")}` : "none dropped");
}

/** The summary line. */
export function summaryLine(s: ClusterStatus): string {
  const bad = s.nodes.filter((n) => !n.healthy);
  const head = `${s.nodes.length} nodes, ${s.nodes.length - bad.length} healthy`;
  if (!bad.length) return head;
  return `${head}, ${bad.length} unhealthy: ` +
    bad.map((n) => `${n.node} (${n.problems[0]})`).join("; ");
}

/**
 * The whole report, ending with the summary line.
 *
 * @example
 * ```ts
 * console.log(statusText(await readStatus(deps), PLAIN));
 * ```
 */
export function statusText(s: ClusterStatus, p: Paint = PLAIN): string {
  return [...s.nodes.flatMap((n) => [...nodeBlock(n, s.routing, p), ""]), summaryLine(s)]
    .join("\n") + "\n";
}
