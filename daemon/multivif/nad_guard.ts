/**
 * What a NetworkAttachmentDefinition may ask of the node. A NAD is written by a tenant (anyone who
 * may create one in a namespace) and its plugins run as root on every node that plugs it, so
 * Ferry checks each of its plugins before anything runs:
 *
 * - the plugin type, and its IPAM type, must be among `multiNetwork.allowedTypes` (`*` allows all);
 * - it must not name a device Ferry protects (the node bridge, the VXLAN device, the bridge's
 *   ports: the pods' host veths) by any key a plugin finds a device by: `bridge`, `master`,
 *   `device` (names and altnames), `hwaddr` (MACs), `kernelpath`, `pciBusID` and
 *   `runtimeConfig.deviceID` (resolved through sysfs, `node_devices.ts`): a NAD bridge on Ferry's
 *   bridge would put addresses on it that Ferry never assigned;
 * - no address or range it names (every key `nad_addresses.ts` lists, normalised: IPv4-mapped
 *   as IPv4) may overlap Ferry's pod ranges (node podCIDRs, pools, the local subnets), nor, but
 *   for Ferry's own `ferry` IPAM type, an IPPool for networks; each must be an address or range;
 * - a macvlan gets no `passthru` or `source` mode on a link the node uses, and no MAC that is
 *   someone else's (`parent_guard.ts`, with what an operator may allow per parent device);
 * - host-local keeps its files under Ferry's state directory: a NAD naming another `dataDir` is
 *   refused, one naming none gets `<stateDir>/host-local` (host-local's own default,
 *   /var/lib/cni/networks, is shared with every other CNI on the node).
 *
 * Keys are read as the Go plugins read them, in any case (`lib/cni/json_keys.ts`), and the native
 * drivers act on the same keys (`native_keys.ts`): a NAD's keys Ferry reads are respelled as it
 * reads them before the guard sees them. Refusals are CNI code 7 naming the pod, the NAD and the
 * reason; the failed ADD puts them on the pod as an Event and in the daemon's log.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { NetConf } from "../../lib/cni/schemas.ts";
import { foldKeys } from "../../lib/cni/json_keys.ts";
import { addressesOf, type IpSpan, normalisedSpans, spansOverlap } from "./nad_addresses.ts";
import type { NodeDevices, ProtectedDevice } from "./node_devices.ts";
import { normalisedMac, type ParentGuard, parentRefusal } from "./parent_guard.ts";

/** What the guard checks NADs against. */
export interface NadGuard {
  /** Plugin and IPAM types a NAD may use; `*` allows every type. */
  allowedTypes: string[];
  /** Devices Ferry owns on the node by configured name (its bridge, its VXLAN device). */
  devices: string[];
  /** The node's devices now: Ferry's with their ports, altnames and MACs; sysfs lookups. */
  node: NodeDevices;
  /** Ferry's pod ranges now (CIDR text): node podCIDRs, pools, local subnets. */
  ranges(): string[];
  /** Ferry's state directory: host-local's files are kept below it. */
  stateDir: string;
  /**
   * The IPPools for networks (`spec.use: networks`) now, name and CIDRs: only a NAD of Ferry's
   * `ferry` IPAM type naming the pool hands out their addresses.
   */
  networkPools?(): Promise<{ name: string; cidrs: string[] }[]>;
  /**
   * What a macvlan may ask of its parent: no `passthru` or `source` on a link the node uses, no
   * MAC that is someone else's (`parent_guard.ts`); unchecked when absent.
   */
  parents?: ParentGuard;
}

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);

/** Keys (folded) of the reference plugins that name a node device by name or altname. */
const NAME_FIELDS = ["bridge", "master", "device"] as const;

/** The bridge the `bridge` plugin (and Ferry's native one) joins when its config names none. */
const DEFAULT_BRIDGE = "cni0";

/** Where `host-device` looks up a PCI address and an auxiliary device (`runtimeConfig.deviceID`). */
const SYS_BUS_PCI = "/sys/bus/pci/devices";
const SYS_BUS_AUX = "/sys/bus/auxiliary/devices";

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

/**
 * Whether `name` is a name the kernel would take whole: 1..127 bytes (an altname's limit), no NUL
 * (the kernel reads a name up to its first NUL, so `ferry0\0x` IS `ferry0`), no `/`, `:` or
 * whitespace (`dev_valid_name`), not `.` or `..`.
 */
