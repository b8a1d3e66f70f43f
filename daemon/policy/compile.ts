/**
 * NetworkPolicy semantics, pure: from the cluster's policies, namespaces and pods, what each pod
 * of this node may receive and send. A pod selected by no policy of a type is open for that type;
 * one selected by any is isolated for it and receives (sends) only what some rule of some
 * selecting policy allows, so policies add up. `policyTypes` absent means Ingress, plus Egress
 * when the policy has egress rules. A rule with no peers allows every peer, one with no ports
 * every port; a peer with `podSelector` alone selects pods of the policy's namespace, with
 * `namespaceSelector` alone every pod of the selected namespaces, with both the selected pods of
 * the selected namespaces; `ipBlock` is a CIDR less its `except`s. A named port resolves on the
 * pod that receives: the selected pod itself for ingress, each peer pod for egress. Pods on the
 * host's network are never selected as peers by pod selectors, and pods that are done (Succeeded,
 * Failed) or have no address are never peers.
 *
 * @module
 */
import type {
  NetworkPolicy,
  NetworkPolicyPeer,
  NetworkPolicyPort,
} from "kubernetes-types/networking/v1.d.ts";
import { type Labels, selects } from "./selector.ts";
import { cidrContains, parseCidr, parseIp } from "../ipam/cidr.ts";

/** Transport protocols a policy names. */
export type Protocol = "TCP" | "UDP" | "SCTP";

/** A container port a pod declares with a name. */
export interface NamedPort {
  /** The port's name. */
  name: string;
  /** Its number. */
  port: number;
  /** Its protocol. */
  protocol: Protocol;
}

/** What policies need of a pod. */
export interface PolicyPod {
  /** Namespace. */
  namespace: string;
  /** Name. */
  name: string;
  /** Labels. */
  labels: Labels;
  /** Its addresses (status.podIPs), or those just plugged on this node. */
  ips: string[];
  /** On the host's network: never a pod-selector peer, never enforced on. */
  hostNetwork: boolean;
  /** Succeeded or Failed: its addresses may be anyone's now. */
  done: boolean;
  /** Its containers' named ports. */
  ports: NamedPort[];
}

/** The cluster as policies see it. */
export interface PolicyView {
  /** Every NetworkPolicy. */
  policies: NetworkPolicy[];
  /** Namespace labels, by name. */
  namespaces: Map<string, Labels>;
  /** Every pod of the cluster. */
  pods: PolicyPod[];
}

/** A CIDR less some of it. */
export interface AddressBlock {
  /** The CIDR. */
  cidr: string;
  /** What is taken out of it. */
  except: string[];
}

/** A port match: a protocol, and a port or a range of them (none: every port). */
export interface PortMatch {
  /** The protocol. */
  protocol: Protocol;
  /** The port (or the range's start). */
  port?: number;
  /** The range's end (inclusive). */
  endPort?: number;
}

/** One allowing rule, resolved to addresses and numbers. */
export interface AllowRule {
  /** `namespace/name` of its policy, and the rule's index in its direction. */
  policy: string;
  /** Index of the rule within the policy's ingress or egress list. */
  rule: number;
  /** The peers: every address, or these pod addresses and blocks. */
  peers: "any" | { ips: string[]; blocks: AddressBlock[] };
  /**
   * The same pod addresses by the peer that selects them (`key`: the selectors, in the policy's
   * namespace for a pod selector alone), so that rules with the same peer share one set of
   * addresses: what a pod joining or leaving a selector changes.
   */
  peerSets?: PeerSet[];
  /** The ports: every port, or these. */
  ports: "any" | PortMatch[];
  /**
   * Egress to named ports: exactly these (peer address, protocol, port) triples (each peer's own
   * number for the name); `peers` and `ports` are then "any" and not used.
   */
  triples?: { ip: string; protocol: Protocol; port: number }[];
}

/** The addresses one peer (its selectors) picks. */
export interface PeerSet {
  /** The peer's selectors, canonical: equal keys pick the same pods. */
  key: string;
  /** The addresses, sorted. */
  ips: string[];
}

/** What one pod of the node may receive and send; `undefined`: not isolated that way. */
export interface PodVerdict {
  /** The pod. */
  pod: PolicyPod;
  /** Ingress rules when isolated for ingress (an empty list: nothing is allowed in). */
  ingress?: AllowRule[];
  /** Egress rules when isolated for egress. */
  egress?: AllowRule[];
}

