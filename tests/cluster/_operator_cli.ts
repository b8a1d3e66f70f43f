/**
 * `kubectl ferry` (#45) on the real cluster: `status` healthy and with one node's Ferry stopped,
 * `connectivity-test` whole and with a node's route or policy table broken by hand, `sysdump`.
 * Run from this checkout (`cli/main.ts`) with the cluster's kubeconfig; what only a node knows it
 * reads through the node scripts of the image the suite built.
 *
 * @module
 */
import { assert, assertEquals } from "deno-std/assert/mod.js";
import {
  exec,
  KUBECONFIG,
  kubectl,
  kubectlJson,
  nodeexec,
  NODES,
  podOn,
  type Ran,
  REPO,
  until,
} from "./_realcluster.ts";
import { apply, blocked, ferryReady, NS, ready, server } from "./_suite.ts";
import { IMAGE_WORKDIR } from "../../deploy/image_spec.ts";

/** `kubectl ferry ARGS…` from this checkout, against the cluster. */
export function ferryCli(...args: string[]): Promise<Ran> {
  return exec(Deno.execPath(), [
    "run",
    "--allow-all",
    "--frozen",
    "--quiet",
    `${REPO}cli/main.ts`,
    ...args,
    "--kubeconfig",
    KUBECONFIG,
  ]);
}

/** What a command printed, for a failure message. */
function said(r: Ran): string {
  return `exit ${r.code}\n${r.out.slice(-3000)}\n${r.err.slice(-3000)}`;
}

/** The image holds the node scripts the command line runs in each Ferry pod. */
export async function imageHasNodeScripts(): Promise<void> {
  for (const n of NODES) {
    const r = await exec("kubectl", [
      "exec",
      "-n",
      "kube-system",
      await podOn(n),
      "-c",
      "ferry",
      "--",
      "ls",
      `${IMAGE_WORKDIR}/daemon/tools/node_report.ts`,
      `${IMAGE_WORKDIR}/daemon/tools/node_dump.ts`,
    ]);
    assertEquals(r.code, 0, `${n}: the image lacks the CLI's node scripts: ${said(r)}`);
  }
}

/**
 * Keeps Ferry off `node` while `fn` runs: the DaemonSet updated `OnDelete` (the other nodes'
 * pods stay) with a node affinity that excludes it, so the controller deletes its pod; then both
 * restored, which brings the pod back from the same revision.
 */
async function withoutFerryOn(node: string, fn: () => Promise<void>): Promise<void> {
  const patch = (p: unknown) =>
    kubectl("patch", "-n", "kube-system", "ds/ferry", "--type=merge", "-p", JSON.stringify(p));
  await patch({
    spec: {
      updateStrategy: { type: "OnDelete", rollingUpdate: null },
      template: {
        spec: {
          affinity: {
            nodeAffinity: {
              requiredDuringSchedulingIgnoredDuringExecution: {
                nodeSelectorTerms: [{
                  matchExpressions: [{
                    key: "kubernetes.io/hostname",
                    operator: "NotIn",
                    values: [node],
                  }],
                }],
              },
            },
          },
        },
      },
    },
  });
  try {
    await until(
      async () => !(await podsOfFerry()).some((p) => p.node === node),
      `the Ferry pod of ${node} gone once the DaemonSet excludes it`,
      120_000,
    );
    await fn();
  } finally {
    await patch({
      spec: {
        updateStrategy: { type: "RollingUpdate", rollingUpdate: { maxUnavailable: 1 } },
        template: { spec: { affinity: null } },
      },
    });
    await until(
      async () => (await podsOfFerry()).some((p) => p.node === node),
      `a Ferry pod on ${node} again`,
      120_000,
    );
    await ferryReady();
  }
}

/** Ferry's pods and their nodes. */
async function podsOfFerry(): Promise<{ name: string; node: string }[]> {
  const list = await kubectlJson<
    { items: { metadata: { name: string }; spec: { nodeName: string } }[] }
  >("get", "pods", "-n", "kube-system", "-l", "app.kubernetes.io/name=ferry");
  return list.items.map((p) => ({ name: p.metadata.name, node: p.spec.nodeName }));
}

