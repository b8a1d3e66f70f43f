/**
 * Runs `kubectl ferry connectivity-test`: creates its namespace, test pods on every node and the
 * Services, waits for them, runs each planned check by exec into the source pod, adds the
 * NetworkPolicies before their checks, and deletes the namespace at the end whatever happened
 * (also when `signal` aborts: Ctrl-C). Progress goes to `progress` as each check ends.
 *
 * @module
 */
import type { Node, Pod, Service } from "kubernetes-types/core/v1.d.ts";
import type { KubeClient } from "../../daemon/k8s/client.ts";
import { NAMESPACES, NETWORK_POLICIES, NODES, PODS, SERVICES } from "../../daemon/k8s/resources.ts";
import { NETWORK_STATUS_ANNOTATION } from "../../daemon/multivif/selections.ts";
import type { PodExec } from "../pod_exec.ts";
import {
  allowClients,
  connectArgv,
  denyAll,
  RUN_LABEL,
  TEST_CONTAINER,
  testNamespace,
  testPods,
  testServices,
} from "./objects.ts";
import { type Check, planChecks, type TestName, type TestPod } from "./plan.ts";
import { type CheckResult, type ConnectivityRun, progressLine } from "./render.ts";
import { runForgedCheck } from "./forged_check.ts";

/** A check's outcome and the run's (their shapes are beside their renderer, `render.ts`). */
export type { CheckResult, ConnectivityRun };

/** What the run needs. */
export interface ConnectivityDeps {
  /** The API. */
  client: KubeClient;
  /** Exec into the test pods. */
  exec: PodExec;
  /** Progress lines (stderr). */
  progress(line: string): void;
  /** Ctrl-C. */
  signal: AbortSignal;
  /** Now, in ms. */
  now(): number;
  /** Waits `ms` unless `signal` aborts first (then rejects). */
  wait(ms: number, signal: AbortSignal): Promise<void>;
  /** The test image. */
  image: string;
  /** The run's namespace. */
  namespace: string;
  /** How long the test pods may take to run. */
  readyTimeoutMs: number;
  /** One connection attempt's limit. */
  connectTimeoutSeconds: number;
  /** How long a NetworkPolicy may take to be enforced on every node. */
  policyWaitMs: number;
  /**
   * How long after every test pod is Ready the Services may take to be served on every node
   * (their endpoints published, then programmed by each node's kube-proxy, all asynchronously).
   */
  serviceWaitMs: number;
  /** How long a failed check is tried again, waiting for Ferry to repair the fault (0: never). */
  repairWaitMs: number;
  /** Ferry's namespace (its pods give each node's port security counters). */
  ferryNamespace: string;
  /** How long a node's dropped-frame counters may take to count a forgery (read every 10 s). */
  spoofCountWaitMs: number;
}

/** Thrown when the test pods are not up in time. */
export class SetupError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "SetupError";
  }
}

async function waitForPods(d: ConnectivityDeps, expected: number): Promise<Pod[]> {
  const deadline = d.now() + d.readyTimeoutMs;
  for (;;) {
    const pods = (await d.client.listAll<Pod>(PODS, {
      namespace: d.namespace,
      labelSelector: `${RUN_LABEL}=true`,
    })).items;
    const up = pods.filter((p) =>
      p.status?.podIP && p.status.conditions?.some((c) => c.type === "Ready" && c.status === "True")
    );
    if (up.length === expected) return pods;
    if (d.now() >= deadline) {
      const down = pods.filter((p) => !up.includes(p)).map((p) =>
        `${p.metadata?.name} on ${p.spec?.nodeName} (${p.status?.phase ?? "Pending"}${
          p.status?.containerStatuses?.[0]?.state?.waiting?.reason
            ? `: ${p.status.containerStatuses[0].state.waiting.reason}`
            : ""
        })`
      );
      throw new SetupError(
        `test pods not ready after ${d.readyTimeoutMs / 1000} s: ${down.join(", ")}`,
      );
    }
    await d.wait(1000, d.signal);
  }
}

async function attempt(
  d: ConnectivityDeps,
  c: Check,
): Promise<{ connected: boolean; why: string }> {
  const r = await d.exec.exec(
    { namespace: d.namespace, name: c.from.name, container: TEST_CONTAINER },
    connectArgv(c.to.address, c.to.port, d.connectTimeoutSeconds),
    AbortSignal.any([d.signal, AbortSignal.timeout((d.connectTimeoutSeconds + 20) * 1000)]),
  );
  return { connected: r.code === 0, why: (r.stderr || r.stdout).trim().split("\n").at(-1) ?? "" };
}

/**
 * Runs one check. Policy checks retry until the policy is in force or `policyWaitMs` passed;
 * Service checks retry until `serviceWaitMs` after `readyAt` (when every test pod was Ready: the
 * Services' endpoints and each node's kube-proxy follow asynchronously), and a pass then is no
 * repair; any check that fails retries for `repairWaitMs` (the operator's `--wait-repair`), and
 * one that then passes on a retry only that wait allowed is reported as repaired, with when.
 */