/** The policy's types, explicit or implied. */
export function policyTypes(p: NetworkPolicy): { ingress: boolean; egress: boolean } {
  const types = p.spec?.policyTypes;
  if (types && types.length) {
    return { ingress: types.includes("Ingress"), egress: types.includes("Egress") };
  }
  return { ingress: true, egress: (p.spec?.egress ?? []).length > 0 };
}

/** Whether policy `p` selects `pod`. */
export function policySelects(p: NetworkPolicy, pod: PolicyPod): boolean {
  return (p.metadata?.namespace ?? "default") === pod.namespace && !pod.hostNetwork &&
    selects(p.spec?.podSelector ?? {}, pod.labels);
}

/** Whether `pod` can be a peer at all. */
function peerable(pod: PolicyPod): boolean {
  return !pod.hostNetwork && !pod.done && pod.ips.length > 0;
}

/** The pods a peer's selectors pick (none for an ipBlock peer). */
function selectedPods(
  peer: NetworkPolicyPeer,
  policyNamespace: string,
  view: PolicyView,
): PolicyPod[] {
  if (!peer.podSelector && !peer.namespaceSelector) return [];
  return view.pods.filter((pod) => {
    if (!peerable(pod)) return false;
    if (peer.namespaceSelector) {
      if (!selects(peer.namespaceSelector, view.namespaces.get(pod.namespace) ?? {})) return false;
    } else if (pod.namespace !== policyNamespace) return false;
    return peer.podSelector ? selects(peer.podSelector, pod.labels) : true;
  });
}

/** JSON with object keys sorted, so equal selectors have equal text. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v && typeof v === "object") {
    return `{${
      Object.keys(v).sort().map((k) =>
        `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`
      ).join(",")
    }}`;
  }
  return JSON.stringify(v);
}

/** A peer's selectors as a key: the pods it picks depend on nothing else. */
function peerKey(peer: NetworkPolicyPeer, policyNamespace: string): string {
  const where = peer.namespaceSelector
    ? `namespaces ${canonical(peer.namespaceSelector)}`
    : `namespace ${policyNamespace}`;
  return `${where} pods ${canonical(peer.podSelector ?? {})}`;
}

/** Pod addresses by peer key, computed once per compile (many pods share a policy's peers). */
type PeerCache = Map<string, string[]>;

function peerAddresses(
  peer: NetworkPolicyPeer,
  policyNamespace: string,
  view: PolicyView,
  cache: PeerCache,
): PeerSet {
  const key = peerKey(peer, policyNamespace);
  let ips = cache.get(key);
  if (!ips) {
    ips = [...new Set(selectedPods(peer, policyNamespace, view).flatMap((p) => p.ips))].sort();
    cache.set(key, ips);
  }
  return { key, ips };
}

function protocolOf(p: NetworkPolicyPort): Protocol {
  const proto = (p.protocol ?? "TCP").toUpperCase();
  return proto === "UDP" || proto === "SCTP" ? proto : "TCP";
}

/** The port a pod declares under `name` for `protocol`. */
function namedPort(pod: PolicyPod, name: string, protocol: Protocol): number | undefined {
  return pod.ports.find((p) => p.name === name && p.protocol === protocol)?.port;
}

/** Pods whose address lies in a block (for named egress ports to a block). */
function podsIn(blocks: AddressBlock[], view: PolicyView, inBlock: BlockTest): PolicyPod[] {
  return view.pods.filter((pod) =>
    peerable(pod) && pod.ips.some((ip) => blocks.some((b) => inBlock(ip, b)))
  );
}

/** Whether an address lies in a block (its CIDR, outside its excepts). */
export type BlockTest = (ip: string, block: AddressBlock) => boolean;

