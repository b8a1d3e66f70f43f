/**
 * Address integrity, checked from the records alone (pure): `ipam check`'s cluster-wide half
 * ({@link clusterFindings}, from the API's pools, blocks, nodes and pods) and each daemon's
 * node-local half ({@link nodeFindings}, from its attachment records, allocations and blocks).
 * Every finding says what is wrong and where, in a sentence an operator can act on.
 *
 * @module
 */
import { type Cidr, cidrContains, cidrsOverlap, formatCidr, parseCidr, parseIp } from "./cidr.ts";
import { type IpBlockObject, type IpPoolObject, parsePool } from "./ip_pools.ts";
import type { NetworkBlockObject } from "./nad_blocks.ts";

/** The kinds of finding. */
export type FindingKind =
  /** One address held by two pods (or two allocations). */
  | "duplicate"
  /** An allocation whose pod is gone. */
  | "leak"
  /** An allocation whose pod exists but carries another address. */
  | "mismatch"
  /** A block of a node that no longer exists. */
  | "orphan-block"
  /** Two blocks sharing addresses. */
  | "overlap"
  /** A block in no pool. */
  | "outside-pools"
  /** A pod whose address lies in no range of its node. */
  | "misplaced";

/** One problem found. */
export interface Finding {
  /** What kind. */
  kind: FindingKind;
  /** The address concerned, when one is. */
  ip?: string;
  /** The sentence. */
  message: string;
}

/** A pod as the check reads it. */
export interface CheckedPod {
  /** Namespace. */
  namespace: string;
  /** Name. */
  name: string;
  /** UID. */
  uid: string;
  /** `spec.nodeName`. */
  node?: string;
  /** Pods of the host network hold the node's address, not one of a pod range. */
  hostNetwork?: boolean;
  /** Its default-network addresses (`status.podIPs`, or network-status' default entry). */
  ips: string[];
  /** Whether the pod is finished (Succeeded, Failed): its address may be reused. */
  terminated?: boolean;
}

/** A node as the check reads it. */
export interface CheckedNode {
  /** Name. */
  name: string;
  /** `spec.podCIDRs`. */
  podCIDRs: string[];
}

/** What the cluster-wide check reads. */
export interface ClusterState {
  /** Every IPPool. */
  pools: IpPoolObject[];
  /** Every IPBlock. */
  blocks: IpBlockObject[];
  /** Every Node. */
  nodes: CheckedNode[];
  /** Every pod. */
  pods: CheckedPod[];
  /** Every NetworkBlock (NAD networks served natively), when read. */
  networkBlocks?: NetworkBlockObject[];
}

function parseOr(text: string): Cidr | undefined {
  try {
    return parseCidr(text.includes("/") ? text : `${text}/${text.includes(":") ? 128 : 32}`);
  } catch {
    return undefined;
  }
}

function contains(cidr: Cidr, ip: string): boolean {
  try {
    return cidrContains(cidr, parseIp(ip));
  } catch {
    return false;
  }
}

const podName = (p: { namespace?: string; name?: string }) => `${p.namespace}/${p.name}`;

/**
 * What is wrong cluster-wide: addresses held twice, leaked or mismatched allocations, blocks of
 * deleted nodes, blocks overlapping each other or outside every pool, pods outside their node's
 * ranges.
 *
 * @example
 * ```ts
 * const findings = clusterFindings({ pools, blocks, nodes, pods });
 * if (findings.length) Deno.exit(1);
 * ```
 */
