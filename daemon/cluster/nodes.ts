/**
 * The cluster's nodes as Ferry needs them: name, addresses and pod ranges, kept from the one watch
 * of Node objects (stripped, so a large cluster costs little memory). Listeners are told of every
 * change; the route and masquerade controllers react to them. Pure: the watch feeds it.
 *
 * @module
 */
import type { Node } from "kubernetes-types/core/v1.d.ts";

/** One node, stripped to what routing needs. */
export interface ClusterNode {
  /** `metadata.name`. */
  name: string;
  /** `status.addresses` of type InternalIP (one per family at most, in the API's order). */
  internalIPs: string[];
  /** `spec.podCIDRs` (or the single `spec.podCIDR` of older objects). */
  podCIDRs: string[];
  /** The VXLAN endpoint the node published (annotation {@link VTEP_ANNOTATION}), if any. */
  vtep?: Vtep;
}

/** A node's VXLAN endpoint: the MAC of its VXLAN device and the underlay address it sends from. */
export interface Vtep {
  /** The device's MAC. */
  mac: string;
  /** The underlay address. */
  ip: string;
}

/** The Node annotation where each node publishes its {@link Vtep} as JSON. */
export const VTEP_ANNOTATION = "ferry.dev/vtep";

function parseVtep(text: string | undefined): Vtep | undefined {
  if (!text) return undefined;
  try {
    const v = JSON.parse(text);
    const mac = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i;
    if (typeof v?.mac === "string" && mac.test(v.mac) && typeof v?.ip === "string") {
      return { mac: v.mac, ip: v.ip };
    }
  } catch { /* not JSON */ }
  return undefined;
}

/**
 * Strips a Node object to a {@link ClusterNode}.
 *
 * @example
 * ```ts
 * stripNode({ metadata: { name: "n1" }, spec: { podCIDRs: ["10.244.1.0/24"] },
 *   status: { addresses: [{ type: "InternalIP", address: "192.0.2.11" }] } });
 * // { name: "n1", internalIPs: ["192.0.2.11"], podCIDRs: ["10.244.1.0/24"] }
 * ```
 */
export function stripNode(node: Node): ClusterNode {
  const podCIDRs = node.spec?.podCIDRs?.length
    ? [...node.spec.podCIDRs]
    : node.spec?.podCIDR
    ? [node.spec.podCIDR]
    : [];
  const internalIPs = (node.status?.addresses ?? [])
    .filter((a) => a.type === "InternalIP")
    .map((a) => a.address);
  const vtep = parseVtep(node.metadata?.annotations?.[VTEP_ANNOTATION]);
  return { name: node.metadata?.name ?? "", internalIPs, podCIDRs, ...(vtep ? { vtep } : {}) };
}

/**
 * What the node watch keeps of a Node object (its informer's transform): the fields
 * {@link stripNode} reads and the metadata the watch itself needs. A Node's status carries its
 * conditions, its images (often dozens, each with every tag and digest) and its capacity; the
 * daemon of every node holds every node, so the whole object would cost memory growing with the
 * cluster for nothing.
 *
 * @example
 * ```ts
 * slimNode({ metadata: { name: "n1", resourceVersion: "7", labels: { zone: "a" } },
 *   spec: { podCIDRs: ["10.244.1.0/24"] }, status: { images: [], addresses: [] } });
 * // { metadata: { name: "n1", resourceVersion: "7" }, spec: { podCIDRs: ["10.244.1.0/24"] },
 * //   status: { addresses: [] } } (the other fields it keeps undefined)
 * ```
 */
export function slimNode(node: Node): Node {
  const m = node.metadata ?? {};
  const vtep = m.annotations?.[VTEP_ANNOTATION];
  return {
    metadata: {
      name: m.name,
      uid: m.uid,
      resourceVersion: m.resourceVersion,
      annotations: vtep === undefined ? undefined : { [VTEP_ANNOTATION]: vtep },
    },
    spec: { podCIDR: node.spec?.podCIDR, podCIDRs: node.spec?.podCIDRs },
    status: { addresses: node.status?.addresses },
  };
}

/**
 * The nodes known, by name.
 *
 * @example
 * ```ts
 * const nodes = new NodeMap();
 * nodes.onChange(() => reconcile());
 * nodes.upsert(nodeObject);
 * ```
 */
export class NodeMap {
  readonly #nodes = new Map<string, ClusterNode>();
  readonly #listeners = new Set<() => void>();

  /** Records a node seen by the watch; listeners hear of it when something they use changed. */
  upsert(raw: Node): void {
    const node = stripNode(raw);
    const before = this.#nodes.get(node.name);
    this.#nodes.set(node.name, node);
    if (JSON.stringify(before) !== JSON.stringify(node)) this.#changed();
  }

  /** Forgets a node the watch saw deleted. */
  remove(raw: Node): void {
    if (this.#nodes.delete(raw.metadata?.name ?? "")) this.#changed();
  }

  /** The node called `name`, if known. */
  get(name: string): ClusterNode | undefined {
    return this.#nodes.get(name);
  }

  /** Every node known. */
  list(): ClusterNode[] {
    return [...this.#nodes.values()];
  }

  /** How many nodes are known. */
  get size(): number {
    return this.#nodes.size;
  }

  /** Calls `fn` after every change; returns the function that stops it. */
  onChange(fn: () => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  #changed(): void {
    for (const fn of this.#listeners) fn();
  }
}