export function validDeviceName(name: string): boolean {
  return name.length > 0 && new TextEncoder().encode(name).length <= 127 &&
    !name.includes("\u0000") && !/[\s/:]/.test(name) && name !== "." && name !== "..";
}

/** The protected device `name` is (by name or altname), if any. */
function protectedBy(name: string, own: ProtectedDevice[]): string | undefined {
  const d = own.find((d) => d.name === name || d.altnames.includes(name));
  if (!d) return undefined;
  return d.name === name
    ? "is a device of Ferry's own network"
    : `is an altname of ${d.name}, a device of Ferry's own network`;
}

/** Why the device keys of `plugin` (keys folded) may not be used, or undefined. */
async function deviceRefusal(
  plugin: Record<string, unknown>,
  guard: NadGuard,
  protectedDevices: () => Promise<ProtectedDevice[]>,
): Promise<string | undefined> {
  const rc = isObject(plugin.runtimeconfig) ? plugin.runtimeconfig : {};
  const named = plugin.type === "bridge" ||
    [...NAME_FIELDS, "hwaddr", "kernelpath", "pcibusid"].some((k) => plugin[k] !== undefined);
  if (!named && rc.deviceid === undefined) return undefined; // no device: no need to look
  const own: ProtectedDevice[] = [
    ...guard.devices.map((name) => ({ name, altnames: [] })),
    ...await protectedDevices(),
  ];
  for (const field of NAME_FIELDS) {
    const v = field === "bridge" && plugin.type === "bridge"
      ? plugin.bridge ?? DEFAULT_BRIDGE
      : plugin[field];
    if (v === undefined) continue;
    if (typeof v !== "string" || !validDeviceName(v)) {
      return `its ${field} ${JSON.stringify(v)} is not a device name`;
    }
    const why = protectedBy(v, own);
    if (why) return `its ${field} ${v} ${why}`;
  }
  if (plugin.hwaddr !== undefined) {
    const mac = typeof plugin.hwaddr === "string" ? normalisedMac(plugin.hwaddr) : undefined;
    if (!mac) return `its hwaddr ${JSON.stringify(plugin.hwaddr)} is not a MAC address`;
    const d = own.find((d) => d.mac === mac);
    if (d) {
      return `its hwaddr ${plugin.hwaddr} is the MAC of ${d.name}, a device of Ferry's own network`;
    }
  }
  const paths: [string, unknown, string[]][] = [
    ["kernelpath", plugin.kernelpath, [""]],
    ["pciBusID", plugin.pcibusid, [SYS_BUS_PCI]],
    ["runtimeConfig.deviceID", rc.deviceid, [SYS_BUS_PCI, SYS_BUS_AUX]],
  ];
  for (const [key, v, bases] of paths) {
    if (v === undefined || v === "") continue;
    if (typeof v !== "string" || v.includes("\u0000")) {
      return `its ${key} ${JSON.stringify(v)} is not a path`;
    }
    for (const base of bases) {
      const dir = normalized(base ? `${base}/${v}` : v);
      if (!dir) continue; // a relative kernelpath: host-device refuses it itself
      for (const name of await guard.node.netdevsUnder(dir)) {
        const why = protectedBy(name, own);
        if (why) return `its ${key} ${v} is the device ${name}, which ${why}`;
      }
    }
  }
  return undefined;
}

/** Why the addresses and ranges of `plugin` (keys folded) may not be used, or undefined. */
function rangeRefusal(plugin: Record<string, unknown>, guard: NadGuard): string | undefined {
  const { spans, invalid } = addressesOf(plugin);
  if (invalid.length) {
    const [{ key, value }] = invalid;
    return `its ${key} ${JSON.stringify(value)} is not an address or range`;
  }
  const ferry = ferrySpans(() => guard.ranges());
  for (const s of spans) {
    if (!s.checked) continue;
    const hit = ferry.find((f) => spansOverlap(f.span, s.span));
    if (hit) return `its ${s.key} ${s.text} overlaps Ferry's pod range ${hit.text}`;
  }
  return undefined;
}

/**
 * Why the addresses and ranges of `plugin` (keys folded) may not be used beside the pools for
 * networks, or undefined: a pool is an address space of its own, handed out by the NADs of the
 * `ferry` IPAM type that name it (which check their own addresses, `nad_native_ipam.ts`); any
 * other IPAM (host-local, static, a delegated whereabouts, a pod's `ips`) naming its addresses
 * would hand out what the pool gives its pods.
 */
