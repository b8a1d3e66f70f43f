/**
 * What a NAD's macvlan may ask of its parent (`master`, the default route's device when it names
 * none). A tenant writes the NAD; the parent is a device of the node, often its uplink:
 *
 * - **No mode that gives the pod the parent's traffic on a link the node uses.** `passthru` hands
 *   the pod the parent's whole receive path (the node stops answering on its own address);
 *   `source` copies to the pod what chosen MACs send. A link the node uses is one that holds an
 *   address of the node (any but an IPv6 link-local one, which every link up has), a device of a
 *   default route, one of Ferry's own devices (its bridge, its VXLAN device), and, down the chain,
 *   every link one of those is built on (a VLAN's, macvlan's or ipvlan's parent, the VXLAN
 *   device's underlay) or enslaves (a used bridge's or bond's ports). An operator allows it on a
 *   device with `multiNetwork.passthruParents`.
 * - **No MAC that is someone else's.** A MAC the NAD or the pod picks (`mac`,
 *   `runtimeConfig.mac`, `args.cni.mac`, of the macvlan or of a plugin after it, such as
 *   `tuning`) must be unicast, locally administered (the `02` bit of its first byte) and unused
 *   as far as the node can know: not a MAC of the node's links, nor of another pod's interface
 *   (the attachment records), nor in the parent's neighbour table (the router's, say). Port
 *   security lets a pod send as its MAC, so a taken one moves the owner's traffic to the pod.
 *   An operator allows any unicast MAC on a device with `multiNetwork.anyMacParents`.
 *
 * @module
 */
import type { Attachment } from "../records/attachment_store.ts";
import type { NodeLink, NodeLinks } from "./node_links.ts";

/**
 * A MAC as Go's `net.ParseMAC` reads it (`:`- or `-`-separated pairs, or `.`-separated groups of
 * four; 6, 8 or 20 bytes), lower case with colons; undefined for anything else.
 */
export function normalisedMac(text: string): string | undefined {
  const pairs = /^[0-9a-f]{2}([:-])[0-9a-f]{2}(\1[0-9a-f]{2})*$/i.test(text)
    ? text.split(/[:-]/)
    : /^[0-9a-f]{4}(\.[0-9a-f]{4})*$/i.test(text)
    ? text.split(".").flatMap((g) => [g.slice(0, 2), g.slice(2)])
    : undefined;
  if (!pairs || ![6, 8, 20].includes(pairs.length)) return undefined;
  return pairs.join(":").toLowerCase();
}

/** The devices an operator allows more on (names or altnames of the node's links). */
export interface ParentAllowances {
  /** `multiNetwork.passthruParents`: macvlan `passthru` and `source` allowed though the node uses them. */
  passthru: string[];
  /** `multiNetwork.anyMacParents`: any unicast MAC allowed. */
  anyMac: string[];
}

/** What the parent checks read. */
export interface ParentGuard {
  /** The node's links, default routes and neighbour tables. */
  links: NodeLinks;
  /** Ferry's own devices by configured name (its bridge, its VXLAN device). */
  ferryDevices: string[];
  /** What the operator allows per device. */
  allow: ParentAllowances;
  /** The interfaces of the pods on this node now (the attachment records), with their pods. */
  podMacs(): { mac: string; pod?: string }[];
}

/** Macvlan modes that give the pod the parent's traffic. */
export const TAKING_MODES: readonly string[] = ["passthru", "source"];

/** Keys (folded) by which a plugin is given a MAC for the pod's interface, as a reader says them. */
const MAC_KEYS: [path: string[], shown: string][] = [
  [["mac"], "mac"],
  [["runtimeconfig", "mac"], "runtimeConfig.mac"],
  [["args", "cni", "mac"], "args.cni.mac"],
];

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);

/**
 * The links the node uses (see the module doc), each with why.
 *
 * @example
 * ```ts
 * usedLinks([{ name: "eth0", altnames: [], macs: [], addresses: ["10.0.0.5"] }], [], []);
 * // Map { "eth0" => "holds the node's address 10.0.0.5" }
 * ```
 */
export function usedLinks(
  links: NodeLink[],
  defaultDevices: string[],
  ferryDevices: string[],
): Map<string, string> {
  const find = (name: string) => links.find((l) => l.name === name || l.altnames.includes(name));
  const used = new Map<string, string>();
  const queue: string[] = [];
  const mark = (name: string | undefined, why: string) => {
    const link = name === undefined ? undefined : find(name);
    if (!link || used.has(link.name)) return;
    used.set(link.name, why);
    queue.push(link.name);
  };
  for (const l of links) {
    if (l.addresses.length) mark(l.name, `holds the node's address ${l.addresses[0]}`);
  }
  for (const dev of defaultDevices) mark(dev, "carries the node's default route");
  for (const dev of ferryDevices) mark(dev, "is a device of Ferry's own network");
  while (queue.length) {
    const name = queue.shift()!;
    const link = find(name)!;
    const why = used.get(name)!;
    mark(link.lower, `is the lower device of ${name}, which ${why}`);
    for (const port of links.filter((l) => l.master === name)) {
      mark(port.name, `is a port of ${name}, which ${why}`);
    }
  }
  return used;
}

