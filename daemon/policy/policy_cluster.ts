/**
 * The cluster as a node's NetworkPolicy sees it: every pod as the watch has it (stripped to what
 * policies read, {@link policyPodOf}), the namespaces' labels, and the addresses this node's ADDs
 * just gave, before the pods' status carries them. From them: the view the compiler reads, a
 * pod of this node as its ADD knows it, and what a logged denied packet was.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { Namespace, Pod } from "kubernetes-types/core/v1.d.ts";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import { type PolicyPod, policySelects, policyTypes, type PolicyView } from "./compile.ts";
import type { DeniedConnection, DeniedPacket } from "./nflog.ts";
import type { NetworkedPod } from "./multi_policy.ts";
import type { Labels } from "./selector.ts";
import { NETWORK_STATUS_ANNOTATION } from "../multivif/selections.ts";
import { networkClaims, objectKey, podAddresses, policyPodOf } from "./policy_objects.ts";

/** What the cluster's record needs. */
export interface PolicyClusterDeps {
  /** This node's name (the pods its ADDs plug are on it). */
  nodeName: string;
  /** Where it says which pods' claims it left out. */
  logger: Logger;
}

/**
 * The pods and namespaces of the cluster, and this node's ADDs' addresses.
 *
 * @example
 * ```ts
 * const cluster = new PolicyCluster({ nodeName, logger });
 * cluster.podUpserted(pod);
 * compilePolicies(cluster.view(policies), local, ipInBlock);
 * ```
 */
export class PolicyCluster {
  readonly #d: PolicyClusterDeps;
  readonly #namespaces = new Map<string, Labels>();
  readonly #pods = new Map<string, NetworkedPod & { node?: string }>();
  /** Addresses this node's ADDs gave, before the pod's status carries them. */
  readonly #plugged = new Map<string, { labels: Labels; ips: string[] }>();
  /** What each pod's `network-status` claimed in vain, already logged. */
  readonly #dropped = new Map<string, Set<string>>();
  #droppedAddresses = 0;

  /** Creates the record, empty. */
  constructor(deps: PolicyClusterDeps) {
    this.#d = deps;
  }

  /** A Namespace appeared or changed. */
  namespaceUpserted(n: Namespace): void {
    this.#namespaces.set(n.metadata?.name ?? "", n.metadata?.labels ?? {});
  }

  /** A Namespace is gone. */
  namespaceRemoved(n: Namespace): void {
    this.#namespaces.delete(n.metadata?.name ?? "");
  }

  /** A pod (of any node) appeared or changed. */
  podUpserted(p: Pod): void {
    const pod = policyPodOf(p);
    if (
      p.metadata?.annotations?.[NETWORK_STATUS_ANNOTATION] ||
      pod.ips.length !== (p.status?.podIPs?.length ?? 0)
    ) this.#noteDropped(p);
    this.#pods.set(objectKey(pod.namespace, pod.name), pod);
  }

  /** A pod is gone (and with it what its ADD gave). */
  podRemoved(p: Pod): void {
    const k = objectKey(p.metadata?.namespace, p.metadata?.name);
    this.#pods.delete(k);
    this.#plugged.delete(k);
    this.#dropped.delete(k);
  }

