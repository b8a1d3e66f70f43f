/**
 * What the cluster suite's steps share: its namespace, pods made from objects, waiting for them,
 * asking one pod's HTTP server from another, and `ipam check`.
 *
 * @module
 */
import { assertEquals } from "deno-std/assert/mod.js";
import { exec, kubectl, nodeexec, type PodInfo, pods, REPO, until } from "./_realcluster.ts";

/** The suite's namespace. */
export const NS = "ferry-suite";
/** The e2e image every test pod runs. */
export const AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.43";

/** Applies a manifest given as an object. */
export async function apply(obj: unknown): Promise<void> {
  const file = await Deno.makeTempFile({ suffix: ".json" });
  try {
    await Deno.writeTextFile(file, JSON.stringify(obj));
    await kubectl("apply", "-f", file);
  } finally {
    await Deno.remove(file);
  }
}

/** An agnhost pod serving HTTP on 8080, on `node`, with `annotations`. */
export function server(name: string, node: string, annotations: Record<string, string> = {}) {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, labels: { app: name }, annotations },
    spec: {
      nodeName: node,
      terminationGracePeriodSeconds: 1,
      containers: [{ name: "c", image: AGNHOST, args: ["netexec", "--http-port=8080"] }],
    },
  };
}

/** Waits until every pod of `selector` in the suite's namespace is Ready; returns them. */
export async function ready(selector: string, count: number): Promise<PodInfo[]> {
  let found: PodInfo[] = [];
  await until(
    async () => {
      found = await pods(NS, selector);
      return found.length === count && found.every((p) => p.ready && p.ip);
    },
    `${count} pods ${selector} Ready`,
    180_000,
  );
  return found;
}

/** `deno task ipam-check` against the cluster: exit 0, or its report. */
export async function ipamCheck(): Promise<void> {
  const r = await exec(Deno.execPath(), [
    "run",
    "--allow-all",
    "--frozen",
    `${REPO}daemon/tools/ipam_check.ts`,
    "--kubeconfig",
    "/opt/realcluster/kubeconfig",
  ]);
  assertEquals(r.code, 0, `ipam check:\n${r.out}${r.err}`);
}

/** Pod `from` asks `ip`'s HTTP server for its hostname (2 s at most). */
export function askHostname(from: string, ip: string) {
  return exec("kubectl", [
    "exec",
    "-n",
    NS,
    from,
    "--",
    "curl",
    "-s",
    "-m",
    "2",
    `http://${ip}:8080/hostname`,
  ]);
}

/**
 * Whether `from` gets `expect` from `ip`'s HTTP server within 30 s (the server in a pod just made
 * Ready may not listen yet: agnhost has no readiness probe); how long the first answer took is
 * printed.
 */
export async function reaches(
  from: string,
  ip: string,
  expect: (text: string) => boolean,
): Promise<void> {
  const started = Date.now();
  let last = "";
  await until(
    async () => {
      const r = await askHostname(from, ip);
      last = `exit ${r.code}: ${r.out}${r.err}`.trim();
      return r.code === 0 && expect(r.out.trim());
    },
    `${from} reaches ${ip} (last: ${last})`,
    30_000,
  );
  console.log(`${from} → ${ip}: first answer after ${Date.now() - started} ms`);
}

/**
 * Whether `from` stops getting answers from `ip` within `ms` (a policy taking effect): three
 * requests in a row must fail.
 */
export async function blocked(from: string, ip: string, ms = 30_000): Promise<void> {
  let failures = 0;
  await until(
    async () => {
      const r = await askHostname(from, ip);
      failures = r.code === 0 ? 0 : failures + 1;
      return failures >= 3;
    },
    `${from} no longer reaches ${ip}`,
    ms,
  );
}

/** Ferry's routes (protocol 199) on `node`. */
export async function ferryRoutes(node: string): Promise<string> {
  return (await nodeexec(node, "ip", "route", "show", "proto", "199")).out;
}

/** The DaemonSet rolled out, every node Ready. */
export async function ferryReady(): Promise<void> {
  await kubectl("rollout", "status", "-n", "kube-system", "ds/ferry", "--timeout=300s");
  await kubectl("wait", "--for=condition=Ready", "node", "--all", "--timeout=180s");
}
