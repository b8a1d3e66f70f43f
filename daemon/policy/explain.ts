/**
 * Whether a connection would be allowed, and why, by the same compiled rules the nodes write
 * ({@link compilePolicies}): the sender's egress, then the receiver's ingress. Pure.
 *
 * @module
 */
import {
  type AllowRule,
  compilePolicies,
  ipInBlock,
  type PolicyPod,
  type PolicyView,
  type PortMatch,
  type Protocol,
} from "./compile.ts";

/** One side's answer. */
export interface SideVerdict {
  /** Allowed this way. */
  allowed: boolean;
  /** Why, as a sentence. */
  why: string;
}

/** The whole answer. */
export interface Explanation {
  /** Allowed both ways (the sender's egress and the receiver's ingress). */
  allowed: boolean;
  /** The sender's egress (when the sender is a pod). */
  egress?: SideVerdict;
  /** The receiver's ingress (when the receiver is a pod). */
  ingress?: SideVerdict;
}

function portMatches(ports: AllowRule["ports"], protocol: Protocol, port?: number): boolean {
  if (ports === "any") return true;
  return ports.some((p: PortMatch) =>
    p.protocol === protocol &&
    (p.port === undefined ||
      (port !== undefined && port >= p.port && port <= (p.endPort ?? p.port)))
  );
}

function peerMatches(peers: AllowRule["peers"], ip: string): boolean {
  if (peers === "any") return true;
  return peers.ips.includes(ip) || peers.blocks.some((b) => ipInBlock(ip, b));
}

function ruleAllows(r: AllowRule, peerIp: string, protocol: Protocol, port?: number): boolean {
  if (r.triples) {
    return r.triples.some((t) => t.ip === peerIp && t.protocol === protocol && t.port === port);
  }
  return peerMatches(r.peers, peerIp) && portMatches(r.ports, protocol, port);
}

function side(
  rules: AllowRule[] | undefined,
  direction: "ingress" | "egress",
  pod: PolicyPod,
  peerIp: string,
  protocol: Protocol,
  port?: number,
): SideVerdict {
  const who = `${pod.namespace}/${pod.name}`;
  if (!rules) {
    return { allowed: true, why: `no policy selects ${who} for ${direction}: open` };
  }
  const hit = rules.find((r) => ruleAllows(r, peerIp, protocol, port));
  if (hit) {
    return {
      allowed: true,
      why: `${direction}[${hit.rule}] of policy ${hit.policy} allows it`,
    };
  }
  return {
    allowed: false,
    why: rules.length
      ? `${who} is isolated for ${direction} and none of its ${rules.length} rule(s) allows it`
      : `${who} is isolated for ${direction} by a policy that allows nothing`,
  };
}

/**
 * Explains a connection from `from` (a pod, or an address outside) to `to` (a pod, or an address)
 * on `protocol`/`port`.
 *
 * @example
 * ```ts
 * explain(view, web, db, "TCP", 5432); // { allowed: true, ingress: { why: "ingress[0] of policy prod/db allows it" … } }
 * ```
 */
export function explain(
  view: PolicyView,
  from: PolicyPod | string,
  to: PolicyPod | string,
  protocol: Protocol,
  port?: number,
): Explanation {
  const ipOf = (x: PolicyPod | string) => typeof x === "string" ? x : x.ips[0] ?? "";
  const out: Explanation = { allowed: true };
  if (typeof from !== "string") {
    const v = compilePolicies(view, [from], ipInBlock)[0];
    out.egress = side(v?.egress, "egress", from, ipOf(to), protocol, port);
  }
  if (typeof to !== "string") {
    const v = compilePolicies(view, [to], ipInBlock)[0];
    out.ingress = side(v?.ingress, "ingress", to, ipOf(from), protocol, port);
  }
  out.allowed = (out.egress?.allowed ?? true) && (out.ingress?.allowed ?? true);
  return out;
}