/** `status`: exit 0 naming every node; with one node's Ferry stopped, exit 1 naming it. */
export async function statusHealthyThenNaming(): Promise<void> {
  const healthy = await ferryCli("status");
  assertEquals(healthy.code, 0, `status on the healthy cluster did not exit 0: ${said(healthy)}`);
  for (const n of NODES) {
    assert(
      new RegExp(`^${n}\\s+ok`, "m").test(healthy.out),
      `status on the healthy cluster does not show ${n} ok: ${said(healthy)}`,
    );
  }
  // Port security's counters per node (on as the DaemonSet ships it), in the screen and the JSON.
  const portsec = [...healthy.out.matchAll(/^ {2}portsec +on, \d+ ports guarded, .*$/gm)];
  assertEquals(portsec.length, NODES.length, `a portsec line per node: ${said(healthy)}`);
  const json = JSON.parse((await ferryCli("status", "-o", "json")).out) as {
    nodes: { node: string; portSecurity?: { enabled: boolean; guardedPorts?: number } }[];
  };
  for (const n of json.nodes) {
    assertEquals(n.portSecurity?.enabled, true, `${n.node}'s port security: ${JSON.stringify(n)}`);
  }
  const off = NODES[1];
  await withoutFerryOn(off, async () => {
    const r = await ferryCli("status", "-o", "json");
    assertEquals(r.code, 1, `status with Ferry stopped on ${off} did not exit 1: ${said(r)}`);
    const report = JSON.parse(r.out) as { unhealthy: string[] };
    assertEquals(report.unhealthy, [off], `status named the wrong nodes unhealthy: ${said(r)}`);
    assert(r.err.includes(off), `status did not name ${off} on stderr: ${said(r)}`);
    const text = await ferryCli("status");
    assertEquals(text.code, 1, said(text));
    assert(
      new RegExp(`^${off}\\s+UNHEALTHY`, "m").test(text.out),
      `status does not mark ${off} UNHEALTHY: ${said(text)}`,
    );
  });
  const again = await ferryCli("status");
  assertEquals(again.code, 0, `status after Ferry came back on ${off}: ${said(again)}`);
}

/** `connectivity-test --json`'s report. */
interface Connectivity {
  passed: number;
  failed: number;
  failedNodes: { node: string; failures: number }[];
  skipped?: number;
  checks: {
    test: string;
    ok: boolean;
    reason?: string;
    repaired?: { afterMs: number };
    skipped?: string;
    from?: { node: string };
  }[];
}

/** Runs `connectivity-test --json ARGS…`; its exit status and report. */
async function connectivity(...args: string[]): Promise<{ r: Ran; run: Connectivity }> {
  const r = await ferryCli("connectivity-test", "--json", ...args);
  let run: Connectivity;
  try {
    run = JSON.parse(r.out) as Connectivity;
  } catch {
    throw new Error(`connectivity-test printed no JSON report: ${said(r)}`);
  }
  return { r, run };
}

/**
 * What `connectivity-test` made of a fault on `node`: the checks it involves failed naming the
 * node, or were repaired while it waited, or (Ferry repaired it before the checks ran) passed with
 * `fixed` holding again. A pass while the fault is still there is the defect this looks for.
 */
async function judged(
  what: string,
  node: string,
  r: Ran,
  run: Connectivity,
  fixed: () => Promise<boolean>,
): Promise<string> {
  const repaired = run.checks.filter((c) => c.repaired);
  if (r.code === 1) {
    assert(run.failed > 0, `${what}: exit 1 with no failed check: ${said(r)}`);
    assert(
      run.failedNodes.some((f) => f.node === node),
      `${what}: the failures do not name ${node}: ${JSON.stringify(run.failedNodes)}`,
    );
    return `failed ${run.failed} checks naming ${JSON.stringify(run.failedNodes)}`;
  }
  assertEquals(r.code, 0, `${what}: ${said(r)}`);
  if (repaired.length) {
    return `passed, ${repaired.length} repaired after ${
      repaired.map((c) => `${(c.repaired!.afterMs / 1000).toFixed(1)} s`).join(", ")
    }`;
  }
  assert(
    await fixed(),
    `${what}: connectivity-test passed every check while the fault was still there`,
  );
  return "passed: Ferry had repaired it before the checks ran";
}

/**
 * `connectivity-test` whole on the healthy cluster; then with a route to another node's pods
 * deleted on one node, and with a node's policy table deleted: each fails the checks that cross
 * it, naming the node, or shows Ferry's repair; each restored afterwards.
 */