async function poolRefusal(
  plugin: Record<string, unknown>,
  guard: NadGuard,
): Promise<string | undefined> {
  const ipam = isObject(plugin.ipam) ? plugin.ipam : undefined;
  if (!guard.networkPools || ipam?.type === "ferry") return undefined;
  const spans = addressesOf(plugin).spans.filter((s) => s.checked);
  if (!spans.length) return undefined;
  const pools = (await guard.networkPools()).flatMap((p) =>
    p.cidrs.flatMap((text) => {
      try {
        return normalisedSpans(text).map((span) => ({ name: p.name, text, span }));
      } catch {
        return [];
      }
    })
  );
  for (const s of spans) {
    const hit = pools.find((p) => spansOverlap(p.span, s.span));
    if (hit) {
      return `its ${s.key} ${s.text} overlaps IPPool ${hit.name} (${hit.text}), a pool for ` +
        `networks: only a NAD naming it ("ipam": {"type": "ferry", "pool": "${hit.name}"}) ` +
        "hands out its addresses";
    }
  }
  return undefined;
}

/**
 * Why the result of a NAD's plugins may not stand, or undefined: an address, gateway or route's
 * gateway in Ferry's pod ranges. The guard reads what a config names before ADD; what an IPAM
 * decides only at ADD (`dhcp`, a delegated IPAM plugin Ferry does not know) is checked here, after
 * it, and the attachment is undone when it overlaps. Results of every spec version (`ips` from
 * 0.3.0 on, `ip4`/`ip6` before).
 *
 * @example
 * ```ts
 * resultRefusal({ ips: [{ address: "10.244.1.7/24" }] }, () => ["10.244.1.0/24"]);
 * // "its result's ips[0].address 10.244.1.7/24 overlaps Ferry's pod range 10.244.1.0/24"
 * ```
 */
export function resultRefusal(result: unknown, ranges: () => string[]): string | undefined {
  if (!isObject(result)) return undefined;
  const found: { key: string; value: unknown }[] = [];
  const add = (key: string, value: unknown) => {
    if (value !== undefined && value !== null) found.push({ key, value });
  };
  const ipsOf = (key: string, list: unknown) => {
    if (!Array.isArray(list)) return;
    list.forEach((ip, i) => {
      if (!isObject(ip)) return;
      add(`${key}[${i}].address`, ip.address);
      add(`${key}[${i}].gateway`, ip.gateway);
    });
  };
  const routesOf = (key: string, list: unknown) => {
    if (!Array.isArray(list)) return;
    list.forEach((r, i) => isObject(r) && add(`${key}[${i}].gw`, r.gw));
  };
  ipsOf("ips", result.ips);
  routesOf("routes", result.routes);
  for (const fam of ["ip4", "ip6"]) {
    const legacy = result[fam];
    if (!isObject(legacy)) continue;
    add(`${fam}.ip`, legacy.ip);
    add(`${fam}.gateway`, legacy.gateway);
    routesOf(`${fam}.routes`, legacy.routes);
  }
  if (!found.length) return undefined;
  const ferry = ferrySpans(ranges);
  for (const { key, value } of found) {
    let spans: IpSpan[];
    try {
      spans = normalisedSpans(String(value));
    } catch {
      return `its result's ${key} ${JSON.stringify(value)} is not an address`;
    }
    for (const span of spans) {
      const hit = ferry.find((f) => spansOverlap(f.span, span));
      if (hit) return `its result's ${key} ${value} overlaps Ferry's pod range ${hit.text}`;
    }
  }
  return undefined;
}

/** Ferry's pod ranges as spans (a range that does not parse is left out). */
function ferrySpans(ranges: () => string[]): { text: string; span: IpSpan }[] {
  return ranges().flatMap((text) => {
    try {
      return normalisedSpans(text).map((span): { text: string; span: IpSpan } => ({ text, span }));
    } catch {
      return [];
    }
  });
}

