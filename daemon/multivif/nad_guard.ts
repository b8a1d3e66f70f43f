/**
 * What a NetworkAttachmentDefinition may ask of the node. A NAD is written by a tenant (anyone who
 * may create one in a namespace) and its plugins run as root on every node that plugs it, so
 * Ferry checks each of its plugins before anything runs:
 *
 * - the plugin type, and its IPAM type, must be among `multiNetwork.allowedTypes` (`*` allows all);
 * - it must not name a device Ferry owns (the node bridge, the VXLAN device) as its bridge, master
 *   or device: a NAD bridge on Ferry's bridge would put addresses on it that Ferry never assigned;
 * - no address range it names (host-local ranges and subnet, whereabouts' ranges, static addresses,
 *   the runtime `ips`) may overlap Ferry's pod ranges (node podCIDRs, pools, the local subnets);
 * - host-local keeps its files under Ferry's state directory: a NAD naming another `dataDir` is
 *   refused, one naming none gets `<stateDir>/host-local` (host-local's own default,
 *   /var/lib/cni/networks, is shared with every other CNI on the node).
 *
 * Refusals are CNI code 7 naming the pod, the NAD and the reason; the failed ADD puts them on the
 * pod as an Event and in the daemon's log.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { NetConf } from "../../lib/cni/schemas.ts";
import { type Cidr, cidrsOverlap, parseCidr } from "../ipam/cidr.ts";
import { whereaboutsRangeCidrs } from "../ipam/nad_ipam.ts";

/** What the guard checks NADs against. */
export interface NadGuard {
  /** Plugin and IPAM types a NAD may use; `*` allows every type. */
  allowedTypes: string[];
  /** Devices Ferry owns on the node (its bridge, its VXLAN device). */
  devices: string[];
  /** Ferry's pod ranges now (CIDR text): node podCIDRs, pools, local subnets. */
  ranges(): string[];
  /** Ferry's state directory: host-local's files are kept below it. */
  stateDir: string;
}

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);

/** Fields of the reference plugins that name a node device. */
const DEVICE_FIELDS = ["bridge", "master", "device"] as const;

/** Every CIDR or address (as a CIDR) an IPAM config or runtime config names. */
function rangesOf(plugin: Record<string, unknown>): string[] {
  const out: string[] = [];
  const ipam = isObject(plugin.ipam) ? plugin.ipam : {};
  const add = (v: unknown) => {
    if (typeof v === "string" && v) {
      out.push(v.includes("/") ? v : `${v}/${v.includes(":") ? 128 : 32}`);
    }
  };
  add(ipam.subnet);
  if (ipam.type === "whereabouts") out.push(...whereaboutsRangeCidrs(ipam)); // every form
  else add(ipam.range);
  for (const set of Array.isArray(ipam.ranges) ? ipam.ranges : []) {
    for (const r of Array.isArray(set) ? set : []) if (isObject(r)) add(r.subnet);
  }
  for (const a of Array.isArray(ipam.addresses) ? ipam.addresses : []) {
    if (isObject(a)) add(a.address);
  }
  const rc = isObject(plugin.runtimeConfig) ? plugin.runtimeConfig : {};
  for (const ip of Array.isArray(rc.ips) ? rc.ips : []) add(ip);
  return out;
}

/** `path` with `.` and `..` resolved (absolute paths only); undefined for a relative one. */
function normalized(path: string): string | undefined {
  if (!path.startsWith("/")) return undefined;
  const parts: string[] = [];
  for (const p of path.split("/")) {
    if (p === "" || p === ".") continue;
    if (p === "..") parts.pop();
    else parts.push(p);
  }
  return "/" + parts.join("/");
}

/** Why `plugin` may not run, or undefined. */
function refusal(plugin: Record<string, unknown>, guard: NadGuard): string | undefined {
  const allowed = (t: string) => guard.allowedTypes.includes("*") || guard.allowedTypes.includes(t);
  const type = String(plugin.type);
  if (!allowed(type)) {
    return `plugin type ${type} is not allowed (multiNetwork.allowedTypes: ${
      guard.allowedTypes.join(", ") || "none"
    })`;
  }
  const ipam = isObject(plugin.ipam) ? plugin.ipam : undefined;
  if (ipam && typeof ipam.type === "string" && !allowed(ipam.type)) {
    return `IPAM type ${ipam.type} is not allowed (multiNetwork.allowedTypes: ${
      guard.allowedTypes.join(", ") || "none"
    })`;
  }
  for (const field of DEVICE_FIELDS) {
    const v = plugin[field];
    if (typeof v === "string" && guard.devices.includes(v)) {
      return `its ${field} ${v} is a device of Ferry's own network`;
    }
  }
  const ferry = guard.ranges().flatMap((t) => {
    try {
      return [{ text: t, cidr: parseCidr(t) }];
    } catch {
      return [];
    }
  });
  for (const text of rangesOf(plugin)) {
    let cidr: Cidr;
    try {
      cidr = parseCidr(text);
    } catch {
      continue; // the plugin refuses it itself
    }
    const hit = ferry.find((f) => cidrsOverlap(f.cidr, cidr));
    if (hit) return `its range ${text} overlaps Ferry's pod range ${hit.text}`;
  }
  if (ipam?.type === "host-local" && ipam.dataDir !== undefined) {
    const dir = typeof ipam.dataDir === "string" ? normalized(ipam.dataDir) : undefined;
    const root = normalized(guard.stateDir)!;
    if (!dir || !(dir === root || dir.startsWith(root + "/"))) {
      return `host-local's dataDir ${JSON.stringify(ipam.dataDir)} is outside Ferry's state ` +
        `directory ${root} (leave it out: host-local then keeps its files in ${root}/host-local)`;
    }
  }
  return undefined;
}

/**
 * Checks a NAD's plugins against `guard` and returns them ready to run (host-local's `dataDir`
 * set where the NAD named none).
 *
 * @throws {CniError} code 7 naming the pod, the NAD, the plugin and why.
 * @example
 * ```ts
 * const plugins = guardNadPlugins(nadPlugins(text, nad, selection, pod), guard, nad, pod);
 * ```
 */
export function guardNadPlugins(
  plugins: NetConf[],
  guard: NadGuard,
  nad: { namespace: string; name: string },
  pod: string,
): NetConf[] {
  return plugins.map((plugin, i) => {
    const p = plugin as unknown as Record<string, unknown>;
    const why = refusal(p, guard);
    if (why) {
      throw new CniError(
        CNI_ERROR.INVALID_CONFIG,
        `pod ${pod}: NetworkAttachmentDefinition ${nad.namespace}/${nad.name} refused: plugin ${i} ` +
          `(${p.type}): ${why}`,
      );
    }
    const ipam = isObject(p.ipam) ? p.ipam : undefined;
    if (ipam?.type === "host-local" && ipam.dataDir === undefined) {
      return {
        ...p,
        ipam: { ...ipam, dataDir: `${normalized(guard.stateDir)}/host-local` },
      } as unknown as NetConf;
    }
    return plugin;
  });
}
