/**
 * NetworkPolicy on this node: the cluster's policies, namespaces and pods (kept by watches, each
 * object stripped to what policies read), compiled into the verdicts of the node's own pods
 * ({@link compilePolicies}) and written as one nftables table ({@link renderPolicyParts}). Any
 * change marks the table dirty; one pass at a time recompiles it and, when it changed, brings the
 * table there in one `nft -f` transaction, in place: what changed of its sets, maps and chains
 * ({@link policyUpdateScript}). Only the first write (and the last) replace it whole.
 *
 * A new pod's rules are in place before its ADD answers: the ADD path hands over the pod and the
 * addresses it was just given ({@link PolicyEnforcer.plugged}), so a pod under a deny-all policy
 * is never reachable, not even for a moment. When the policies that select it already isolate
 * another pod of the node the same way, the pod's allowing rules are in the table already: the
 * ADD writes the pod's own chains and its verdict map entries in-process (one netlink batch,
 * `nft_netlink.ts`) and answers; its address joins other pods' peer sets right after, in the
 * next pass. Otherwise (a new combination of rules, an address still mapped to a pod just gone)
 * the ADD waits for the pass that starts after it; whatever else is pending, it waits 10 s at
 * most, then answers code 11. A pod no policy selects costs the ADD one selector walk and nothing
 * else. Policies over the size limits (`limits.ts`) isolate the pods they select and allow
 * nothing.
 *
 * The enforcer schedules and makes the writes; what it reads lives beside it: the policies as
 * enforced, checked and limited (`admitted_policies.ts`), the pods and namespaces of the cluster
 * and this node's ADDs' addresses (`policy_cluster.ts`, the objects stripped by
 * `policy_objects.ts`), and the table's rule counters (`rule_counter.ts`).
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { Namespace, Pod } from "kubernetes-types/core/v1.d.ts";
import type { NetworkPolicy, NetworkPolicyEgressRule } from "kubernetes-types/networking/v1.d.ts";
import { DirtyLoop } from "../runtime/dirty_loop.ts";
import { PassCounter } from "../runtime/pass_counter.ts";
import { KeyedMutex } from "../runtime/keyed_mutex.ts";
import { Deadline } from "../runtime/deadline.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { Nft } from "../cluster/masquerade.ts";
import {
  compilePolicies,
  ipInBlock,
  type PolicyPod,
  policySelects,
  type PolicyView,
} from "./compile.ts";
import type { DeniedConnection, DeniedPacket } from "./nflog.ts";
import type { RefusedPolicy } from "./policy_check.ts";
import { policyScript, policyUpdateScript } from "./nft_scripts.ts";
import { type NftOp, opsScript, podAddition, withPodPart } from "./nft_pod_addition.ts";
import type { DenyLog } from "./nft_rules.ts";
import type { RuleCount } from "./rule_counts.ts";
import {
  type RenderedTable,
  renderPodParts,
  renderPolicyParts,
  tableDefinition,
} from "./nft_policy.ts";
import type { NetworkedPod } from "./multi_policy.ts";
import type { Labels } from "./selector.ts";
import type { PolicyLimits } from "./limits.ts";
import { objectKey } from "./policy_objects.ts";
import { AdmittedPolicies } from "./admitted_policies.ts";
import { PolicyCluster } from "./policy_cluster.ts";
import { RuleCounter } from "./rule_counter.ts";

/** What the enforcer needs. */
export interface PolicyEnforcerDeps {
  /** This node's name (its pods are enforced on here). */
  nodeName: string;
  /** The nftables table (family inet) it owns. */
  table: string;
  /** Applies rulesets. */
  nft: Nft;
  /**
   * Writes an ADD's operations in-process (`NftNetlink`); without it they go through
   * `nft.apply` as a script.
   */
  writer?: { write(table: string, ops: NftOp[]): Promise<void> };
  /**
   * Reads the rules' counters in-process (`NftNetlink`: one netlink dump, no process); without
   * it they are read by `nft.listJson`.
   */
  counter?: { ruleCounts(table: string): RuleCount[] };
  /** Whether the watches have listed everything once (before that nothing is written). */
  synced: () => boolean;
  /** Where it says what it did. */
  logger: Logger;
  /** Called when a pod or a namespace of the cluster changed (MultiNetworkPolicy reads them too). */
  changed?: () => void;
  /** Log denied packets to this NFLOG group (`policy.logDenied`). */
  log?: DenyLog;
  /** A read of the rules' counters still running after this long is given up (8 s unless set). */
  countTimeoutMs?: number;
  /**
   * How long an ADD waits for its pod's rules to be written (behind a pass under way, for the
   * pass that writes them) before it answers code 11; 10 s unless set.
   */
  addWaitMs?: number;
  /** Policy size limits (`policy.limits`; `DEFAULT_POLICY_LIMITS` of `limits.ts` unless set). */
  limits?: PolicyLimits;
  /**
   * Told once of each policy the limits refuse (again when it changes and is still refused),
   * when it selects a pod of this node: the daemon writes a Warning Event on it.
   */
  refused?: (policy: NetworkPolicy, reason: string) => void;
  /** Says on an invalid policy that it is not enforced as written (a Warning Event). */
  invalid?: (policy: RefusedPolicy, message: string) => void;
}

