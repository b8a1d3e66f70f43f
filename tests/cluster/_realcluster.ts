/**
 * The real three-node cluster of `../shared/tools/realcluster` (its own control plane; per node a
 * kubelet, containerd and kube-proxy in the node's network, mount and UTS namespaces), driven from
 * Ferry's cluster suite: its scripts, kubectl on its API, commands inside its nodes.
 *
 * @module
 */

/** This checkout (read only by the shared scripts). */
export const REPO = new URL("../../", import.meta.url).pathname;
/**
 * The shared scripts: `FERRY_REALCLUSTER_TOOLS` when set (`.ci/run` sets it), else beside the
 * checkout (`../shared/tools/realcluster`), else the shared folder of this machine.
 */
export const TOOLS = await (async () => {
  const candidates = [
    Deno.env.get("FERRY_REALCLUSTER_TOOLS"),
    new URL("../../../shared/tools/realcluster/", import.meta.url).pathname,
    "/work/shared/tools/realcluster/",
  ].filter((d): d is string => !!d).map((d) => d.endsWith("/") ? d : `${d}/`);
  for (const d of candidates) {
    if (await Deno.stat(`${d}start.sh`).then(() => true, () => false)) return d;
  }
  return candidates[1];
})();
/** Where the cluster is built. */
export const RC = "/opt/realcluster";
/** Its kubeconfig. */
export const KUBECONFIG = `${RC}/kubeconfig`;
/** Its nodes. */
export const NODES = ["rc-node1", "rc-node2", "rc-node3"];

/** Whether the cluster can run here (built, root). */
export const CLUSTER_BUILT = Deno.uid() === 0 &&
  await Deno.stat(`${RC}/bin/kubelet`).then(() => true, () => false) &&
  await Deno.stat(`${RC}/bin/e2e.test`).then(() => true, () => false) &&
  await Deno.stat(`${TOOLS}start.sh`).then(() => true, () => false);

/** The output of a command, and whether it succeeded. */
export interface Ran {
  /** Exit code. */
  code: number;
  /** Standard output. */
  out: string;
  /** Standard error. */
  err: string;
}

