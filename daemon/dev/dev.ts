/**
 * `deno task dev [--pods FILE]...`: Ferry for local work, with no cluster. Starts the embedded API
 * stand-in on loopback and a daemon for node `dev-node` watching it, with socket, state, kubeconfig
 * and the installed shim under `.dev/` in the repository. Pods from the given YAML or JSON files
 * (a Pod, a List, or several YAML documents) are created in the stand-in, bound to `dev-node`
 * unless they name a node. Reloads on code changes (`--watch`); prints how to drive it.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { parseAll } from "deno-std/yaml/parse.js";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { install, installUnder } from "../../cni/install.ts";
import { KubeClient } from "../k8s/client.ts";
import { PODS } from "../k8s/resources.ts";
import { HttpTransport } from "../k8s/transport.ts";
import { resolveConfig } from "../config/config.ts";
import { setupLogging } from "../telemetry/log.ts";
import { startDaemon } from "../wiring/main.ts";
import { KubeStandin } from "./kube_standin/server.ts";

/** The node the dev daemon serves. */
export const DEV_NODE = "dev-node";

/** Reads pods from a YAML or JSON file: one Pod, a List of them, or several YAML documents. */
export async function readPods(path: string): Promise<Pod[]> {
  const docs = parseAll(await Deno.readTextFile(path)) as unknown[];
  const pods: Pod[] = [];
  for (const doc of docs) {
    if (!doc || typeof doc !== "object") continue;
    const d = doc as { kind?: string; items?: unknown[] };
    for (const item of d.kind?.endsWith("List") ? d.items ?? [] : [doc]) {
      const pod = item as Pod;
      if (pod.kind && pod.kind !== "Pod") {
        throw new Error(`${path}: only pods are supported, found ${pod.kind}`);
      }
      pods.push(pod);
    }
  }
  return pods;
}

if (import.meta.main) {
  const flags = parseArgs(Deno.args, { collect: ["pods"], string: ["pods"] });
  const repo = new URL("../../", import.meta.url).pathname;
  const dev = `${repo}.dev`;
  await Deno.mkdir(dev, { recursive: true });
  const api = await KubeStandin.start({ token: "dev" });
  await Deno.writeTextFile(`${dev}/kubeconfig`, api.kubeconfig());
  const config = resolveConfig({
    logLevel: "debug",
    network: { subnet: "10.244.251.0/24", bridge: "ferrydev0", mtu: 1500 },
    masquerade: { enabled: false },
  }, {
    socket: `${dev}/run/ferry.sock`,
    stateDir: `${dev}/state`,
    nodeName: DEV_NODE,
    kubeconfig: `${dev}/kubeconfig`,
  });
  await setupLogging(config.logLevel);
  const transport = new HttpTransport({ server: api.url, token: () => Promise.resolve("dev") });
  const kube = new KubeClient(transport);
  for (const file of (flags.pods ?? []) as string[]) {
    for (const pod of await readPods(file)) {
      const spec = { ...pod.spec, nodeName: pod.spec?.nodeName ?? DEV_NODE } as Pod["spec"];
      const created = await kube.create<Pod>(PODS, {
        ...pod,
        metadata: { namespace: "default", ...pod.metadata },
        spec,
      });
      console.error(
        `created pod ${created.metadata!.namespace}/${created.metadata!.name} on ${spec!.nodeName}`,
      );
    }
  }
  const { shim } = await install(installUnder(dev, config.socket));
  const daemon = await startDaemon(config);
  console.error(
    `API stand-in: ${api.url} (kubeconfig ${dev}/kubeconfig)\ndaemon: ${config.socket} for node ${DEV_NODE}\nshim: ${shim}\n` +
      `try (as root): ip netns add demo && echo '{"cniVersion":"1.0.0","name":"ferry","type":"ferry"}' | ` +
      `CNI_COMMAND=ADD CNI_CONTAINERID=demo1 CNI_NETNS=/var/run/netns/demo CNI_IFNAME=eth0 CNI_PATH=/usr/lib/cni ` +
      `CNI_ARGS='K8S_POD_NAMESPACE=default;K8S_POD_NAME=<a pod from --pods>' ${shim}`,
  );
  const stop = async () => {
    await daemon.stop();
    transport.close();
    await api.stop();
    Deno.exit(0);
  };
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  await daemon.finished;
}
