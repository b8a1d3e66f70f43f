/**
 * `ipam check` for NAD networks served natively (pure): from the `NetworkBlock` objects, the
 * nodes and the pods, what is wrong with each network's address space — two blocks of one space
 * sharing addresses, an address recorded twice in a space, an allocation whose pod is gone (a
 * leak), a block of a node that no longer exists, a block outside the range it was claimed for.
 *
 * @module
 */
import { cidrContains, cidrsOverlap, lastAddress, parseCidr, parseIp } from "./cidr.ts";
import type { CheckedNode, CheckedPod, Finding } from "./integrity.ts";
import { type NetworkBlockObject, STATIC_RANGE } from "./nad_blocks.ts";

/** What {@link networkFindings} reads. */
export interface NetworkState {
  /** Every NetworkBlock. */
  networkBlocks: NetworkBlockObject[];
  /** Every Node. */
  nodes: CheckedNode[];
  /** Every pod. */
  pods: CheckedPod[];
}

/**
 * The findings of every NAD network's space.
 *
 * @example
 * ```ts
 * networkFindings({ networkBlocks, nodes, pods }); // [] when every space is clean
 * ```
 */
export function networkFindings(state: NetworkState): Finding[] {
  const out: Finding[] = [];
  const nodes = new Set(state.nodes.map((n) => n.name));
  const pods = new Map(
    state.pods.filter((p) => !p.terminated).map((p) => [
      `${p.namespace}/${p.name}`,
      p,
    ]),
  );
  const blocks = state.networkBlocks.filter((b) => b.spec?.cidr && b.spec.network);
  const spaces = new Map<string, NetworkBlockObject[]>();
  for (const b of blocks) spaces.set(b.spec!.network, [...(spaces.get(b.spec!.network) ?? []), b]);
  for (const [space, members] of spaces) {
    const cidrs = members.map((b) => {
      try {
        return parseCidr(b.spec!.cidr);
      } catch {
        return undefined;
      }
    });
    for (let i = 0; i < members.length; i++) {
      for (let j = i + 1; j < members.length; j++) {
        const [a, b] = [cidrs[i], cidrs[j]];
        if (a && b && cidrsOverlap(a, b)) {
          out.push({
            kind: "overlap",
            message: `network ${space}: blocks ${members[i].spec!.cidr} (node ${
              members[i].spec!.node
            }) and ${members[j].spec!.cidr} (node ${members[j].spec!.node}) share addresses`,
          });
        }
      }
    }
    const holders = new Map<string, string[]>();
    for (const [i, b] of members.entries()) {
      const spec = b.spec!;
      if (!nodes.has(spec.node)) {
        out.push({
          kind: "orphan-block",
          message: `network ${space}: block ${spec.cidr} belongs to node ${spec.node}, which ` +
            "no longer exists (the Lease holder reclaims it)",
        });
      }
      const range = spec.range === STATIC_RANGE ? undefined : spec.range.split(" ")[0];
      const within = range && cidrs[i] ? inside(range, cidrs[i]!) : true;
      if (!within) {
        out.push({
          kind: "outside-pools",
          message: `network ${space}: block ${spec.cidr} lies outside its range ${range}`,
        });
      }
      for (const a of spec.allocations ?? []) {
        const who = `${a.namespace ?? "?"}/${
          a.name ?? "?"
        } (container ${a.containerID}, ${a.ifname})`;
        holders.set(a.ip, [...(holders.get(a.ip) ?? []), who]);
        if (cidrs[i] && !cidrContains(cidrs[i]!, parseIpOr(a.ip))) {
          out.push({
            kind: "misplaced",
            ip: a.ip,
            message: `network ${space}: ${a.ip} of ${who} is recorded in block ${spec.cidr}, ` +
              "which does not hold it",
          });
        }
        if (!a.namespace || !a.name) continue;
        const pod = pods.get(`${a.namespace}/${a.name}`);
        if (!pod || (a.podUID && pod.uid && pod.uid !== a.podUID)) {
          out.push({
            kind: "leak",
            ip: a.ip,
            message: `network ${space}: ${a.ip} is recorded for ${who} on node ${spec.node}, ` +
              "whose pod is gone (the node's reconcile loop releases it)",
          });
        }
      }
    }
    for (const [ip, who] of holders) {
      if (who.length < 2) continue;
      out.push({
        kind: "duplicate",
        ip,
        message: `network ${space}: ${ip} is recorded for ${who.length} pods: ${who.join(", ")}`,
      });
    }
  }
  return out;
}