/** Runs a command with the cluster's kubeconfig; never throws for its exit status. */
export async function exec(
  cmd: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<Ran> {
  const res = await new Deno.Command(cmd, {
    args,
    env: { KUBECONFIG, ...env },
    stdout: "piped",
    stderr: "piped",
    stdin: "null",
  }).output();
  const dec = new TextDecoder();
  return { code: res.code, out: dec.decode(res.stdout), err: dec.decode(res.stderr) };
}

/** Runs a command and returns its output; throws with its output when it fails. */
export async function must(
  cmd: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<string> {
  const r = await exec(cmd, args, env);
  if (r.code !== 0) {
    throw new Error(
      `${cmd} ${args.join(" ")} failed (${r.code}):\n${(r.out + r.err).slice(-4000)}`,
    );
  }
  return r.out;
}

/** Runs a shared script (`start.sh`, `ferry.sh image`, …). */
export function script(
  name: string,
  args: string[] = [],
  env: Record<string, string> = {},
): Promise<string> {
  return must("bash", [`${TOOLS}${name}`, ...args], env);
}

/** kubectl on the cluster. */
export function kubectl(...args: string[]): Promise<string> {
  return must("kubectl", args);
}

/** kubectl's JSON output. */
export async function kubectlJson<T>(...args: string[]): Promise<T> {
  return JSON.parse(await kubectl(...args, "-o", "json")) as T;
}

/** Runs a command inside node `node` (its network, mount and UTS namespaces). */
export function nodeexec(node: string, ...cmd: string[]): Promise<Ran> {
  return exec("nsenter", [
    `--net=/run/netns/${node}`,
    `--mount=/run/realcluster/ns/${node}.mnt`,
    `--uts=/run/realcluster/ns/${node}.uts`,
    "--",
    ...cmd,
  ]);
}

/** Waits (bounded) until `probe` holds; throws naming `what`. */
export async function until(
  probe: () => Promise<boolean>,
  what: string,
  ms = 120_000,
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await probe().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** A pod as the suite reads it. */
export interface PodInfo {
  /** Name. */
  name: string;
  /** Node. */
  node: string;
  /** Address. */
  ip: string;
  /** Ready condition. */
  ready: boolean;
}

/** The pods of namespace `ns` with label selector `selector`. */
export async function pods(ns: string, selector: string): Promise<PodInfo[]> {
  const list = await kubectlJson<{
    items: {
      metadata: { name: string };
      spec: { nodeName?: string };
      status: { podIP?: string; conditions?: { type: string; status: string }[] };
    }[];
  }>("get", "pods", "-n", ns, "-l", selector);
  return list.items.map((p) => ({
    name: p.metadata.name,
    node: p.spec.nodeName ?? "",
    ip: p.status.podIP ?? "",
    ready: p.status.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false,
  }));
}

/** Runs `e2e.sh LABEL FOCUS [SKIP]`; the specs' outcomes (`PASS`/`FAIL` lines) and the totals. */
export async function e2e(
  label: string,
  focus?: string,
  skip?: string,
): Promise<{ passed: number; failed: string[]; text: string }> {
  const args = [label, ...(focus ? [focus] : []), ...(skip ? [skip] : [])];
  const text = await script("e2e.sh", args);
  const total = /TOTAL(.*)$/m.exec(text)?.[1] ?? "";
  const passed = Number(/PASS=(\d+)/.exec(total)?.[1] ?? 0);
  const failed = text.split("\n").filter((l) => l.startsWith("FAIL "));
  return { passed, failed, text };
}

/** The pods labelled `app.kubernetes.io/name=<app>` in kube-system, with their nodes. */
export async function appPods(app: string): Promise<{ name: string; node: string }[]> {
  const list = await kubectlJson<
    { items: { metadata: { name: string }; spec: { nodeName: string } }[] }
  >("get", "pods", "-n", "kube-system", "-l", `app.kubernetes.io/name=${app}`);
  return list.items.map((p) => ({ name: p.metadata.name, node: p.spec.nodeName }));
}

/** The pod of DaemonSet app `app` (Ferry's by default) on `node`. */
export async function podOn(node: string, app = "ferry"): Promise<string> {
  return (await appPods(app)).find((p) => p.node === node)!.name;
}

/**
 * The uninstall as docs/install.md gives it: the DaemonSet deleted, `deploy/uninstall` applied and
 * rolled out (each node cleaned by its init step; what it removed is printed), then both deleted.
 */
export async function uninstallFerry(): Promise<void> {
  await kubectl(
    "delete",
    "-n",
    "kube-system",
    "daemonset",
    "ferry",
    "--ignore-not-found",
    "--wait=true",
    "--timeout=120s",
  );
  await until(async () => (await appPods("ferry")).length === 0, "Ferry's pods gone", 120_000);
  await kubectl("apply", "-k", `${REPO}deploy/uninstall`);
  await kubectl("rollout", "status", "-n", "kube-system", "ds/ferry-uninstall", "--timeout=180s");
  for (const p of await appPods("ferry-uninstall")) {
    console.log(
      `${p.node}: ${await kubectl("logs", "-n", "kube-system", p.name, "-c", "uninstall")}`,
    );
  }
  await kubectl("delete", "-k", `${REPO}deploy/uninstall`, "--wait=true");
  await kubectl(
    "delete",
    "-k",
    `${REPO}deploy`,
    "--ignore-not-found",
    "--wait=true",
    "--timeout=120s",
  );
}

/** A node's kubelet as `start.sh` runs it: enough to start it again once its node is deleted. */
export interface Kubelet {
  /** The node. */
  node: string;
  /** Its command line (nsenter execs the kubelet, so this is the kubelet's own). */
  cmdline: string[];
}

/**
 * Drains `node` and deletes it from the API (`kubectl drain`, `kubectl delete node`), then waits
 * until the control plane's pod GC has deleted the pods bound to it (after its quarantine of about
 * 40 s: a node registered again before that keeps them, and their addresses). Returns its kubelet,
 * still running, for {@link registerAgain}.
 */
export async function deleteNode(node: string): Promise<Kubelet> {
  const pid = (await Deno.readTextFile(`/run/realcluster/pids/kubelet-${node}.pid`)).trim();
  const cmdline = (await Deno.readTextFile(`/proc/${pid}/cmdline`)).split("\0").filter(Boolean);
  await kubectl(
    "drain",
    node,
    "--ignore-daemonsets",
    "--delete-emptydir-data",
    "--force",
    "--timeout=180s",
  );
  await kubectl("delete", "node", node);
  await until(
    async () => {
      const all = await kubectlJson<{ items: { spec: { nodeName?: string } }[] }>(
        "get",
        "pods",
        "-A",
      );
      return !all.items.some((p) => p.spec.nodeName === node);
    },
    `the pods of ${node} deleted by the pod GC`,
    180_000,
  );
  return { node, cmdline };
}

/**
 * Adds a deleted node back: its kubelet restarted in the node's namespaces registers it again.
 * Waits until it is Ready (and has a podCIDR, when `podCIDR`).
 */
export async function registerAgain(kubelet: Kubelet, podCIDR: boolean): Promise<void> {
  const { node, cmdline } = kubelet;
  const pidFile = `/run/realcluster/pids/kubelet-${node}.pid`;
  const pid = (await Deno.readTextFile(pidFile)).trim();
  Deno.kill(Number(pid), "SIGTERM");
  await until(
    async () => (await exec("kill", ["-0", pid])).code !== 0,
    "the kubelet stopped",
    30_000,
  );
  const started = await exec("bash", [
    "-c",
    `nohup nsenter --net=/run/netns/${node} --mount=/run/realcluster/ns/${node}.mnt ` +
    `--uts=/run/realcluster/ns/${node}.uts -- "$@" ` +
    `>>${RC}/nodes/${node}/logs/kubelet.log 2>&1 </dev/null & echo $!`,
    "--",
    ...cmdline,
  ]);
  await Deno.writeTextFile(pidFile, started.out.trim() + "\n");
  await until(
    async () => {
      const n = await kubectlJson<
        { spec: { podCIDR?: string }; status: { conditions: { type: string; status: string }[] } }
      >("get", "node", node);
      return (!podCIDR || !!n.spec.podCIDR) &&
        n.status.conditions.some((c) => c.type === "Ready" && c.status === "True");
    },
    `${node} registered again${podCIDR ? ", with a podCIDR," : ""} and Ready`,
    240_000,
  );
}

/** The Events of namespace `ns` with `reason` about the object called `name`. */
export async function eventsAbout(
  ns: string,
  name: string,
  reason: string,
): Promise<{ message: string; source?: { component?: string; host?: string } }[]> {
  return (await kubectlJson<
    { items: { message: string; source?: { component?: string; host?: string } }[] }
  >(
    "get",
    "events",
    "-n",
    ns,
    "--field-selector",
    `involvedObject.name=${name},reason=${reason}`,
  )).items;
}