/** Counts for stats. */
export interface PolicyStats {
  /** Policies known. */
  policies: number;
  /** Pods of this node isolated by some policy. */
  isolatedPods: number;
  /** Table writes, and failed ones. */
  writes: number;
  /** Failed writes. */
  failures: number;
  /** When the table (or a pod's part of it) was last written (RFC 3339); absent: never. */
  lastWriteAt?: string;
  /** When a write of the table last failed (RFC 3339); absent: never. */
  lastFailureAt?: string;
  /** Writes that changed the table in place (the rest replaced it whole). */
  setUpdates: number;
  /** ADDs that wrote their pod's own chains and entries themselves (no pass waited for). */
  podWrites: number;
  /**
   * ADDs whose pod's allowing rules were not in the table yet, that wrote their pod's whole part
   * (allowing chains, peer sets, own chains, entries) themselves instead of waiting for a pass.
   */
  ownWrites: number;
  /** `network-status` entries and addresses left out (not an address, another namespace's network). */
  droppedAddresses: number;
  /** Passes that failed with an error (each tried again later). */
  failedPasses: number;
  /** Policies known that are invalid (enforced as isolating only). */
  invalidPolicies: number;
  /** Counter reads skipped because the last one still ran. */
  countsSkipped: number;
  /** Policies the size limits refuse now (they isolate, allowing nothing). */
  refusedPolicies: number;
  /** ADDs answered code 11 because their pod's rules were not written within the budget. */
  addsTimedOut: number;
}

const RETRY_MS = 1000;
const SYNC_WAIT_MS = 20_000;
const COUNT_EVERY_MS = 10_000;
/** An ADD's wait for its pod's rules (see {@link PolicyEnforcerDeps.addWaitMs}). */
const ADD_WAIT_MS = 10_000;

/** Whether a policy allows egress to a port by its name. */
function namesEgressPorts(p: NetworkPolicy): boolean {
  return (p.spec?.egress ?? []).some((r: NetworkPolicyEgressRule) =>
    (r.ports ?? []).some((port) => typeof port.port === "string" && !/^\d+$/.test(port.port))
  );
}

/**
 * The enforcer.
 *
 * @example
 * ```ts
 * const policy = new PolicyEnforcer({ nodeName, table: "ferry-policy", nft, synced, logger });
 * podInformerHandlers = { upsert: (p) => policy.podUpserted(p), remove: (p) => policy.podRemoved(p) };
 * ```
 */
