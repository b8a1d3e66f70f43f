/**
 * The objects `kubectl ferry connectivity-test` creates, all in a namespace of its own (deleting
 * it removes everything): per node two test pods on the pod network (`-a`, the client; `-b`, the
 * server the policies select; both also on the `--network` NAD when one is given) and one on the node's network (`-host`), pinned by `nodeName` and
 * tolerating every taint, Ready once they listen; a ClusterIP and a NodePort Service of the `-a` pods; the deny-all and
 * allow NetworkPolicies. Pure.
 *
 * @module
 */
import type { Namespace, Pod, Service } from "kubernetes-types/core/v1.d.ts";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import { NETWORKS_ANNOTATION } from "../../daemon/multivif/selections.ts";
import { HOST_PORT, POD_PORT } from "./plan.ts";

/**
 * The test image: agnhost serves (`serve-hostname`: HTTP, nothing else) and connects (`connect`);
 * `--image` replaces it. Not `netexec`: its `/shell` and `/upload` run anything for anyone who
 * reaches the port, which would give every pod of the cluster a shell in a `NET_ADMIN` test pod
 * and in each node's network namespace (the `-host` pods) while a run lasts.
 */
export const DEFAULT_IMAGE = "registry.k8s.io/e2e-test-images/agnhost:2.43";

/** The label every object of a run carries. */
export const RUN_LABEL = "ferry.dev/connectivity-test";

/** The container of every test pod. */
export const TEST_CONTAINER = "agnhost";

/**
 * The run's namespace; Pod Security admission is told to admit its hostNetwork pods (a cluster
 * whose default level is baseline or restricted refuses them otherwise).
 */
export function testNamespace(name: string): Namespace {
  return {
    metadata: {
      name,
      labels: { [RUN_LABEL]: "true", "pod-security.kubernetes.io/enforce": "privileged" },
    },
  };
}

/**
 * The three test pods of the `index`th node; the `-a` pod gets `NET_ADMIN` only when `forger`
 * (the forged-source check will run).
 */
export function testPods(
  ns: string,
  node: string,
  index: number,
  image: string,
  network?: string,
  forger = true,
): Pod[] {
  const pod = (role: "a" | "b" | "host", port = role === "host" ? HOST_PORT : POD_PORT): Pod => ({
    metadata: {
      name: `ct-${index}-${role}`,
      namespace: ns,
      labels: { [RUN_LABEL]: "true", role },
      ...(network && role !== "host" ? { annotations: { [NETWORKS_ANNOTATION]: network } } : {}),
    },
    spec: {
      nodeName: node,
      hostNetwork: role === "host",
      tolerations: [{ operator: "Exists" }],
      terminationGracePeriodSeconds: 0,
      containers: [{
        name: TEST_CONTAINER,
        image,
        args: ["serve-hostname", "--http", `--port=${port}`],
        // The forged-source check's forger puts another pod's address on its own interface.
        ...(role === "a" && forger
          ? { securityContext: { capabilities: { add: ["NET_ADMIN"] } } }
          : {}),
        // Ready once it listens (agnhost has no probe of its own): checks start only then.
        readinessProbe: { tcpSocket: { port }, periodSeconds: 1 },
      }],
    },
  });
  return [pod("a"), pod("b"), pod("host")];
}

/** The ClusterIP and NodePort Services of the `-a` pods (every family the cluster has). */
export function testServices(ns: string): Service[] {
  const service = (name: string, type: "ClusterIP" | "NodePort"): Service => ({
    metadata: { name, namespace: ns, labels: { [RUN_LABEL]: "true" } },
    spec: {
      type,
      selector: { role: "a" },
      ipFamilyPolicy: "PreferDualStack",
      ports: [{ port: POD_PORT, targetPort: POD_PORT, protocol: "TCP" }],
    },
  });
  return [service("ct-clusterip", "ClusterIP"), service("ct-nodeport", "NodePort")];
}

/** Denies all ingress to the `-b` pods. */
export function denyAll(ns: string): NetworkPolicy {
  return {
    metadata: { name: "ct-deny-all", namespace: ns },
    spec: { podSelector: { matchLabels: { role: "b" } }, policyTypes: ["Ingress"] },
  };
}

/** Allows the `-a` pods into the `-b` pods. */
export function allowClients(ns: string): NetworkPolicy {
  return {
    metadata: { name: "ct-allow-clients", namespace: ns },
    spec: {
      podSelector: { matchLabels: { role: "b" } },
      policyTypes: ["Ingress"],
      ingress: [{ from: [{ podSelector: { matchLabels: { role: "a" } } }] }],
    },
  };
}

/** The command a test pod runs to connect (exit 0 when connected). */
export function connectArgv(address: string, port: number, timeoutSeconds: number): string[] {
  const host = address.includes(":") ? `[${address}]` : address;
  return ["/agnhost", "connect", `${host}:${port}`, `--timeout=${timeoutSeconds}s`];
}