/** Why `plugin` (as given, and `folded`: its keys as a Go plugin reads them) may not run. */
async function refusal(
  plugin: Record<string, unknown>,
  folded: Record<string, unknown>,
  guard: NadGuard,
  protectedDevices: () => Promise<ProtectedDevice[]>,
): Promise<string | undefined> {
  const allowed = (t: string) => guard.allowedTypes.includes("*") || guard.allowedTypes.includes(t);
  const type = String(plugin.type);
  if (!allowed(type)) {
    return `plugin type ${type} is not allowed (multiNetwork.allowedTypes: ${
      guard.allowedTypes.join(", ") || "none"
    })`;
  }
  const ipam = isObject(folded.ipam) ? folded.ipam : undefined;
  if (ipam && ipam.type !== undefined && (typeof ipam.type !== "string" || !allowed(ipam.type))) {
    return `IPAM type ${ipam.type} is not allowed (multiNetwork.allowedTypes: ${
      guard.allowedTypes.join(", ") || "none"
    })`;
  }
  const why = await deviceRefusal(folded, guard, protectedDevices) ?? rangeRefusal(folded, guard) ??
    await poolRefusal(folded, guard);
  if (why) return why;
  if (ipam?.type === "host-local" && ipam.datadir !== undefined) {
    const dir = typeof ipam.datadir === "string" ? normalized(ipam.datadir) : undefined;
    const root = normalized(guard.stateDir)!;
    if (!dir || !(dir === root || dir.startsWith(root + "/"))) {
      return `host-local's dataDir ${JSON.stringify(ipam.datadir)} is outside Ferry's state ` +
        `directory ${root} (leave it out: host-local then keeps its files in ${root}/host-local)`;
    }
  }
  return undefined;
}

/**
 * Checks a NAD's plugins against `guard` and returns them ready to run (host-local's `dataDir`
 * set where the NAD named none). Keys are read as a Go plugin reads them, in any case
 * (`lib/cni/json_keys.ts`); a plugin with two keys one Go field would read is refused.
 *
 * @throws {CniError} code 7 naming the pod, the NAD, the plugin and why; code 5 when the node's
 * devices cannot be read.
 * @example
 * ```ts
 * const plugins = await guardNadPlugins(nadPlugins(text, nad, selection, pod), guard, nad, pod);
 * ```
 */
export async function guardNadPlugins(
  plugins: NetConf[],
  guard: NadGuard,
  nad: { namespace: string; name: string },
  pod: string,
): Promise<NetConf[]> {
  const out: NetConf[] = [];
  const foldedAll: Record<string, unknown>[] = [];
  // The node's devices are read once per NAD, and only when a plugin names a device.
  let devices: Promise<ProtectedDevice[]> | undefined;
  const protectedDevices = () =>
    devices ??= guard.node.protectedDevices().catch((e) => {
      throw new CniError(
        CNI_ERROR.IO_FAILURE,
        `pod ${pod}: cannot read the node's devices to check NetworkAttachmentDefinition ` +
          `${nad.namespace}/${nad.name}`,
        e instanceof Error ? e.message : String(e),
      );
    });
  for (const [i, plugin] of plugins.entries()) {
    const p = plugin as unknown as Record<string, unknown>;
    const { value, clash } = foldKeys(p);
    const folded = value as Record<string, unknown>;
    foldedAll.push(folded);
    const why = clash
      ? `its keys ${JSON.stringify(clash.keys[0])} and ${JSON.stringify(clash.keys[1])} ` +
        `(${clash.at}) are one key to a Go plugin`
      : await refusal(p, folded, guard, protectedDevices);
    if (why) {
      throw new CniError(
        CNI_ERROR.INVALID_CONFIG,
        `pod ${pod}: NetworkAttachmentDefinition ${nad.namespace}/${nad.name} refused: plugin ${i} ` +
          `(${p.type}): ${why}`,
      );
    }
    const ipam = isObject(p.ipam) ? p.ipam : undefined;
    const fipam = isObject(folded.ipam) ? folded.ipam : undefined;
    out.push(
      fipam?.type === "host-local" && fipam.datadir === undefined
        ? {
          ...p,
          ipam: { ...ipam, dataDir: `${normalized(guard.stateDir)}/host-local` },
        } as unknown as NetConf
        : plugin,
    );
  }
  const parents = guard.parents &&
    await parentRefusal(foldedAll, guard.parents, pod).catch((e) => {
      throw new CniError(
        CNI_ERROR.IO_FAILURE,
        `pod ${pod}: cannot read the node's links to check NetworkAttachmentDefinition ` +
          `${nad.namespace}/${nad.name}`,
        e instanceof Error ? e.message : String(e),
      );
    });
  if (parents) {
    throw new CniError(
      CNI_ERROR.INVALID_CONFIG,
      `pod ${pod}: NetworkAttachmentDefinition ${nad.namespace}/${nad.name} refused: plugin ` +
        `${parents.index} (${plugins[parents.index].type}): ${parents.why}`,
    );
  }
  return out;
}
