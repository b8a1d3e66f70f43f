/**
 * MultiNetworkPolicy on this node: the cluster's MultiNetworkPolicies (their watch), with the
 * pods and namespaces NetworkPolicy already watches and this node's additional interfaces (their
 * attachment records), compiled into one nftables table per pod network namespace that needs one
 * ({@link compileMultiPolicies}, {@link renderInterfaceTable}), written with `nft -f` inside that
 * namespace in one transaction, and only when its text changed. A pod's additional interfaces
 * traffic (macvlan above all) never meets the node's own hooks, so the rules must live in the
 * pod, as multi-networkpolicy-iptables puts them.
 *
 * A new pod's rules are in place before its ADD answers: the ADD path calls
 * {@link MultiPolicyEnforcer.plugged} once its extra interfaces are recorded.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { Nft } from "../cluster/masquerade.ts";
import { DirtyLoop } from "../runtime/dirty_loop.ts";
import { Deadline } from "../runtime/deadline.ts";
import { PassCounter } from "../runtime/pass_counter.ts";
import { ipInBlock } from "./compile.ts";
import {
  compileMultiPolicies,
  type LocalInterface,
  type MultiPolicy,
  multiPolicySelects,
  type NetworkedPod,
  POLICY_FOR_ANNOTATION,
  policyFor,
} from "./multi_policy.ts";
import { policyScript } from "./nft_scripts.ts";
import { renderInterfaceTable } from "./nft_interface_table.ts";
import { checkedPolicy } from "./policy_check.ts";
import type { RefusedPolicy } from "./policy_check.ts";
import type { Labels } from "./selector.ts";

/** What the enforcer needs. */
export interface MultiPolicyEnforcerDeps {
  /** The nftables table (family inet) it owns in each pod's namespace. */
  table: string;
  /** Applies rulesets inside a pod's namespace. */
  nft: Required<Pick<Nft, "applyIn">>;
  /** This node's additional interfaces, now. */
  interfaces: () => LocalInterface[];
  /** The cluster's pods, with their addresses per network, and namespace labels. */
  cluster: { pods(): NetworkedPod[]; namespaces(): Map<string, Labels> };
  /** Whether every watch it reads from has listed once (before that nothing is written). */
  synced: () => boolean;
  /** Whether a namespace path still exists (a table in a gone namespace went with it). */
  netnsExists: (path: string) => Promise<boolean>;
  /** Where it says what it did. */
  logger: Logger;
  /** This node: its pods' addresses on a network come from their records alone. */
  nodeName?: string;
  /** Says on an invalid policy that it is not enforced as written (a Warning Event). */
  refused?: (policy: RefusedPolicy, message: string) => void;
  /**
   * How long an ADD waits for the pass that writes its pod's tables (behind a pass under way)
   * before it answers code 11; 10 s unless set.
   */
  addWaitMs?: number;
}

/** Counts for stats. */
export interface MultiPolicyStats {
  /** MultiNetworkPolicies known. */
  policies: number;
  /** Additional interfaces of this node isolated by some of them. */
  isolatedInterfaces: number;
  /** Pod namespaces with a table now. */
  tables: number;
  /** Table writes, and failed ones. */
  writes: number;
  /** Failed writes. */
  failures: number;
  /** Passes that failed with an error (each tried again later). */
  failedPasses: number;
  /** MultiNetworkPolicies known that are invalid (enforced as isolating only). */
  invalidPolicies: number;
  /** ADDs answered code 11 because their pod's tables were not written within the budget. */
  addsTimedOut: number;
}

const RETRY_MS = 1000;
const SYNC_WAIT_MS = 20_000;
const ADD_WAIT_MS = 10_000;

const key = (ns: string | undefined, name: string | undefined) =>
  `${ns ?? "default"}/${name ?? ""}`;

/** A MultiNetworkPolicy stripped to what is enforced: its name, networks and spec. */
export function slimMultiPolicy(p: MultiPolicy): MultiPolicy {
  const m = p.metadata ?? {};
  const forNetworks = m.annotations?.[POLICY_FOR_ANNOTATION];
  return {
    metadata: {
      name: m.name,
      namespace: m.namespace,
      uid: m.uid,
      resourceVersion: m.resourceVersion,
      ...(forNetworks !== undefined
        ? { annotations: { [POLICY_FOR_ANNOTATION]: forNetworks } }
        : {}),
    },
    spec: p.spec,
  };
}

/**
 * The enforcer.
 *
 * @example
 * ```ts
 * const multi = new MultiPolicyEnforcer({ table, nft, interfaces, cluster, synced, netnsExists, logger });
 * multi.start();
 * ```
 */