async function runCheck(d: ConnectivityDeps, c: Check, readyAt: number): Promise<CheckResult> {
  const start = d.now();
  const policy = c.test === "policy-deny" || c.test === "policy-allow";
  const service = c.test === "pod-clusterip" || c.test === "pod-nodeport";
  const settled = service ? readyAt + d.serviceWaitMs : start;
  const deadline = policy ? start + d.policyWaitMs : Math.max(start + d.repairWaitMs, settled);
  // The first failure only `--wait-repair` let the check try again after (not the policy's or
  // the Services' own wait), and whether the attempt under way is such a retry.
  let firstFailure: string | undefined;
  let repairing = false;
  for (;;) {
    const { connected, why } = await attempt(d, c);
    const ok = connected === (c.expect === "connect");
    const now = d.now();
    const ms = now - start;
    if (ok) {
      return repairing && firstFailure
        ? { check: c, ok, ms, repaired: { afterMs: ms, failure: firstFailure } }
        : { check: c, ok, ms };
    }
    const reason = c.expect === "connect"
      ? `no connection: ${why || "refused or timed out"}`
      : `connected although denied (after ${Math.round(ms / 1000)} s)`;
    if (now >= deadline) return { check: c, ok, ms, reason };
    repairing = !policy && now >= settled;
    if (repairing) firstFailure ??= reason;
    await d.wait(policy ? 200 : 1000, d.signal);
  }
}

/** A pod's addresses on `network` (`NS/NAME`), from its network-status annotation. */
export function networkAddresses(p: Pod, network: string): string[] {
  try {
    const entries = JSON.parse(p.metadata?.annotations?.[NETWORK_STATUS_ANNOTATION] ?? "[]") as {
      name?: string;
      default?: boolean;
      ips?: string[];
    }[];
    return entries.find((e) => !e.default && e.name === network)?.ips ?? [];
  } catch {
    return [];
  }
}

function testPodOf(p: Pod, network?: string): TestPod {
  return {
    ...(network ? { networkIps: networkAddresses(p, network) } : {}),
    name: p.metadata?.name ?? "",
    node: p.spec?.nodeName ?? "",
    hostNetwork: p.spec?.hostNetwork ?? false,
    ips: p.status?.podIPs?.map((x) => x.ip!).filter(Boolean) ??
      (p.status?.podIP ? [p.status.podIP] : []),
  };
}

/**
 * The whole run.
 *
 * @example
 * ```ts
 * const run = await runConnectivityTest(deps, { tests: [], external: ["1.1.1.1:443"] });
 * ```
 */
export async function runConnectivityTest(
  d: ConnectivityDeps,
  options: { tests: TestName[]; external: string[]; network?: string },
): Promise<ConnectivityRun> {
  const out: ConnectivityRun = { namespace: d.namespace, results: [] };
  const nodes = (await d.client.listAll<Node>(NODES, {})).items
    .map((n) => n.metadata?.name ?? "").sort();
  await d.client.create(NAMESPACES, testNamespace(d.namespace));
  d.progress(`connectivity-test: namespace ${d.namespace}, ${nodes.length} nodes`);
  try {
    const forger = options.tests.length === 0 || options.tests.includes("forged-source");
    const pods = nodes.flatMap((n, i) =>
      testPods(d.namespace, n, i, d.image, options.network, forger)
    );
    for (const p of pods) await d.client.create(PODS, p, d.signal);
    for (const s of testServices(d.namespace)) await d.client.create(SERVICES, s, d.signal);
    const running = (await waitForPods(d, pods.length)).map((p) => testPodOf(p, options.network));
    const readyAt = d.now();
    const services = await Promise.all(
      testServices(d.namespace).map((s) =>
        d.client.get<Service>(SERVICES, d.namespace, s.metadata!.name!)
      ),
    );
    const clusterIP = services.find((s) => s.spec?.type === "ClusterIP");
    const nodePort = services.find((s) => s.spec?.type === "NodePort")?.spec?.ports?.[0]?.nodePort;
    const checks = planChecks({
      pods: running,
      clusterIPs: clusterIP?.spec?.clusterIPs ??
        (clusterIP?.spec?.clusterIP ? [clusterIP.spec.clusterIP] : []),
      nodePort,
      tests: options.tests,
      external: options.external,
      network: options.network,
    });
    // A deny check passes only for a pair that connected before the policy: a pair that cannot
    // connect at all (a broken node) must not pass as "blocked".
    const before = new Map<Check, string | undefined>();
    for (const [i, c] of checks.entries()) {
      d.signal.throwIfAborted();
      if (c.test === "policy-deny" && checks[i - 1]?.test !== "policy-deny") {
        for (const deny of checks.filter((x) => x.test === "policy-deny")) {
          const { connected, why } = await attempt(d, deny);
          before.set(deny, connected ? undefined : why || "refused or timed out");
        }
        await d.client.create(NETWORK_POLICIES, denyAll(d.namespace), d.signal);
      }
      if (c.test === "policy-allow" && checks[i - 1]?.test !== "policy-allow") {
        await d.client.create(NETWORK_POLICIES, allowClients(d.namespace), d.signal);
      }
      const unreachable = before.get(c);
      const r = c.test === "forged-source"
        ? await runForgedCheck(d, c)
        : unreachable === undefined
        ? await runCheck(d, c, readyAt)
        : {
          check: c,
          ok: false,
          ms: 0,
          reason: `no connection even before the policy: ${unreachable}`,
        };
      out.results.push(r);
      d.progress(progressLine(i + 1, checks.length, r));
    }
  } catch (e) {
    if (d.signal.aborted) out.error = "interrupted";
    else out.error = e instanceof Error ? e.message : String(e);
  } finally {
    await d.client.delete(NAMESPACES, undefined, d.namespace).catch((e) =>
      d.progress(`connectivity-test: deleting namespace ${d.namespace} failed: ${e}`)
    );
    d.progress(`connectivity-test: namespace ${d.namespace} deleted`);
  }
  return out;
}
