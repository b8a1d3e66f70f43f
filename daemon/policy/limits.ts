/**
 * Policy size limits, pure: how much a NetworkPolicy asks of the node's table (its entries: peers,
 * `except`s and ports, over all its rules), and which policies are refused for asking too much,
 * alone (`policy.limits.policyEntries`) or with the other policies of their namespace
 * (`policy.limits.namespaceEntries`, the namespace's policies taken in name order). A refused
 * policy is refused as a whole and fails closed: it still isolates the pods it selects, the
 * directions it names, but allows them nothing. One tenant's policies then cost the node a
 * bounded table and bounded work, whatever they hold.
 *
 * @module
 */
import type { NetworkPolicy, NetworkPolicyPeer } from "kubernetes-types/networking/v1.d.ts";
import { policyTypes } from "./compile.ts";

/** The limits (`policy.limits`). */
export interface PolicyLimits {
  /** Entries one policy may hold. */
  policyEntries: number;
  /** Entries the policies of one namespace may hold together. */
  namespaceEntries: number;
}

/** The limits when none are configured: far above any policy written by hand. */
export const DEFAULT_POLICY_LIMITS: PolicyLimits = {
  policyEntries: 1000,
  namespaceEntries: 10_000,
};

/** A policy refused, and why. */
export interface Refusal {
  /** `namespace/name`. */
  key: string;
  /** The policy as it came. */
  policy: NetworkPolicy;
  /** Why, in a sentence naming the limit. */
  reason: string;
}

/** What limiting gives: every policy (the refused ones isolating only), and the refusals. */
export interface Limited {
  /** The policies to enforce: as they came, or (refused) isolating only. */
  policies: NetworkPolicy[];
  /** The refused ones. */
  refused: Refusal[];
}

/**
 * The entries of a policy: each rule's peers, each ipBlock's excepts and each port (a rule
 * without peers or ports counts one), what the table's size and nft's work grow with.
 *
 * @example
 * ```ts
 * policyEntries({ spec: { podSelector: {}, ingress: [{ ports: [{ port: 80 }] }] } }); // 2
 * ```
 */
export function policyEntries(p: NetworkPolicy): number {
  const rules = [
    ...(p.spec?.ingress ?? []).map((r) => ({ peers: r.from, ports: r.ports })),
    ...(p.spec?.egress ?? []).map((r) => ({ peers: r.to, ports: r.ports })),
  ];
  let n = 0;
  for (const r of rules) {
    const peers: NetworkPolicyPeer[] = r.peers ?? [];
    n += Math.max(1, peers.length) + Math.max(1, r.ports?.length ?? 0);
    for (const peer of peers) n += peer.ipBlock?.except?.length ?? 0;
  }
  return n;
}

/** The policy isolating what it selects, the directions it names, and allowing nothing. */
export function isolatingOnly(p: NetworkPolicy): NetworkPolicy {
  const types = policyTypes(p);
  return {
    metadata: p.metadata,
    spec: {
      podSelector: p.spec?.podSelector ?? {},
      policyTypes: [...(types.ingress ? ["Ingress"] : []), ...(types.egress ? ["Egress"] : [])],
      ingress: [],
      egress: [],
    },
  };
}

const keyOf = (p: NetworkPolicy) => `${p.metadata?.namespace ?? "default"}/${p.metadata?.name}`;

/**
 * The policies with the limits applied: a policy over `policyEntries` is refused; the others of a
 * namespace are taken in name order, and one that would bring the namespace over
 * `namespaceEntries` is refused (the ones before it stay, whatever is added later by name).
 *
 * @example
 * ```ts
 * const { policies, refused } = limitPolicies(all, { policyEntries: 2000, namespaceEntries: 20000 });
 * ```
 */
export function limitPolicies(all: Iterable<NetworkPolicy>, limits: PolicyLimits): Limited {
  const byNamespace = new Map<string, NetworkPolicy[]>();
  for (const p of all) {
    const ns = p.metadata?.namespace ?? "default";
    byNamespace.set(ns, [...(byNamespace.get(ns) ?? []), p]);
  }
  const policies: NetworkPolicy[] = [];
  const refused: Refusal[] = [];
  for (const [ns, list] of byNamespace) {
    let total = 0;
    for (const p of list.sort((a, b) => keyOf(a) < keyOf(b) ? -1 : keyOf(a) > keyOf(b) ? 1 : 0)) {
      const n = policyEntries(p);
      const reason = n > limits.policyEntries
        ? `it holds ${n} entries (peers, excepts and ports), over the limit of ${limits.policyEntries} per policy (policy.limits.policyEntries)`
        : total + n > limits.namespaceEntries
        ? `with it the policies of namespace ${ns} would hold ${
          total + n
        } entries, over the limit of ${limits.namespaceEntries} per namespace (policy.limits.namespaceEntries)`
        : undefined;
      if (reason) {
        refused.push({ key: keyOf(p), policy: p, reason });
        policies.push(isolatingOnly(p));
      } else {
        total += n;
        policies.push(p);
      }
    }
  }
  return { policies, refused };
}