export class PolicyEnforcer {
  readonly #d: PolicyEnforcerDeps;
  /** The cluster's policies, checked and limited. */
  readonly #policies: AdmittedPolicies;
  /** The cluster's pods and namespaces, and this node's ADDs' addresses. */
  readonly #cluster: PolicyCluster;
  /** The table's rule counters. */
  readonly #counter: RuleCounter;
  /** Passes failed in a row (the retry's backoff), and the retry due. */
  #failedInRow = 0;
  #retryTimer?: ReturnType<typeof setTimeout>;
  readonly #loop: DirtyLoop;
  /** The table as last written; undefined: none; null: not known yet (the first pass writes it whole). */
  #written: RenderedTable | undefined | null = null;
  /** The counts; those its collaborators keep are filled in by {@link PolicyEnforcer.stats}. */
  #stats: PolicyStats = {
    policies: 0,
    isolatedPods: 0,
    writes: 0,
    failures: 0,
    setUpdates: 0,
    podWrites: 0,
    ownWrites: 0,
    droppedAddresses: 0,
    failedPasses: 0,
    invalidPolicies: 0,
    countsSkipped: 0,
    refusedPolicies: 0,
    addsTimedOut: 0,
  };
  /** The table's writer: a pass and an ADD's own write never run at once. */
  readonly #writing = new KeyedMutex();
  #closed = false;
  #lastError: string | undefined;
  #syncTimer?: ReturnType<typeof setTimeout>;
  #kickTimer?: ReturnType<typeof setTimeout>;
  /** Passes started and done, numbered: an ADD waits for the first that starts after it. */
  readonly #passes = new PassCounter();

  /** Creates the enforcer; nothing is written before the watches have synced. */
  constructor(deps: PolicyEnforcerDeps) {
    this.#d = deps;
    this.#policies = new AdmittedPolicies(deps);
    this.#cluster = new PolicyCluster(deps);
    this.#counter = new RuleCounter({
      table: deps.table,
      nft: deps.nft,
      counter: deps.counter,
      logger: deps.logger,
      timeoutMs: deps.countTimeoutMs,
      written: () => !!this.#written,
      isolatedPods: () => this.#stats.isolatedPods,
      gone: () => this.#tableGone(),
    });
    this.#loop = new DirtyLoop(() => this.#pass(), () => !this.#closed && deps.synced());
  }

  /** A NetworkPolicy appeared or changed. */
  policyUpserted(p: NetworkPolicy): void {
    this.#policies.upsert(p);
    this.#loop.kick();
  }

  /** A NetworkPolicy is gone. */
  policyRemoved(p: NetworkPolicy): void {
    this.#policies.remove(p);
    this.#loop.kick();
  }

  /** A Namespace appeared or changed. */
  namespaceUpserted(n: Namespace): void {
    this.#cluster.namespaceUpserted(n);
    this.#loop.kick();
    this.#d.changed?.();
  }

  /** A Namespace is gone. */
  namespaceRemoved(n: Namespace): void {
    this.#cluster.namespaceRemoved(n);
    this.#loop.kick();
    this.#d.changed?.();
  }

  /** A pod (of any node) appeared or changed. */
  podUpserted(p: Pod): void {
    this.#cluster.podUpserted(p);
    this.#loop.kick();
    this.#d.changed?.();
  }

  /** A pod is gone. */
  podRemoved(p: Pod): void {
    this.#cluster.podRemoved(p);
    this.#loop.kick();
    this.#d.changed?.();
  }

  /** Writes the table once the watches have synced (and after every change from then on). */
  start(countEveryMs = COUNT_EVERY_MS): void {
    // The rules' counters, read now and then for the metrics (not at each scrape: a process).
    this.#counter.start(countEveryMs);
    const wait = () => {
      if (this.#closed) return;
      if (this.#d.synced()) this.#loop.kick();
      else this.#syncTimer = setTimeout(wait, 200);
    };
    wait();
  }

  /**
   * An ADD of this node gave `ips` to a pod: its rules are in place when this resolves (code 5
   * when they cannot be written: the ADD must fail rather than leave the pod open). Pods no
   * policy selects need none, so for them this returns at once and the table follows.
   */
  async plugged(
    pod: { namespace: string; name: string; labels: Labels },
    ips: string[],
    signal?: AbortSignal,
  ): Promise<void> {
    const k = objectKey(pod.namespace, pod.name);
    this.#cluster.plug(k, pod.labels, ips);
    // Policies not all known yet (the daemon just started): whether one selects the pod cannot
    // be told, so the answer waits for the watches (the runtime retries a code 11).
    for (const started = Date.now(); !this.#d.synced();) {
      if (Date.now() - started > SYNC_WAIT_MS) {
        throw new CniError(
          CNI_ERROR.TRY_AGAIN_LATER,
          `the network policies are not all known yet; ${k} is not plugged before they are`,
        );
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    const self = this.#cluster.localPod(k);
    const selecting = self ? this.#policies.admitted().filter((p) => policySelects(p, self)) : [];
    if (!selecting.length) {
      this.#kickAfterAnswer();
      return;
    }
    // Whatever else is pending (another tenant's huge table being written), the answer comes
    // within the budget: the pod's rules in place, or code 11 (the runtime tries again).
    using budget = new Deadline(this.#d.addWaitMs ?? ADD_WAIT_MS);
    const wait = signal ? AbortSignal.any([budget.signal, signal]) : budget.signal;
    try {
      const own = () =>
        this.#writePod(self!, selecting).then((done) => done || this.#writeOwn(self!, selecting));
      if (self && await this.#exclusive(own, wait)) {
        this.#kickAfterAnswer();
        return;
      }
      // The first pass that starts from now on compiles the pod in.
      const pass = this.#passes.next;
      this.#loop.kick();
      await this.#passes.done(pass, wait);
    } catch (e) {
      if (!wait.aborted) throw e;
      this.#stats.addsTimedOut++;
      throw new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        `the network policy rules of ${k} are not written yet: the node's policy table is still being written (${
          this.#d.addWaitMs ?? ADD_WAIT_MS
        } ms waited); try again`,
      );
    }
    if (this.#lastError) {
      throw new CniError(
        CNI_ERROR.IO_FAILURE,
        `the network policy rules of ${k} could not be written`,
        this.#lastError,
      );
    }
  }

  /** A DEL of this node took a pod's addresses away. */
  unplugged(pod: { namespace: string; name: string }): void {
    if (this.#cluster.unplug(objectKey(pod.namespace, pod.name))) this.#kickAfterAnswer();
  }

  /**
   * Packets each rule of the table counted since its chain was written (read every 10 s):
   * allowing rules by policy and rule, drops by pod and direction.
   */
  ruleCounts(): RuleCount[] {
    return this.#counter.counts;
  }

  /**
   * The table was found gone (deleted behind the daemon's back) at a read of its counters: the
   * next pass writes it again whole.
   */
  #tableGone(): void {
    if (this.#closed || !this.#written) return;
    this.#d.logger.warn("network policy: table {table} is gone (deleted by hand?): written again", {
      table: this.#d.table,
    });
    this.#written = null;
    this.#loop.kick();
  }

  /** Counts. */
  stats(): PolicyStats {
    return {
      ...this.#stats,
      policies: this.#policies.size,
      droppedAddresses: this.#cluster.droppedAddresses,
      invalidPolicies: this.#policies.invalidCount,
      countsSkipped: this.#counter.skipped,
      refusedPolicies: this.#policies.refusedCount,
    };
  }

  /** Every pod of the cluster as the watch has it, with its addresses per network. */
  clusterPods(): NetworkedPod[] {
    return this.#cluster.clusterPods();
  }

  /** A pod of the cluster as the watch has it. */
  pod(namespace: string, name: string): NetworkedPod | undefined {
    return this.#cluster.pod(namespace, name);
  }

  /** Namespace labels, by name. */
  namespaceLabels(): Map<string, Labels> {
    return this.#cluster.namespaceLabels();
  }

  /**
   * What a logged denied packet was: the pod of its drop rule, the pod (or address) at the other
   * end, and the policies that isolate the pod that way.
   */
  describe(packet: DeniedPacket): DeniedConnection | undefined {
    return this.#cluster.describe(packet, () => this.#policies.admitted());
  }

  /** The cluster as the compiler sees it, this node's ADDs' addresses included. */
  view(): PolicyView {
    return this.#cluster.view(this.#policies.admitted());
  }

  /** The policies the size limits refuse now, by `namespace/name`. */
  refused(): string[] {
    return this.#policies.refused();
  }

  /**
   * Starts a pass once the request under way has answered: a pass's compile is synchronous, and
   * started at once it would run before the answer is written (the ADD's or DEL's promise settles
   * after the loop's).
   */
  #kickAfterAnswer(): void {
    this.#kickTimer ??= setTimeout(() => {
      this.#kickTimer = undefined;
      this.#loop.kick();
    }, 0);
  }

  /** Runs `fn` when no other write to the table runs (unless `signal` aborts first). */
  #exclusive<T>(fn: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    return this.#writing.run("table", fn, signal);
  }

  /**
   * Writes a just-plugged pod's own chains and verdict map entries, when the table as written
   * holds the allowing chains they jump to; false when it does not (or the write failed), and
   * the pass must write the pod.
   */
  async #writePod(self: PolicyPod, selecting: NetworkPolicy[]): Promise<boolean> {
    const written = this.#written;
    // Egress to named ports lists each peer's own number: only the whole view tells them.
    if (!written || selecting.some(namesEgressPorts)) return false;
    // The pod's rules name their peers' sets, not their members: no pod of the view is read.
    const view = { policies: selecting, namespaces: this.#cluster.namespaceLabels(), pods: [] };
    const [verdict] = compilePolicies(view, [self], ipInBlock);
    const addition = verdict && podAddition(written, renderPodParts(verdict, this.#d.log));
    if (!addition) return false;
    try {
      const { writer, nft, table } = this.#d;
      if (addition.ops.length) {
        await (writer
          ? writer.write(table, addition.ops)
          : nft.apply(opsScript(table, addition.ops)));
      }
    } catch (e) {
      this.#d.logger.warn(
        "network policy: writing {pod}'s chains failed ({error}); the pass writes them",
        {
          pod: `${self.namespace}/${self.name}`,
          error: e instanceof Error ? e.message : String(e),
        },
      );
      // What the kernel holds is not known for sure now: the next pass replaces the table.
      this.#written = null;
      return false;
    }
    this.#written = addition.table;
    this.#stats.podWrites++;
    if (addition.ops.length) this.#stats.lastWriteAt = new Date().toISOString();
    return true;
  }

  /**
   * Writes a just-plugged pod's whole part when the table lacks its allowing rules (the first pod
   * of a combination of rules on the node): a compile of that pod alone, under the policies that
   * select it, added to the table as written in one update in place. Whatever else is pending
   * (another tenant's policies, other pods' changes) waits for the pass after the answer, not the
   * ADD. False when the table as written is not known or disagrees with the pod's part
   * ({@link withPodPart}), or the write failed: then the pass writes the pod.
   */
  async #writeOwn(self: PolicyPod, selecting: NetworkPolicy[]): Promise<boolean> {
    const written = this.#written;
    if (written === null) return false;
    let after: RenderedTable | undefined;
    try {
      const view = { ...this.view(), policies: selecting };
      const own = renderPolicyParts(compilePolicies(view, [self], ipInBlock), this.#d.log);
      after = own && withPodPart(written, own);
    } catch {
      // What the compile or the renderer refuses, the pass meets again, and says and counts.
      return false;
    }
    if (!after) return false;
    const table = this.#d.table;
    const script = written
      ? policyUpdateScript(table, written, after)
      : policyScript(table, tableDefinition(table, after));
    try {
      if (script) await this.#d.nft.apply(script);
    } catch (e) {
      if (this.#closed) return false;
      this.#d.logger.warn(
        "network policy: writing {pod}'s rules failed ({error}); the pass writes them",
        {
          pod: `${self.namespace}/${self.name}`,
          error: e instanceof Error ? e.message : String(e),
        },
      );
      this.#written = null;
      return false;
    }
    this.#written = after;
    this.#stats.ownWrites++;
    if (script) this.#stats.lastWriteAt = new Date().toISOString();
    return true;
  }

  /**
   * One pass. Whatever it throws is logged, counted and tried again (1 s, doubling to 32 s): a
   * pass never ends the process, and the ADDs waiting for it fail (their rules are not known to
   * be in place: the failure is recorded before they are woken).
   */
  #pass(): Promise<void> {
    return this.#exclusive(async () => {
      const n = this.#passes.start();
      try {
        await this.#compileAndWrite();
        this.#failedInRow = 0;
      } catch (e) {
        this.#passFailed(e);
      } finally {
        this.#passes.finish(n);
      }
    });
  }

  #passFailed(e: unknown): void {
    this.#stats.failedPasses++;
    const error = e instanceof Error ? e.message : String(e);
    if (error !== this.#lastError) {
      this.#d.logger.error("network policy: a pass failed: {error}", { error });
    }
    this.#lastError = error;
    this.#written = null;
    const delay = RETRY_MS * 2 ** Math.min(this.#failedInRow++, 5);
    clearTimeout(this.#retryTimer);
    this.#retryTimer = setTimeout(() => this.#loop.kick(), delay);
  }

  async #compileAndWrite(): Promise<void> {
    // No policy and no table: nothing can be isolated (a pod event of a cluster without policies
    // costs no walk of every pod).
    if (this.#policies.size === 0 && this.#written === undefined) {
      this.#stats.isolatedPods = 0;
      return;
    }
    const view = this.view();
    const local = view.pods.filter((p) => (p as { node?: string }).node === this.#d.nodeName);
    this.#policies.tellRefusals(local);
    const verdicts = compilePolicies(view, local, ipInBlock);
    const parts = renderPolicyParts(verdicts, this.#d.log);
    this.#stats.isolatedPods = verdicts.length;
    const before = this.#written;
    if (before === undefined && parts === undefined) return;
    // In place while there is a table before and after (unchanged chains keep their counters);
    // otherwise it is replaced whole, or removed.
    const update = before && parts ? policyUpdateScript(this.#d.table, before, parts) : undefined;
    if (update === "") return;
    const table = this.#d.table;
    try {
      await this.#d.nft.apply(
        update ?? policyScript(table, parts && tableDefinition(table, parts)),
      );
      this.#stats.writes++;
      this.#stats.lastWriteAt = new Date().toISOString();
      if (update !== undefined) this.#stats.setUpdates++;
      if (!before !== !parts) {
        this.#d.logger.info(
          parts === undefined
            ? "network policy: no pod of this node is isolated; table {table} removed"
            : "network policy: table {table} written for {pods} isolated pod(s)",
          { table: this.#d.table, pods: verdicts.length },
        );
      }
      this.#written = parts;
      this.#lastError = undefined;
    } catch (e) {
      // Stopping: the write's nft was killed with the daemon; nothing to say or try again.
      if (this.#closed) return;
      this.#stats.failures++;
      this.#stats.lastFailureAt = new Date().toISOString();
      const error = e instanceof Error ? e.message : String(e);
      if (error !== this.#lastError) {
        this.#d.logger.error("network policy: cannot write table {table}: {error}", {
          table: this.#d.table,
          error,
        });
      }
      this.#lastError = error;
      // An update in place that failed may have met a table changed behind the daemon's back
      // (flushed by hand): the next try replaces it whole.
      if (update !== undefined) this.#written = null;
      // Tried again shortly; the ADDs waiting meanwhile fail (their rules are not in place).
      setTimeout(() => this.#loop.kick(), RETRY_MS);
    }
  }

  /** Waits for the pass under way (and those it triggered), or due after an answer. */
  async idle(): Promise<void> {
    while (this.#kickTimer) await new Promise((r) => setTimeout(r, 0));
    await this.#loop.idle();
  }

  /** Stops writing (the table stays; the uninstall removes it). */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#syncTimer);
    this.#counter.stop();
    clearTimeout(this.#kickTimer);
    clearTimeout(this.#retryTimer);
    await this.#loop.idle().catch(() => {});
  }
}
