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