export function clusterFindings(state: ClusterState): Finding[] {
  const out: Finding[] = [];
  const live = state.pods.filter((p) => !p.hostNetwork && !p.terminated);
  // Addresses held by two pods.
  const holders = new Map<string, CheckedPod[]>();
  for (const p of live) {
    for (const ip of p.ips) holders.set(ip, [...(holders.get(ip) ?? []), p]);
  }
  for (const [ip, pods] of holders) {
    if (pods.length < 2) continue;
    out.push({
      kind: "duplicate",
      ip,
      message: `${ip} is held by ${pods.length} pods: ${
        pods.map((p) => `${podName(p)} on ${p.node ?? "no node"}`).join(", ")
      }`,
    });
  }
  // Allocations: twice, leaked, mismatched.
  const byUid = new Map(state.pods.map((p) => [p.uid, p]));
  const byName = new Map(state.pods.map((p) => [podName(p), p]));
  const allocated = new Map<string, string[]>();
  for (const b of state.blocks) {
    const block = b.spec?.cidr ?? b.metadata?.name ?? "?";
    for (const a of b.spec?.allocations ?? []) {
      allocated.set(a.ip, [...(allocated.get(a.ip) ?? []), `block ${block} (${a.containerID})`]);
      const pod = (a.podUID && byUid.get(a.podUID)) ||
        (!a.podUID && a.namespace && a.name ? byName.get(`${a.namespace}/${a.name}`) : undefined);
      const who = a.namespace && a.name
        ? `pod ${a.namespace}/${a.name}`
        : `container ${a.containerID}`;
      if (!pod || pod.terminated) {
        out.push({
          kind: "leak",
          ip: a.ip,
          message: `${a.ip} in block ${block} of node ${b.spec?.node} is allocated to ${who} ` +
            `(uid ${a.podUID || "unknown"}), which ${pod ? "has finished" : "no longer exists"}`,
        });
      } else if (pod.ips.length && !pod.ips.includes(a.ip)) {
        out.push({
          kind: "mismatch",
          ip: a.ip,
          message: `${a.ip} in block ${block} is allocated to pod ${podName(pod)}, which carries ` +
            `${pod.ips.join(", ")}`,
        });
      }
    }
  }
  for (const [ip, where] of allocated) {
    if (where.length > 1) {
      out.push({
        kind: "duplicate",
        ip,
        message: `${ip} is allocated ${where.length} times: ${where.join(", ")}`,
      });
    }
  }
  // Blocks: of deleted nodes, overlapping, outside every pool.
  const nodes = new Set(state.nodes.map((n) => n.name));
  const poolCidrs = state.pools.flatMap((p) => {
    try {
      return parsePool(p).map((f) => f.cidr);
    } catch {
      return [];
    }
  });
  const blocks = state.blocks.flatMap((b) => {
    const cidr = b.spec?.cidr ? parseOr(b.spec.cidr) : undefined;
    return cidr ? [{ obj: b, cidr }] : [];
  });
  for (const { obj, cidr } of blocks) {
    const node = obj.spec?.node ?? "";
    if (!nodes.has(node)) {
      out.push({
        kind: "orphan-block",
        message: `block ${formatCidr(cidr)} belongs to node ${node}, which no longer exists`,
      });
    }
    if (!poolCidrs.some((p) => cidrContains(p, cidr.network) && p.prefix <= cidr.prefix)) {
      out.push({
        kind: "outside-pools",
        message: `block ${formatCidr(cidr)} (IPPool ${obj.spec?.pool}) lies in no IPPool`,
      });
    }
  }
  for (let i = 0; i < blocks.length; i++) {
    for (let j = i + 1; j < blocks.length; j++) {
      if (!cidrsOverlap(blocks[i].cidr, blocks[j].cidr)) continue;
      out.push({
        kind: "overlap",
        message: `blocks ${formatCidr(blocks[i].cidr)} (node ${blocks[i].obj.spec?.node}) and ` +
          `${formatCidr(blocks[j].cidr)} (node ${blocks[j].obj.spec?.node}) overlap`,
      });
    }
  }
  // Pods outside their node's ranges (its podCIDRs and its blocks), when the node has any.
  const rangesOf = new Map<string, Cidr[]>();
  for (const n of state.nodes) {
    rangesOf.set(n.name, n.podCIDRs.flatMap((c) => parseOr(c) ?? []));
  }
  for (const { obj, cidr } of blocks) {
    const node = obj.spec?.node ?? "";
    rangesOf.set(node, [...(rangesOf.get(node) ?? []), cidr]);
  }
  for (const p of live) {
    const ranges = p.node ? rangesOf.get(p.node) ?? [] : [];
    if (!ranges.length) continue;
    for (const ip of p.ips) {
      if (ranges.some((r) => contains(r, ip))) continue;
      // An address from an additional network's own range is not the node's business.
      if (
        !poolCidrs.some((c) => contains(c, ip)) && !state.nodes.some((n) =>
          n.podCIDRs.some((c) => {
            const r = parseOr(c);
            return r ? contains(r, ip) : false;
          })
        )
      ) continue;
      out.push({
        kind: "misplaced",
        ip,
        message: `pod ${podName(p)} on node ${p.node} carries ${ip}, which lies in none of the ` +
          "node's ranges",
      });
    }
  }
  return out;
}

/** What the node-local half reads. */
export interface NodeState {
  /** Every default-network attachment record of the node: its owner and addresses. */
  records: { containerId: string; ifname: string; ips: string[]; pod?: string }[];
  /** Every allocation of the node's allocators. */
  allocations: { ip: string; owner: { containerId: string; ifname: string } }[];
  /** The ranges the node allocates in now (its blocks, its podCIDRs, its subnets). */
  ranges: string[];
  /** Owners whose addresses were adopted from a block object (no record here, not leaked). */
  adopted?: (owner: { containerId: string; ifname: string }) => boolean;
}

/**
 * What is wrong on this node: an address recorded for two attachments, an allocation outside the
 * node's ranges or whose owner has no record (leaked), a record whose address is not allocated.
 */
export function nodeFindings(state: NodeState): Finding[] {
  const out: Finding[] = [];
  const byIp = new Map<string, string[]>();
  for (const r of state.records) {
    for (const ip of r.ips) {
      byIp.set(ip, [
        ...(byIp.get(ip) ?? []),
        `${r.containerId}/${r.ifname}${r.pod ? ` (pod ${r.pod})` : ""}`,
      ]);
    }
  }
  for (const [ip, who] of byIp) {
    if (who.length > 1) {
      out.push({
        kind: "duplicate",
        ip,
        message: `${ip} is recorded for ${who.length} interfaces: ${who.join(", ")}`,
      });
    }
  }
  const ranges = state.ranges.flatMap((r) => parseOr(r) ?? []);
  const recorded = new Set(state.records.map((r) => `${r.containerId}/${r.ifname}`));
  const allocatedIps = new Set<string>();
  for (const a of state.allocations) {
    allocatedIps.add(a.ip);
    const key = `${a.owner.containerId}/${a.owner.ifname}`;
    if (!ranges.some((r) => contains(r, a.ip))) {
      out.push({
        kind: "overlap",
        ip: a.ip,
        message: `${a.ip} (${key}) is allocated outside every range this node holds now`,
      });
    }
    if (!recorded.has(key) && !state.adopted?.(a.owner)) {
      out.push({
        kind: "leak",
        ip: a.ip,
        message: `${a.ip} is allocated to ${key}, which has no record here`,
      });
    }
  }
  for (const r of state.records) {
    for (const ip of r.ips) {
      if (allocatedIps.has(ip)) continue;
      out.push({
        kind: "mismatch",
        ip,
        message: `${r.containerId}/${r.ifname} is recorded with ${ip}, which is not allocated`,
      });
    }
  }
  return out;
}
