/**
 * The cluster's NetworkPolicies as a node enforces them: each checked as it comes
 * ({@link checkedPolicy}: an invalid one isolates what it selects with none of its rules, said
 * once per version), and the size limits applied to them all ({@link limitPolicies}: a refused
 * one isolates and allows nothing), again only after a policy changed. A refusal is logged once,
 * and told by an Event only by the nodes it isolates pods on.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import { type PolicyPod, policySelects } from "./compile.ts";
import { checkedPolicy, type RefusedPolicy } from "./policy_check.ts";
import { DEFAULT_POLICY_LIMITS, type Limited, limitPolicies, type PolicyLimits } from "./limits.ts";
import { objectKey } from "./policy_objects.ts";

/** What the policies need. */
export interface AdmittedPoliciesDeps {
  /** Where it says what it refused. */
  logger: Logger;
  /** Policy size limits (`policy.limits`; {@link DEFAULT_POLICY_LIMITS} unless set). */
  limits?: PolicyLimits;
  /**
   * Told once of each policy the limits refuse (again when it changes and is still refused),
   * when it selects a pod of this node: the daemon writes a Warning Event on it.
   */
  refused?: (policy: NetworkPolicy, reason: string) => void;
  /** Says on an invalid policy that it is not enforced as written (a Warning Event). */
  invalid?: (policy: RefusedPolicy, message: string) => void;
}

/**
 * The NetworkPolicies known, as enforced.
 *
 * @example
 * ```ts
 * const policies = new AdmittedPolicies({ logger });
 * policies.upsert(policy);
 * compilePolicies({ policies: policies.admitted(), namespaces, pods }, local, ipInBlock);
 * ```
 */
export class AdmittedPolicies {
  readonly #d: AdmittedPoliciesDeps;
  readonly #policies = new Map<string, NetworkPolicy>();
  /** Invalid policies (enforced fail-closed), by key: the version last said so. */
  readonly #invalid = new Map<string, string>();
  /** The policies with the limits applied; undefined: to be applied again (a policy changed). */
  #limited?: Limited;
  /** The refusals logged, by policy: what was logged (its version and the reason). */
  readonly #told = new Map<string, string>();
  /** The refusals told by an Event (through `refused`), by policy: what was told. */
  readonly #evented = new Map<string, string>();
  /** The policies the limits refused when they were last applied. */
  #refusedCount = 0;

  /** Creates the set, empty. */
  constructor(deps: AdmittedPoliciesDeps) {
    this.#d = deps;
  }

  /** A NetworkPolicy appeared or changed: checked, kept, the limits to be applied again. */
  upsert(p: NetworkPolicy): void {
    const k = objectKey(p.metadata?.namespace, p.metadata?.name);
    const { policy, problems } = checkedPolicy(p);
    if (problems.length) this.#refuse(k, p, problems);
    else this.#invalid.delete(k);
    this.#policies.set(k, policy);
    this.#limited = undefined;
  }

  /**
   * An invalid policy (the API server refuses them; one that slipped through): isolating what it
   * selects with none of its rules, logged once per version, counted, and said on the policy.
   */
  #refuse(k: string, p: NetworkPolicy, problems: string[]): void {
    const version = p.metadata?.resourceVersion ?? "";
    if (this.#invalid.get(k) === version) return;
    this.#invalid.set(k, version);
    const message = `not enforced as written, only isolating what it selects: ${
      problems.slice(0, 5).join("; ")
    }`.slice(0, 1000);
    this.#d.logger.warn("network policy: {policy} is invalid: {message}", { policy: k, message });
    this.#d.invalid?.(
      {
        kind: "NetworkPolicy",
        apiVersion: "networking.k8s.io/v1",
        namespace: p.metadata?.namespace,
        name: p.metadata?.name ?? "",
        uid: p.metadata?.uid,
      },
      message,
    );
  }

  /** A NetworkPolicy is gone. */
  remove(p: NetworkPolicy): void {
    this.#policies.delete(objectKey(p.metadata?.namespace, p.metadata?.name));
    this.#invalid.delete(objectKey(p.metadata?.namespace, p.metadata?.name));
    this.#limited = undefined;
  }

  /** Policies known. */
  get size(): number {
    return this.#policies.size;
  }

  /** Policies known that are invalid (enforced as isolating only). */
  get invalidCount(): number {
    return this.#invalid.size;
  }

  /** Policies the size limits refused when they were last applied. */
  get refusedCount(): number {
    return this.#refusedCount;
  }

  /**
   * The policies as enforced: the size limits applied (a refused policy isolates and allows
   * nothing), again only after a policy changed. A refusal not logged yet is logged (the Event
   * follows in the pass, {@link AdmittedPolicies.tellRefusals}).
   */
  admitted(): NetworkPolicy[] {
    if (this.#limited) return this.#limited.policies;
    const limited = this.#limited = limitPolicies(
      this.#policies.values(),
      this.#d.limits ?? DEFAULT_POLICY_LIMITS,
    );
    this.#refusedCount = limited.refused.length;
    const now = new Set<string>();
    for (const r of limited.refused) {
      now.add(r.key);
      const what = `${r.policy.metadata?.resourceVersion ?? ""} ${r.reason}`;
      if (this.#told.get(r.key) === what) continue;
      this.#told.set(r.key, what);
      this.#d.logger.warn(
        "network policy: {policy} is refused: {reason}; the pods it selects are isolated without what it allows",
        { policy: r.key, reason: r.reason },
      );
    }
    for (const k of this.#told.keys()) if (!now.has(k)) this.#told.delete(k);
    for (const k of this.#evented.keys()) if (!now.has(k)) this.#evented.delete(k);
    return limited.policies;
  }

  /**
   * Tells `refused` (an Event on the policy) of each refusal not told yet whose policy selects a
   * pod of this node: only the nodes it isolates pods on say so, not every node of the cluster.
   */
  tellRefusals(local: PolicyPod[]): void {
    for (const r of this.#limited?.refused ?? []) {
      const what = this.#told.get(r.key);
      if (!what || this.#evented.get(r.key) === what) continue;
      if (!local.some((pod) => policySelects(r.policy, pod))) continue;
      this.#evented.set(r.key, what);
      this.#d.refused?.(r.policy, r.reason);
    }
  }

  /** The policies the size limits refuse now, by `namespace/name`. */
  refused(): string[] {
    this.admitted();
    return this.#limited!.refused.map((r) => r.key);
  }
}