  /** Logs (once per pod and value) and counts what a pod's `network-status` claimed in vain. */
  #noteDropped(p: Pod): void {
    const dropped = [
      ...networkClaims(p).dropped,
      ...podAddresses(p).dropped.map((value) => ({ value, reason: "a podIP that is no address" })),
    ];
    if (!dropped.length) return;
    const k = objectKey(p.metadata?.namespace, p.metadata?.name);
    const known = this.#dropped.get(k) ?? new Set<string>();
    this.#dropped.set(k, known);
    for (const d of dropped) {
      if (known.has(d.value)) continue;
      known.add(d.value);
      this.#droppedAddresses++;
      this.#d.logger.warn(
        "network policy: {pod}'s network-status entry {value} is not a peer: {reason}",
        { pod: k, value: d.value, reason: d.reason },
      );
    }
  }

  /** `network-status` entries and addresses left out (not an address, another namespace's network). */
  get droppedAddresses(): number {
    return this.#droppedAddresses;
  }

  /** An ADD of this node gave `ips` to the pod `key` (`namespace/name`), labelled `labels`. */
  plug(key: string, labels: Labels, ips: string[]): void {
    this.#plugged.set(key, { labels, ips });
  }

  /** A DEL of this node took the pod's addresses away; false when no ADD of this node gave any. */
  unplug(key: string): boolean {
    return this.#plugged.delete(key);
  }

  /** Every pod of the cluster as the watch has it, with its addresses per network. */
  clusterPods(): NetworkedPod[] {
    return [...this.#pods.values()];
  }

  /** A pod of the cluster as the watch has it. */
  pod(namespace: string, name: string): NetworkedPod | undefined {
    return this.#pods.get(objectKey(namespace, name));
  }

  /** Namespace labels, by name. */
  namespaceLabels(): Map<string, Labels> {
    return this.#namespaces;
  }

  /**
   * What a logged denied packet was: the pod of its drop rule, the pod (or address) at the other
   * end, and the policies (of `policies`, read only when the pod is known) that isolate the pod
   * that way.
   */
  describe(packet: DeniedPacket, policies: () => NetworkPolicy[]): DeniedConnection | undefined {
    const direction = packet.prefix.startsWith("in ") ? "ingress" : "egress";
    const pod = packet.prefix.slice(3);
    const self = this.#pods.get(pod) ?? this.localPod(pod);
    if (!self) return undefined;
    const peerIp = direction === "ingress" ? packet.src : packet.dst;
    const peer = [...this.#pods.values()].find((p) => p.ips.includes(peerIp));
    return {
      pod,
      direction,
      peer: peer ? `${peer.namespace}/${peer.name}` : peerIp,
      policies: policies()
        .filter((p) => policySelects(p, self) && policyTypes(p)[direction])
        .map((p) => `${p.metadata?.namespace ?? "default"}/${p.metadata?.name}`),
    };
  }

  /** The cluster as the compiler sees it under `policies`, this node's ADDs' addresses included. */
  view(policies: NetworkPolicy[]): PolicyView {
    const pods = new Map(this.#pods);
    // An address an ADD just gave is that pod's, whatever an older pod's status still says (its
    // sandbox gone, the address handed out again).
    const fresh = new Set([...this.#plugged.values()].flatMap((p) => p.ips));
    for (const [k, pod] of pods) {
      if (!this.#plugged.has(k) && pod.ips.some((ip) => fresh.has(ip))) {
        pods.set(k, { ...pod, ips: pod.ips.filter((ip) => !fresh.has(ip)) });
      }
    }
    for (const k of this.#plugged.keys()) pods.set(k, this.localPod(k)!);
    return {
      policies,
      namespaces: this.#namespaces,
      pods: [...pods.values()],
    };
  }

  /**
   * The pod `key` (`namespace/name`) as the compiler takes it: as the watch has it, with the
   * addresses this node's ADD gave it (and, until the watch has it, the ADD's labels).
   */
  localPod(key: string): (PolicyPod & { node?: string }) | undefined {
    const known = this.#pods.get(key);
    const plugged = this.#plugged.get(key);
    if (!plugged) return known;
    const [namespace, name] = [key.slice(0, key.indexOf("/")), key.slice(key.indexOf("/") + 1)];
    return {
      namespace,
      name,
      ports: known?.ports ?? [],
      hostNetwork: false,
      done: false,
      ...known,
      // The watch's labels once it has the pod: they follow relabelling, the ADD's do not.
      labels: known?.labels ?? plugged.labels,
      ips: [...new Set([...(known?.ips ?? []), ...plugged.ips])],
      node: this.#d.nodeName,
    };
  }
}
