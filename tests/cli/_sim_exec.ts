/**
 * The test side of `kubectl ferry`'s exec: Ferry pod objects for a simulated cluster's nodes, and
 * a {@link PodExec} that runs the node report a `kubectl exec` would run, against the simulated
 * node's own daemon (its config file, so its socket and state directory).
 *
 * @module
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import type { SimCluster, SimNode } from "../../daemon/dev/cluster_sim.ts";
import { PODS } from "../../daemon/k8s/resources.ts";
import { FERRY_CONTAINER } from "../../cli/ferry_pods.ts";

/**
 * The namespace the tests install Ferry's pods in (`-n`): `default`, which a bare real API server
 * has with its ServiceAccount (kube-system's comes from a controller-manager, which it lacks).
 */
export const TEST_FERRY_NAMESPACE = "default";
import type { ExecResult, PodExec, PodRef } from "../../cli/pod_exec.ts";

const TOOLS = new URL("../../daemon/tools/", import.meta.url).pathname;

/** The Ferry pod's name on a simulated node. */
export const ferryPodName = (node: SimNode) => `ferry-${node.name}`;

/**
 * Creates a Running, Ready Ferry pod object on each node, as the DaemonSet's would be (the status
 * written as a kubelet writes it, through `/status`: a real API server drops it from a create).
 */
export async function createFerryPods(
  c: SimCluster,
  startedAt: string,
  restarts = 1,
): Promise<void> {
  for (const node of c.nodes) {
    const status: Pod["status"] = {
      phase: "Running",
      conditions: [{ type: "Ready", status: "True" }],
      containerStatuses: [{
        name: FERRY_CONTAINER,
        image: "ferry:test",
        imageID: "",
        ready: true,
        restartCount: restarts,
        state: { running: { startedAt } },
      }],
    };
    await c.client.create<Pod>(PODS, {
      metadata: {
        name: ferryPodName(node),
        namespace: TEST_FERRY_NAMESPACE,
        labels: { "app.kubernetes.io/name": "ferry" },
      },
      spec: {
        nodeName: node.name,
        hostNetwork: true,
        containers: [{ name: FERRY_CONTAINER, image: "ferry:test" }],
      },
    });
    await c.client.patchMerge(PODS, TEST_FERRY_NAMESPACE, ferryPodName(node), { status }, {
      subresource: "status",
    });
  }
}

/** Removes the Ferry pod objects (at once: no kubelet confirms their end). */
export async function removeFerryPods(c: SimCluster): Promise<void> {
  for (const node of c.nodes) {
    await c.client.delete(PODS, TEST_FERRY_NAMESPACE, ferryPodName(node), { gracePeriodSeconds: 0 })
      .catch(() => {});
  }
}

/**
 * `-n` for the tests' Ferry namespace and `--node` for each of the simulation's nodes (a real API
 * server may hold others' nodes).
 */
export const scopeFlags = (c: SimCluster) => [
  "-n",
  TEST_FERRY_NAMESPACE,
  ...c.nodes.flatMap((n) => ["--node", n.name]),
];

/**
 * Runs what the CLI asks of a Ferry pod on the simulated node it names: the node tool the argv
 * names (`daemon/tools/*.ts`), inside the node's network namespace, with the node's config file in
 * place of the DaemonSet's; its log is the node daemon's log file. Records every call.
 */
export class SimExec implements PodExec {
  /** The calls, as `pod argv…`. */
  readonly calls: string[] = [];
  readonly #c: SimCluster;

  /** Creates it for cluster `c`. */
  constructor(c: SimCluster) {
    this.#c = c;
  }

  /** Runs the node tool on the pod's node; any other command fails as a missing file would. */
  async exec(pod: PodRef, argv: string[], signal: AbortSignal): Promise<ExecResult> {
    this.calls.push(`${pod.namespace}/${pod.name} ${argv.join(" ")}`);
    const node = this.#node(pod);
    const at = argv.findIndex((a) => /\/daemon\/tools\/node_[a-z]+\.ts$/.test(a));
    if (!node || at < 0) {
      return { code: 1, stdout: "", stderr: `no such pod or command: ${pod.name} ${argv[0]}` };
    }
    const nodeDir = node.socket.slice(0, node.socket.lastIndexOf("/run/"));
    const script = `${TOOLS}${argv[at].slice(argv[at].lastIndexOf("/") + 1)}`;
    const args = argv.slice(at + 1).map((a) =>
      a.startsWith("--config=") ? `--config=${nodeDir}/config.json` : a
    );
    const out = await new Deno.Command("ip", {
      args: [
        "netns",
        "exec",
        node.ns.name,
        Deno.execPath(),
        "run",
        "--allow-all",
        "--frozen",
        script,
        ...args,
      ],
      stdout: "piped",
      stderr: "piped",
      signal,
    }).output();
    const text = (b: Uint8Array) => new TextDecoder().decode(b);
    return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
  }

  /** The node daemon's log file (there is no previous run's). */
  async logs(pod: PodRef, previous: boolean): Promise<ExecResult> {
    const node = this.#node(pod);
    if (!node || previous) {
      return { code: 1, stdout: "", stderr: `previous terminated container not found` };
    }
    return { code: 0, stdout: await Deno.readTextFile(node.log), stderr: "" };
  }

  #node(pod: PodRef) {
    return pod.container === FERRY_CONTAINER
      ? this.#c.nodes.find((n) => ferryPodName(n) === pod.name)
      : undefined;
  }
}