function parseIpOr(text: string) {
  try {
    return parseIp(text);
  } catch {
    return { family: 4 as const, value: -1n };
  }
}

function inside(rangeCidr: string, block: ReturnType<typeof parseCidr>): boolean {
  try {
    const r = parseCidr(rangeCidr);
    return cidrContains(r, block.network) && cidrContains(r, lastAddress(block));
  } catch {
    return false;
  }
}

/** What {@link nodeNetworkFindings} reads: one node's NAD attachments and allocations. */
export interface NodeNetworkState {
  /**
   * The node's attachment records of NAD networks whose IPAM is served natively: owner, the
   * addresses of its result, the config's static `addresses` (never allocated), its pod.
   */
  records: {
    containerId: string;
    ifname: string;
    ips: string[];
    statics?: string[];
    pod?: string;
    /** The NAD (`namespace/name`): the label of a finding on a record that holds no address. */
    nad?: string;
  }[];
  /** Owners of every attachment record of the node (served natively or not). */
  recorded: (owner: { containerId: string; ifname: string }) => boolean;
  /** Every allocation of the node's NAD blocks (`NadNetworkIpam.held`). */
  allocations: {
    network: string;
    cidr: string;
    ip: string;
    owner: { containerId: string; ifname: string };
    adopted: boolean;
  }[];
}

/** A finding of one NAD network's space. */
export type NetworkFinding = Finding & {
  /** The address space (`spaceKey`: network_name and family, or `ippool:NAME/v4`). */
  network: string;
};

/**
 * What is wrong with this node's share of the NAD networks' spaces: an address of a space
 * allocated to (or recorded for) two attachments, an allocation outside its block, an allocation
 * no attachment record owns (a leak), a record whose address is not allocated.
 *
 * @example
 * ```ts
 * nodeNetworkFindings({ records, recorded, allocations }); // [] on a healthy node
 * ```
 */
export function nodeNetworkFindings(state: NodeNetworkState): NetworkFinding[] {
  const out: NetworkFinding[] = [];
  const name = (o: { containerId: string; ifname: string }) => `${o.containerId}/${o.ifname}`;
  const byIp = new Map<string, typeof state.allocations>();
  const byOwner = new Map<string, typeof state.allocations>();
  for (const a of state.allocations) {
    const k = `${a.network}\n${a.ip}`;
    byIp.set(k, [...(byIp.get(k) ?? []), a]);
    byOwner.set(name(a.owner), [...(byOwner.get(name(a.owner)) ?? []), a]);
    let inBlock = false;
    try {
      inBlock = cidrContains(parseCidr(a.cidr), parseIp(a.ip));
    } catch { /* reported as outside */ }
    if (!inBlock) {
      out.push({
        network: a.network,
        kind: "misplaced",
        ip: a.ip,
        message: `network ${a.network}: ${a.ip} (${name(a.owner)}) is allocated outside its ` +
          `block ${a.cidr}`,
      });
    }
    if (!a.adopted && !state.recorded(a.owner)) {
      out.push({
        network: a.network,
        kind: "leak",
        ip: a.ip,
        message: `network ${a.network}: ${a.ip} is allocated to ${name(a.owner)}, which has no ` +
          "record here",
      });
    }
  }
  for (const [, held] of byIp) {
    if (held.length < 2) continue;
    const { network, ip } = held[0];
    out.push({
      network,
      kind: "duplicate",
      ip,
      message: `network ${network}: ${ip} is allocated to ${held.length} interfaces: ${
        held.map((a) => name(a.owner)).join(", ")
      }`,
    });
  }
  for (const r of state.records) {
    const own = byOwner.get(name(r)) ?? [];
    const who = `${name(r)}${r.pod ? ` (pod ${r.pod})` : ""}`;
    for (const ip of r.ips) {
      if (r.statics?.includes(ip) || own.some((a) => a.ip === ip)) continue;
      // Another attachment's address of a space this one draws from: one address, two pods.
      const other = state.allocations.find((a) =>
        a.ip === ip && own.some((o) => o.network === a.network)
      );
      out.push(
        other
          ? {
            network: other.network,
            kind: "duplicate",
            ip,
            message: `network ${other.network}: ${ip} is recorded for ${who} but allocated to ` +
              name(other.owner),
          }
          : {
            network: own[0]?.network ?? r.nad ?? "?",
            kind: "mismatch",
            ip,
            message: `${who} is recorded with ${ip}, which is not allocated on its network`,
          },
      );
    }
  }
  return out;
}