export class MultiPolicyEnforcer {
  readonly #d: MultiPolicyEnforcerDeps;
  readonly #policies = new Map<string, MultiPolicy>();
  /** What is written in each pod namespace, by its path. */
  readonly #written = new Map<string, string>();
  /** The last failure to write each namespace's table. */
  readonly #errors = new Map<string, string>();
  readonly #loop: DirtyLoop;
  readonly #passes = new PassCounter();
  #stats: MultiPolicyStats = {
    policies: 0,
    isolatedInterfaces: 0,
    tables: 0,
    writes: 0,
    failures: 0,
    failedPasses: 0,
    addsTimedOut: 0,
    invalidPolicies: 0,
  };
  /** Invalid policies (enforced fail-closed), by key: the version last said so. */
  readonly #invalid = new Map<string, string>();
  /** Invalid policies whose Event is due once an interface of this node is on their networks. */
  readonly #unsaid = new Map<
    string,
    { policy: RefusedPolicy; networks: string[]; message: string }
  >();
  /** The error of the last pass when it failed as a whole. */
  #passError: string | undefined;
  #failedInRow = 0;
  #retryTimer?: ReturnType<typeof setTimeout>;
  #closed = false;
  #syncTimer?: ReturnType<typeof setTimeout>;

  /** Creates the enforcer; nothing is written before the watches have synced. */
  constructor(deps: MultiPolicyEnforcerDeps) {
    this.#d = deps;
    this.#loop = new DirtyLoop(() => this.#pass(), () => !this.#closed && deps.synced());
  }

  /** A MultiNetworkPolicy appeared or changed. */
  policyUpserted(p: MultiPolicy): void {
    const k = key(p.metadata?.namespace, p.metadata?.name);
    const { policy, problems } = checkedPolicy(p);
    if (problems.length) this.#refuse(k, p, problems);
    else {
      this.#invalid.delete(k);
      this.#unsaid.delete(k);
    }
    this.#policies.set(k, policy);
    this.#loop.kick();
  }

  /** A MultiNetworkPolicy is gone. */
  policyRemoved(p: MultiPolicy): void {
    this.#policies.delete(key(p.metadata?.namespace, p.metadata?.name));
    this.#invalid.delete(key(p.metadata?.namespace, p.metadata?.name));
    this.#unsaid.delete(key(p.metadata?.namespace, p.metadata?.name));
    this.#loop.kick();
  }

  /**
   * An invalid policy (its CRD's schema cannot check everything): enforced as isolating what it
   * selects with none of its rules, logged once per version and counted; said on the policy (a
   * Warning Event) by the next pass, and only by a node with an interface on one of its networks
   * (not by every node of the cluster).
   */
  #refuse(k: string, p: MultiPolicy, problems: string[]): void {
    const version = p.metadata?.resourceVersion ?? "";
    if (this.#invalid.get(k) === version) return;
    this.#invalid.set(k, version);
    const message = `not enforced as written, only isolating what it selects: ${
      problems.slice(0, 5).join("; ")
    }`.slice(0, 1000);
    this.#d.logger.warn("multi-network policy: {policy} is invalid: {message}", {
      policy: k,
      message,
    });
    this.#unsaid.set(k, {
      policy: {
        kind: "MultiNetworkPolicy",
        apiVersion: "k8s.cni.cncf.io/v1beta1",
        namespace: p.metadata?.namespace,
        name: p.metadata?.name ?? "",
        uid: p.metadata?.uid,
      },
      networks: policyFor(p),
      message,
    });
  }

  /** Says the invalid policies not said yet that concern this node's interfaces. */
  #sayRefusals(interfaces: LocalInterface[]): void {
    if (!this.#unsaid.size) return;
    const here = new Set(interfaces.map((i) => i.network));
    for (const [k, r] of this.#unsaid) {
      if (!r.networks.some((n) => here.has(n))) continue;
      this.#unsaid.delete(k);
      this.#d.refused?.(r.policy, r.message);
    }
  }

  /** Something it reads changed (a pod, a namespace, an interface of this node). */
  changed(): void {
    if (this.#policies.size || this.#written.size) this.#loop.kick();
  }

  /** Writes the tables once the watches have synced (and after every change from then on). */
  start(): void {
    const wait = () => {
      if (this.#closed) return;
      if (this.#d.synced()) this.#loop.kick();
      else this.#syncTimer = setTimeout(wait, 200);
    };
    wait();
  }

  /**
   * An ADD of this node plugged the pod's additional interfaces and recorded them: their rules
   * are in place when this resolves (code 5 when they cannot be written: the ADD must fail rather
   * than leave them open). A pod whose interfaces no policy selects returns at once.
   */
  async plugged(pod: { namespace: string; name: string }): Promise<void> {
    // No MultiNetworkPolicy (the usual case once synced): nothing to look up on the ADD path.
    if (this.#policies.size === 0 && this.#d.synced()) return;
    const k = key(pod.namespace, pod.name);
    const mine = this.#d.interfaces().filter((i) => key(i.pod.namespace, i.pod.name) === k);
    if (!mine.length) return;
    for (const started = Date.now(); !this.#d.synced();) {
      if (Date.now() - started > SYNC_WAIT_MS) {
        throw new CniError(
          CNI_ERROR.TRY_AGAIN_LATER,
          `the multi-network policies are not all known yet; ${k} is not plugged before they are`,
        );
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    const networks = mine.map((i) => i.network);
    if (!multiPolicySelects([...this.#policies.values()], mine[0].pod, networks)) return;
    // The first pass that starts from now on writes the pod's tables; other changes starting
    // passes meanwhile do not hold the answer, and it comes within the budget either way.
    const pass = this.#passes.next;
    this.#loop.kick();
    using budget = new Deadline(this.#d.addWaitMs ?? ADD_WAIT_MS);
    try {
      await this.#passes.done(pass, budget.signal);
    } catch {
      this.#stats.addsTimedOut++;
      throw new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        `the multi-network policy rules of ${k} are not written yet (${
          this.#d.addWaitMs ?? ADD_WAIT_MS
        } ms waited); try again`,
      );
    }
    const error = this.#errors.get(mine[0].netns) ?? this.#passError;
    if (error) {
      throw new CniError(
        CNI_ERROR.IO_FAILURE,
        `the multi-network policy rules of ${k} could not be written`,
        error,
      );
    }
  }

  /** Counts. */
  stats(): MultiPolicyStats {
    return {
      ...this.#stats,
      policies: this.#policies.size,
      tables: this.#written.size,
      invalidPolicies: this.#invalid.size,
    };
  }

  /**
   * One pass. Whatever it throws is logged, counted and tried again (1 s, doubling to 32 s): a
   * pass never ends the process, and the ADDs waiting meanwhile fail (their rules are not known
   * to be in place).
   */
  async #pass(): Promise<void> {
    const n = this.#passes.start();
    try {
      await this.#compileAndWrite();
      this.#passError = undefined;
      this.#failedInRow = 0;
    } catch (e) {
      this.#stats.failedPasses++;
      const error = e instanceof Error ? e.message : String(e);
      if (error !== this.#passError) {
        this.#d.logger.error("multi-network policy: a pass failed: {error}", { error });
      }
      this.#passError = error;
      const delay = RETRY_MS * 2 ** Math.min(this.#failedInRow++, 5);
      clearTimeout(this.#retryTimer);
      this.#retryTimer = setTimeout(() => this.#loop.kick(), delay);
    } finally {
      this.#passes.finish(n);
    }
  }

  async #compileAndWrite(): Promise<void> {
    if (this.#policies.size === 0 && this.#written.size === 0) {
      this.#stats.isolatedInterfaces = 0;
      return;
    }
    const { table, cluster } = this.#d;
    const interfaces = this.#d.interfaces();
    this.#sayRefusals(interfaces);
    const verdicts = compileMultiPolicies(
      {
        policies: [...this.#policies.values()],
        namespaces: cluster.namespaces(),
        pods: cluster.pods(),
        node: this.#d.nodeName,
      },
      interfaces,
      ipInBlock,
    );
    this.#stats.isolatedInterfaces = verdicts.length;
    const wanted = new Map<string, string | undefined>();
    const refused = new Map<string, string>();
    for (const [netns, mine] of Map.groupBy(verdicts, (v) => v.netns)) {
      try {
        wanted.set(netns, renderInterfaceTable(table, mine));
      } catch (e) {
        // One pod's table refused (what would reach its script is not safe to write): its
        // interfaces stay as they were, its ADD fails; every other pod's table is written.
        refused.set(netns, e instanceof Error ? e.message : String(e));
      }
    }
    for (const netns of this.#written.keys()) {
      if (!wanted.has(netns) && !refused.has(netns)) wanted.set(netns, undefined);
    }
    let failed = false;
    for (const [netns, error] of refused) {
      failed = true;
      this.#stats.failures++;
      if (this.#errors.get(netns) !== error) {
        this.#d.logger.error(
          "multi-network policy: table {table} in {netns} not written: {error}",
          { table, netns, error },
        );
      }
      this.#errors.set(netns, error);
    }
    for (const [netns, definition] of wanted) {
      if (definition === this.#written.get(netns)) continue;
      try {
        await this.#d.nft.applyIn(netns, policyScript(table, definition));
        this.#stats.writes++;
        if (definition === undefined) this.#written.delete(netns);
        else this.#written.set(netns, definition);
        this.#errors.delete(netns);
      } catch (e) {
        if (!(await this.#d.netnsExists(netns))) {
          // The pod's namespace is gone, and its table with it.
          this.#written.delete(netns);
          this.#errors.delete(netns);
          continue;
        }
        failed = true;
        this.#stats.failures++;
        const error = e instanceof Error ? e.message : String(e);
        if (this.#errors.get(netns) !== error) {
          this.#d.logger.error(
            "multi-network policy: cannot write table {table} in {netns}: {error}",
            {
              table,
              netns,
              error,
            },
          );
        }
        this.#errors.set(netns, error);
      }
    }
    // Tried again shortly; the ADDs waiting meanwhile fail (their rules are not in place).
    if (failed) setTimeout(() => this.#loop.kick(), RETRY_MS);
  }

  /** Waits for the pass under way (and those it triggered). */
  idle(): Promise<void> {
    return this.#loop.idle();
  }

  /** Stops writing (the tables stay with their pods). */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#syncTimer);
    clearTimeout(this.#retryTimer);
    await this.#loop.idle().catch(() => {});
  }
}