/** The MACs of the pods' interfaces in `records` (their sandbox side), with their pods. */
export function podMacsOf(records: Attachment[]): { mac: string; pod?: string }[] {
  return records.flatMap((r) =>
    (r.result.interfaces ?? [])
      .filter((i) => i.sandbox && typeof i.mac === "string")
      .map((i) => ({
        mac: i.mac!.toLowerCase(),
        ...(r.pod ? { pod: `${r.pod.namespace}/${r.pod.name}` } : {}),
      }))
  );
}

/** The value at `path` of `plugin` (keys folded). */
function at(plugin: Record<string, unknown>, path: string[]): unknown {
  let v: unknown = plugin;
  for (const k of path) v = isObject(v) ? v[k] : undefined;
  return v;
}

/** What the node knows of one parent, read once per NAD. */
interface ParentView {
  /** Its names (name and altnames), or the name given when no link has it. */
  names: string[];
  /** Why the node uses it, or undefined. */
  used?: string;
  /** The MACs in its neighbour table. */
  neighbours: string[];
}

/** Why `mac` (from `key` of plugin) may not be the pod's on `parent`, or undefined. */
function macRefusal(
  key: string,
  value: unknown,
  parent: string,
  view: ParentView,
  links: NodeLink[],
  pods: { mac: string; pod?: string }[],
  allow: ParentAllowances,
): string | undefined {
  const mac = typeof value === "string" ? normalisedMac(value) : undefined;
  if (!mac || mac.length !== 17) return `its ${key} ${JSON.stringify(value)} is not a MAC address`;
  const first = parseInt(mac.slice(0, 2), 16);
  if (first & 1) return `its ${key} ${value} is a multicast MAC`;
  if (view.names.some((n) => allow.anyMac.includes(n))) return undefined;
  const more = `(an operator allows any unicast MAC on ${parent} with multiNetwork.anyMacParents)`;
  if (!(first & 2)) {
    return `its ${key} ${value} is not locally administered (set the 02 bit of its first byte: ` +
      `a universally administered MAC is a vendor's device, perhaps on ${parent}'s segment) ${more}`;
  }
  const link = links.find((l) => l.macs.includes(mac));
  if (link) return `its ${key} ${value} is the MAC of the node's link ${link.name} ${more}`;
  if (view.neighbours.includes(mac)) {
    return `its ${key} ${value} is in ${parent}'s neighbour table: a host on its segment has it ${more}`;
  }
  const pod = pods.find((p) => p.mac === mac);
  if (pod) {
    return `its ${key} ${value} is the MAC of an interface of ${
      pod.pod ? `pod ${pod.pod}` : "another pod"
    } ${more}`;
  }
  return undefined;
}

/**
 * Why a NAD's chain (plugins with keys folded, `lib/cni/json_keys.ts`) may not ask what it asks of
 * a macvlan's parent, with the index of the plugin at fault, or undefined. `pod`
 * (`namespace/name`) is the pod being plugged: its own interfaces are not another pod's.
 *
 * @throws whatever reading the node's links throws.
 * @example
 * ```ts
 * await parentRefusal([{ type: "macvlan", master: "eth0", mode: "passthru" }], guard, "ns/p");
 * // { index: 0, why: "its mode passthru gives the pod the traffic of eth0, which the node uses: …" }
 * ```
 */
export async function parentRefusal(
  plugins: Record<string, unknown>[],
  guard: ParentGuard,
  pod: string,
): Promise<{ index: number; why: string } | undefined> {
  const first = plugins.findIndex((p) => p.type === "macvlan");
  if (first < 0) return undefined;
  const links = await guard.links.links();
  const defaults = await guard.links.defaultRouteDevices();
  const used = usedLinks(links, defaults.map((d) => d.dev), guard.ferryDevices);
  const pods = guard.podMacs().filter((p) => p.pod !== pod);
  for (let i = first; i < plugins.length; i++) {
    const p = plugins[i];
    if (p.type !== "macvlan") continue;
    const parent = typeof p.master === "string" && p.master !== ""
      ? p.master
      : defaults.find((d) => d.family === 4)?.dev;
    if (parent === undefined) continue; // no parent: the plugin refuses itself
    const link = links.find((l) => l.name === parent || l.altnames.includes(parent));
    const view: ParentView = {
      names: link ? [link.name, ...link.altnames] : [parent],
      used: link && used.get(link.name),
      neighbours: link ? await guard.links.neighbourMacs(link.name) : [],
    };
    const mode = typeof p.mode === "string" ? p.mode.toLowerCase() : undefined;
    if (
      mode && TAKING_MODES.includes(mode) && view.used &&
      !view.names.some((n) => guard.allow.passthru.includes(n))
    ) {
      return {
        index: i,
        why: `its mode ${p.mode} gives the pod the traffic of ${parent}, which the node uses: ` +
          `${parent} ${view.used} (an operator allows it on ${parent} with ` +
          "multiNetwork.passthruParents)",
      };
    }
    for (let j = i; j < plugins.length; j++) {
      if (j > i && plugins[j].type === "macvlan") break; // the next macvlan has its own parent
      for (const [path, key] of MAC_KEYS) {
        const value = at(plugins[j], path);
        if (value === undefined || value === "") continue;
        const why = macRefusal(key, value, parent, view, links, pods, guard.allow);
        if (why) return { index: j, why };
      }
    }
  }
  return undefined;
}
