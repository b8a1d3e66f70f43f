/**
 * Every address and range a NAD's plugin config names, normalised so that one address has one
 * form. Pure. The guard compares what this returns with Ferry's pod ranges; a tenant must not be
 * able to slip an address past it by spelling it differently:
 *
 * - host bits are cleared and IPv6 compressed or not is the same number (`cidr.ts`);
 * - an IPv4-mapped IPv6 address (`::ffff:10.0.0.1`, `::ffff:a00:1`) is the IPv4 address it maps,
 *   as Go's `net.ParseIP` (which every reference plugin uses) makes it: `::ffff:10.0.0.1/120` is
 *   `10.0.0.1/24`; a prefix shorter than /96 that covers the mapped block covers all of IPv4 too;
 * - a whereabouts `start-end` range is the span from start to end.
 *
 * The keys read, in any case (the config's keys folded as a Go plugin reads them,
 * `lib/cni/json_keys.ts`; paths as the guard's messages name them):
 *
 * - `ipam.subnet`, `ipam.rangestart`, `ipam.rangeend`, `ipam.gateway` (host-local's flat form);
 * - `ipam.ranges[i][j].subnet`, `.rangestart`, `.rangeend`, `.gateway` (host-local);
 * - `ipam.range`, `ipam.range_start`, `ipam.range_end`, `ipam.ipranges[i].range`, `.range_start`,
 *   `.range_end` (whereabouts);
 * - `ipam.addresses[i].address`, `.gateway` (static);
 * - `ipam.routes[i].gw`;
 * - `runtimeconfig.ips[i]` (a selection's `ips`), `runtimeconfig.ipranges[i][j].subnet`,
 *   `.rangestart`, `.rangeend`, `.gateway` (host-local's `ipRanges` capability; a NAD's own
 *   `runtimeConfig` is dropped before this, `drivers.ts`), `args.cni.ips[i]` (a selection's
 *   `cni-args`, or the NAD's own `args`).
 *
 * Exclusions (`ipam.exclude`, `ipam.ipranges[i].exclude`) take addresses away and routes'
 * destinations steer only the tenant's own pod: they must parse but may name any range.
 *
 * @module
 */
import { type Cidr, type IpAddr, lastAddress, parseCidr, parseIp } from "../ipam/cidr.ts";

/** A contiguous run of addresses of one family, first to last inclusive. */
export interface IpSpan {
  /** 4 or 6. */
  family: 4 | 6;
  /** The first address, as a number. */
  first: bigint;
  /** The last address, as a number. */
  last: bigint;
}

/** One address or range a plugin names, where it names it. */
export interface NamedSpan {
  /** The key's path in the plugin config (`ipam.ranges[0][0].subnet`). */
  key: string;
  /** The value as written. */
  text: string;
  /** What it covers. */
  span: IpSpan;
  /** False for keys that may name any range (exclusions, route destinations). */
  checked: boolean;
}

/** What a plugin names: the spans, and the keys whose values are not addresses or ranges. */
export interface PluginAddresses {
  /** Every address or range found. */
  spans: NamedSpan[];
  /** Keys holding something that is not an address or range (or not the right shape). */
  invalid: { key: string; value: unknown }[];
}

const MAPPED = 0xffff00000000n; // ::ffff:0:0/96
const V4_ALL = 0xffffffffn;

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);

/** `cidr` as IPv4 when it lies in (or covers) the IPv4-mapped block, else as it is. */
function unmapped(cidr: Cidr): IpSpan[] {
  const net = cidr.network;
  const last = lastAddress(cidr).value;
  const own: IpSpan = { family: net.family, first: net.value, last };
  if (net.family === 4) return [own];
  if (cidr.prefix >= 96 && (net.value >> 32n) === 0xffffn) {
    return [{ family: 4, first: net.value & V4_ALL, last: last & V4_ALL }];
  }
  // A shorter prefix covering ::ffff:0:0/96 covers every mapped address: all of IPv4.
  if (cidr.prefix < 96 && net.value <= MAPPED && last >= MAPPED + V4_ALL) {
    return [own, { family: 4, first: 0n, last: V4_ALL }];
  }
  return [own];
}

function addressSpans(text: string): IpSpan[] {
  const ip: IpAddr = parseIp(text);
  return unmapped({ network: ip, prefix: ip.family === 4 ? 32 : 128 });
}

/**
 * What `text` covers: an address, a prefix (host bits ignored) or a `start-end` range (the end
 * may carry a `/length`, as whereabouts allows); IPv4-mapped forms become IPv4.
 *
 * @throws Error when it is none of these.
 * @example
 * ```ts
 * normalisedSpans("::ffff:10.77.1.2/120"); // [{ family: 4, first: 10.77.1.0, last: 10.77.1.255 }]
 * ```
 */