export async function connectivityWholeThenBroken(): Promise<void> {
  const whole = await connectivity();
  assertEquals(whole.r.code, 0, `connectivity-test on the healthy cluster: ${said(whole.r)}`);
  assertEquals(whole.run.failed, 0, said(whole.r));
  assert(whole.run.passed >= 6 * NODES.length, `too few checks ran: ${said(whole.r)}`);
  // Port security is on as the DaemonSet ships it: each node's forged-source check ran and passed
  // (dropped, counted), none skipped.
  const forged = whole.run.checks.filter((c) => c.test === "forged-source");
  assertEquals(
    forged.map((c) => [c.from?.node, c.ok, c.skipped ?? null]).sort(),
    NODES.map((n) => [n, true, null]).sort(),
    `the forged-source checks: ${JSON.stringify(forged)}`,
  );

  // A route to the next node's pods deleted by hand on the first node.
  const [node, peer] = NODES;
  const cidr = (await kubectlJson<{ spec: { podCIDR: string } }>("get", "node", peer)).spec
    .podCIDR;
  const route = (await nodeexec(node, "ip", "route", "show", cidr, "proto", "199")).out.trim();
  assert(route, `${node} has no Ferry route to ${peer}'s ${cidr}`);
  const del = await nodeexec(node, "ip", "route", "del", cidr, "proto", "199");
  assertEquals(del.code, 0, `deleting ${node}'s route to ${cidr}: ${del.err}`);
  const routeBack = async () =>
    (await nodeexec(node, "ip", "route", "show", cidr)).out.includes(cidr);
  try {
    const { r, run } = await connectivity(
      "--test",
      "pod-pod-cross-node,node-pod",
      "--wait-repair",
      "60",
    );
    console.log(
      `route ${route} deleted on ${node}: ${await judged(
        "a route deleted",
        node,
        r,
        run,
        routeBack,
      )}`,
    );
  } finally {
    if (!(await routeBack())) {
      await nodeexec(node, "ip", "route", "replace", ...route.split(/\s+/));
    }
  }
  assert(await routeBack(), `${node}'s route to ${cidr} not restored`);

  // A node's policy table deleted while a policy isolates one of its pods.
  const isoNode = NODES[2];
  const table = "ferry-policy";
  await apply(server("iso", isoNode));
  await apply({
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: { name: "iso-deny", namespace: NS },
    spec: { podSelector: { matchLabels: { app: "iso" } }, policyTypes: ["Ingress"] },
  });
  const [iso] = await ready("app=iso", 1);
  await apply(server("iso-client", NODES[0]));
  await ready("app=iso-client", 1);
  const hasTable = async () =>
    (await nodeexec(isoNode, "nft", "list", "table", "inet", table)).code === 0;
  await until(hasTable, `${isoNode} has its policy table inet ${table}`, 60_000);
  await blocked("iso-client", iso.ip, 60_000);
  try {
    const gone = await nodeexec(isoNode, "nft", "delete", "table", "inet", table);
    assertEquals(gone.code, 0, `deleting ${isoNode}'s table inet ${table}: ${gone.err}`);
    const { r, run } = await connectivity(
      "--test",
      "policy-deny,policy-allow",
      "--wait-repair",
      "60",
    );
    console.log(
      `table inet ${table} deleted on ${isoNode}: ${await judged(
        "a policy table deleted",
        isoNode,
        r,
        run,
        hasTable,
      )}`,
    );
    // The policy that isolated a pod before the table went isolates it again.
    await blocked("iso-client", iso.ip, 60_000).catch((e) => {
      throw new Error(`after ${isoNode}'s table inet ${table} was deleted, iso stays open: ${e}`);
    });
  } finally {
    // Restored: the policy and its pod go (the table with them), whatever Ferry made of it.
    await kubectl("delete", "networkpolicy", "-n", NS, "iso-deny", "--wait=true");
    await kubectl("delete", "pod", "-n", NS, "iso", "iso-client", "--wait=true");
  }
}

/** `sysdump`: one tar.gz holding every node's part, and no token. */
export async function sysdumpWhole(): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "ferry-sysdump-" });
  try {
    const file = `${dir}/dump.tar.gz`;
    const r = await ferryCli("sysdump", "--file", file);
    assertEquals(r.code, 0, `sysdump did not collect everything: ${said(r)}`);
    const list = await exec("tar", ["-tzf", file]);
    assertEquals(list.code, 0, `sysdump's archive does not list: ${list.err}`);
    for (const n of NODES) {
      for (const part of ["stats.json", "ferry.log", "routes.txt", "links.txt", "config.json"]) {
        assert(
          new RegExp(`/nodes/${n}/${part.replace(".", "\\.")}$`, "m").test(list.out),
          `sysdump lacks ${n}'s ${part}:\n${list.out}`,
        );
      }
    }
    const x = await exec("tar", ["-xzf", file, "-C", dir]);
    assertEquals(x.code, 0, x.err);
    // The kubeconfig's bearer token, and any service-account token (a JWT), appear nowhere.
    const token = /token:\s*(\S+)/.exec(await Deno.readTextFile(KUBECONFIG))?.[1];
    for (const secret of [token, "eyJhbGciOi"].filter((s): s is string => !!s)) {
      const g = await exec("grep", ["-rlF", "--", secret, dir, "--exclude=dump.tar.gz"]);
      assertEquals(
        g.out.trim(),
        "",
        `sysdump holds a token (${secret.slice(0, 6)}…) in:\n${g.out}`,
      );
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}