/** The rules of one direction of one policy, for the selected pod `self`. */
function rulesOf(
  p: NetworkPolicy,
  direction: "ingress" | "egress",
  self: PolicyPod,
  view: PolicyView,
  inBlock: BlockTest,
  cache: PeerCache,
): AllowRule[] {
  const ns = p.metadata?.namespace ?? "default";
  const policy = `${ns}/${p.metadata?.name ?? ""}`;
  const rules = direction === "ingress" ? p.spec?.ingress ?? [] : p.spec?.egress ?? [];
  const out: AllowRule[] = [];
  rules.forEach((r, index) => {
    const peerList = direction === "ingress"
      ? (r as { from?: NetworkPolicyPeer[] }).from
      : (r as { to?: NetworkPolicyPeer[] }).to;
    const anyPeer = !peerList || peerList.length === 0;
    const selecting = anyPeer
      ? []
      : peerList.filter((peer) => peer.podSelector || peer.namespaceSelector);
    const peerSets = selecting.map((peer) => peerAddresses(peer, ns, view, cache));
    const blocks: AddressBlock[] = anyPeer
      ? []
      : peerList.flatMap((peer) =>
        peer.ipBlock ? [{ cidr: peer.ipBlock.cidr, except: peer.ipBlock.except ?? [] }] : []
      );
    const peers: AllowRule["peers"] = anyPeer
      ? "any"
      : { ips: [...new Set(peerSets.flatMap((set) => set.ips))].sort(), blocks };
    const sets = anyPeer ? {} : { peerSets };
    const portList = r.ports ?? [];
    if (portList.length === 0) {
      out.push({ policy, rule: index, peers, ports: "any", ...sets });
      return;
    }
    const numeric: PortMatch[] = [];
    const triples: NonNullable<AllowRule["triples"]> = [];
    for (const port of portList) {
      const protocol = protocolOf(port);
      if (port.port === undefined) numeric.push({ protocol });
      else if (typeof port.port === "number") {
        numeric.push(
          port.endPort !== undefined && port.endPort >= port.port
            ? { protocol, port: port.port, endPort: port.endPort }
            : { protocol, port: port.port },
        );
      } else if (/^\d+$/.test(port.port)) {
        numeric.push({ protocol, port: Number(port.port) });
      } else if (direction === "ingress") {
        // Named: the number the receiving pod (this one) gives the name.
        const n = namedPort(self, port.port, protocol);
        if (n !== undefined) numeric.push({ protocol, port: n });
      } else {
        // Named, egress: each receiving peer's own number.
        const receivers = anyPeer ? view.pods.filter(peerable) : [
          ...selecting.flatMap((peer) => selectedPods(peer, ns, view)),
          ...podsIn(blocks, view, inBlock),
        ];
        for (const pod of receivers) {
          const n = namedPort(pod, port.port, protocol);
          if (n === undefined) continue;
          for (const ip of pod.ips) triples.push({ ip, protocol, port: n });
        }
      }
    }
    if (numeric.length) out.push({ policy, rule: index, peers, ports: numeric, ...sets });
    if (triples.length) {
      out.push({ policy, rule: index, peers: "any", ports: "any", triples });
    }
  });
  return out;
}

/**
 * The verdicts of `local` (this node's pods): for each pod that some policy isolates, the rules
 * that let traffic in or out. Pods no policy selects are left out (open both ways).
 *
 * @example
 * ```ts
 * const verdicts = compilePolicies(view, view.pods.filter(onThisNode), inBlock);
 * ```
 */
export function compilePolicies(
  view: PolicyView,
  local: PolicyPod[],
  inBlock: BlockTest,
): PodVerdict[] {
  const out: PodVerdict[] = [];
  const cache: PeerCache = new Map();
  for (const pod of local) {
    if (pod.hostNetwork || pod.ips.length === 0) continue;
    const selecting = view.policies.filter((p) => policySelects(p, pod));
    if (!selecting.length) continue;
    const verdict: PodVerdict = { pod };
    for (const p of selecting) {
      const types = policyTypes(p);
      if (types.ingress) {
        (verdict.ingress ??= []).push(...rulesOf(p, "ingress", pod, view, inBlock, cache));
      }
      if (types.egress) {
        (verdict.egress ??= []).push(...rulesOf(p, "egress", pod, view, inBlock, cache));
      }
    }
    if (verdict.ingress || verdict.egress) out.push(verdict);
  }
  return out;
}

/**
 * The real {@link BlockTest}: `ip` in the block's CIDR and in none of its excepts (an address of
 * the other family, or text that is no address, is in no block).
 */
export function ipInBlock(ip: string, block: AddressBlock): boolean {
  try {
    const addr = parseIp(ip);
    const within = (cidr: string) => cidrContains(parseCidr(cidr), addr);
    return within(block.cidr) && !block.except.some(within);
  } catch {
    return false;
  }
}