export function normalisedSpans(text: string): IpSpan[] {
  const dash = text.indexOf("-");
  if (dash >= 0) {
    const [a] = addressSpans(text.slice(0, dash));
    const endText = text.slice(dash + 1);
    const [b] = addressSpans(
      endText.includes("/") ? endText.slice(0, endText.indexOf("/")) : endText,
    );
    if (a.family !== b.family || a.first > b.first) {
      throw new Error(`invalid range ${JSON.stringify(text)}`);
    }
    return [{ family: a.family, first: a.first, last: b.last }];
  }
  return text.includes("/") ? unmapped(parseCidr(text)) : addressSpans(text);
}

/** True when `a` and `b` share an address. */
export function spansOverlap(a: IpSpan, b: IpSpan): boolean {
  return a.family === b.family && a.first <= b.last && b.first <= a.last;
}

/** Collects spans and bad values while walking one plugin's keys. */
class Walk {
  readonly out: PluginAddresses = { spans: [], invalid: [] };

  /** An address or range at `key`, if present. */
  one(key: string, value: unknown, checked = true): void {
    if (value === undefined || value === null) return;
    if (typeof value !== "string") {
      this.out.invalid.push({ key, value });
      return;
    }
    try {
      for (const span of normalisedSpans(value)) {
        this.out.spans.push({ key, text: value, span, checked });
      }
    } catch {
      this.out.invalid.push({ key, value });
    }
  }

  /** A list at `key`, each element handed to `each`, if present. */
  list(key: string, value: unknown, each: (v: unknown, key: string) => void): void {
    if (value === undefined || value === null) return;
    if (!Array.isArray(value)) {
      this.out.invalid.push({ key, value });
      return;
    }
    value.forEach((v, i) => each(v, `${key}[${i}]`));
  }

  /** An object at `key`, handed to `fn`, if present. */
  object(key: string, value: unknown, fn: (o: Record<string, unknown>) => void): void {
    if (value === undefined || value === null) return;
    if (!isObject(value)) {
      this.out.invalid.push({ key, value });
      return;
    }
    fn(value);
  }
}

/**
 * Every address and range `plugin` names (see the module doc for the keys), normalised. `plugin`'s
 * keys must be folded already (`foldKeys`).
 *
 * @example
 * ```ts
 * addressesOf({ type: "macvlan", args: { cni: { ips: ["10.77.1.2/24"] } } }).spans[0].key;
 * // "args.cni.ips[0]"
 * ```
 */
export function addressesOf(plugin: Record<string, unknown>): PluginAddresses {
  const w = new Walk();
  w.object("ipam", plugin.ipam, (ipam) => {
    for (const k of ["subnet", "rangestart", "rangeend", "gateway"]) w.one(`ipam.${k}`, ipam[k]);
    w.list(
      "ipam.ranges",
      ipam.ranges,
      (set, key) =>
        w.list(key, set, (r, key) =>
          w.object(key, r, (r) => {
            for (const k of ["subnet", "rangestart", "rangeend", "gateway"]) {
              w.one(`${key}.${k}`, r[k]);
            }
          })),
    );
    for (const k of ["range", "range_start", "range_end"]) w.one(`ipam.${k}`, ipam[k]);
    w.list("ipam.exclude", ipam.exclude, (v, key) => w.one(key, v, false));
    w.list("ipam.ipranges", ipam.ipranges, (r, key) =>
      w.object(key, r, (r) => {
        for (const k of ["range", "range_start", "range_end"]) w.one(`${key}.${k}`, r[k]);
        w.list(`${key}.exclude`, r.exclude, (v, key) => w.one(key, v, false));
      }));
    w.list("ipam.addresses", ipam.addresses, (a, key) =>
      w.object(key, a, (a) => {
        w.one(`${key}.address`, a.address);
        w.one(`${key}.gateway`, a.gateway);
      }));
    w.list("ipam.routes", ipam.routes, (r, key) =>
      w.object(key, r, (r) => {
        w.one(`${key}.dst`, r.dst, false);
        w.one(`${key}.gw`, r.gw);
      }));
  });
  w.object("runtimeconfig", plugin.runtimeconfig, (rc) => {
    w.list("runtimeconfig.ips", rc.ips, (v, key) => w.one(key, v));
    // host-local puts the `ipRanges` capability's ranges before its own.
    w.list(
      "runtimeconfig.ipranges",
      rc.ipranges,
      (set, key) =>
        w.list(key, set, (r, key) =>
          w.object(key, r, (r) => {
            for (const k of ["subnet", "rangestart", "rangeend", "gateway"]) {
              w.one(`${key}.${k}`, r[k]);
            }
          })),
    );
  });
  w.object(
    "args",
    plugin.args,
    (args) =>
      w.object(
        "args.cni",
        args.cni,
        (cni) => w.list("args.cni.ips", cni.ips, (v, key) => w.one(key, v)),
      ),
  );
  return w.out;
}
