/**
 * Runs connectivity-test's forged-source check (the commands are `forge.ts`'s): reads the node's
 * port security through its Ferry pod (skipped, saying so, when it is off), sends honest
 * datagrams (they must arrive), forged ones (they must not), and waits, bounded, for the node's
 * dropped-frame counter (`ferry_spoofed_packets`, `/v1/stats` `portSecurity.dropped.ipv4`) to
 * count them.
 *
 * @module
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { PODS } from "../../daemon/k8s/resources.ts";
import { FERRY_SELECTOR } from "../ferry_pods.ts";
import { execNodeReport } from "../status_read.ts";
import { DATAGRAMS, forgedArgv, honestArgv, noPorts, snmpArgv } from "./forge.ts";
import { TEST_CONTAINER } from "./objects.ts";
import type { Check } from "./plan.ts";
import type { CheckResult } from "./render.ts";
import type { KubeClient } from "../../daemon/k8s/client.ts";
import type { PodExec } from "../pod_exec.ts";

/** What the forged-source check needs of the run (the run's own deps, `run.ts`, have it all). */
export interface ForgedCheckDeps {
  /** The API. */
  client: KubeClient;
  /** Exec into the test pods. */
  exec: PodExec;
  /** Ctrl-C. */
  signal: AbortSignal;
  /** Now, in ms. */
  now(): number;
  /** Waits `ms` unless `signal` aborts first (then rejects). */
  wait(ms: number, signal: AbortSignal): Promise<void>;
  /** The run's namespace. */
  namespace: string;
  /** Ferry's namespace (its pods give each node's port security counters). */
  ferryNamespace: string;
  /** How long a node's dropped-frame counters may take to count a forgery (read every 10 s). */
  spoofCountWaitMs: number;
}

/** A node's port security as its daemon reports it, or why it cannot be read. */
type PortSecurity = { enabled: boolean; dropped: number } | { error: string };

async function portSecurityOf(d: ForgedCheckDeps, node: string): Promise<PortSecurity> {
  const pods = (await d.client.listAll<Pod>(PODS, {
    namespace: d.ferryNamespace,
    labelSelector: FERRY_SELECTOR,
  })).items.filter((p) => p.spec?.nodeName === node && !p.metadata?.deletionTimestamp);
  if (!pods.length) return { error: `no Ferry pod on ${node} in ${d.ferryNamespace}` };
  const report = await execNodeReport(d.exec, pods[0], 30_000);
  if ("error" in report) return { error: report.error };
  const ps = (report.stats as { portSecurity?: { enabled: boolean; dropped?: { ipv4?: number } } })
    .portSecurity;
  return { enabled: ps?.enabled ?? false, dropped: ps?.dropped?.ipv4 ?? 0 };
}

/**
 * The forged-source check of `c` (from its `-a` pod to its `-b` pod, as `c.spoofAs`).
 *
 * @example
 * ```ts
 * const r = await runForgedCheck(deps, check); // r.ok, r.reason, r.skipped
 * ```
 */
export async function runForgedCheck(d: ForgedCheckDeps, c: Check): Promise<CheckResult> {
  const start = d.now();
  const node = c.from.node;
  const end = (ok: boolean, why?: string): CheckResult => ({
    check: c,
    ok,
    ms: d.now() - start,
    ...(why ? { reason: why } : {}),
  });
  const inPod = (name: string, argv: string[]) =>
    d.exec.exec(
      { namespace: d.namespace, name, container: TEST_CONTAINER },
      argv,
      AbortSignal.any([d.signal, AbortSignal.timeout(60_000)]),
    );
  const said = (r: { stderr: string; stdout: string; code: number }) =>
    (r.stderr || r.stdout).trim().split("\n").at(-1) || `exit status ${r.code}`;
  const arrived = async (): Promise<number> => {
    const r = await inPod(c.to.label, snmpArgv());
    if (r.code !== 0) throw new Error(`cannot read ${c.to.label}'s UDP counters: ${said(r)}`);
    return noPorts(r.stdout);
  };
  const until = async <T>(read: () => Promise<T>, done: (v: T) => boolean, ms: number) => {
    const deadline = d.now() + ms;
    let last = await read();
    while (!done(last) && d.now() < deadline) {
      await d.wait(500, d.signal);
      last = await read();
    }
    return last;
  };
  const before = await portSecurityOf(d, node);
  if ("error" in before) {
    return end(false, `cannot read ${node}'s port security: ${before.error}`);
  }
  if (!before.enabled) {
    return { ...end(true), skipped: `port security is off on ${node}` };
  }
  try {
    const first = await arrived();
    const honest = await inPod(c.from.name, honestArgv(c.to.address));
    if (honest.code !== 0) return end(false, `the honest datagrams were not sent: ${said(honest)}`);
    const afterHonest = await until(arrived, (n) => n >= first + DATAGRAMS, 5_000);
    if (afterHonest < first + DATAGRAMS) {
      return end(
        false,
        `${afterHonest - first} of ${DATAGRAMS} honest datagrams arrived at ${c.to.label}`,
      );
    }
    const forged = await inPod(c.from.name, forgedArgv(c.to.address, c.spoofAs!.address));
    if (forged.code !== 0) return end(false, `could not forge: ${said(forged)}`);
    const afterForged = await arrived();
    if (afterForged > afterHonest) {
      return end(
        false,
        `${afterForged - afterHonest} of ${DATAGRAMS} datagrams forged as ${c.spoofAs!.label} ` +
          `(${c.spoofAs!.address}) arrived at ${c.to.label}: not dropped`,
      );
    }
  } catch (e) {
    if (d.signal.aborted) throw e;
    return end(false, e instanceof Error ? e.message : String(e));
  }
  const after = await until(
    () => portSecurityOf(d, node),
    (p) => !("error" in p) && p.dropped >= before.dropped + DATAGRAMS,
    d.spoofCountWaitMs,
  );
  if ("error" in after) return end(false, `cannot read ${node}'s port security: ${after.error}`);
  if (after.dropped < before.dropped + DATAGRAMS) {
    return end(
      false,
      `the forged datagrams did not arrive, but ${node}'s dropped-frame counter ` +
        `(ferry_spoofed_packets, ipv4) went ${before.dropped} → ${after.dropped}, not +${DATAGRAMS}, ` +
        `within ${Math.round(d.spoofCountWaitMs / 1000)} s`,
    );
  }
  return end(true);
}
