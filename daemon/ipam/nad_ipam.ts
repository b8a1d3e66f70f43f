/**
 * The IPAM config of a NetworkAttachmentDefinition written for whereabouts (`"type":
 * "whereabouts"`), parsed and normalised, the pure part of Ferry's cluster-wide IPAM for NAD
 * networks. Every documented key of whereabouts v0.9.0 is read with its semantics:
 *
 * - `range`: a CIDR (`192.168.2.0/24`; host bits dropped, `192.168.2.225/28` is
 *   `192.168.2.224/28`) or `start-endCIDR` (`192.168.2.225-192.168.2.230/28`: from `.225` to
 *   `.230` of that /28; a start at the network address or an end at the all-ones address is no
 *   bound, as in whereabouts). Addresses run from the network's second address to the last but one
 *   (the network and all-ones addresses are never handed out, in IPv6 too, as whereabouts does);
 *   `range_start` and `range_end` narrow that, `exclude` (CIDRs or single addresses) takes spans
 *   out. The top-level `range`, `range_start`, `range_end` and `exclude` form the first range.
 * - `ipRanges`: further ranges (`range`, `range_start`, `range_end`, `exclude` each), one
 *   address from each (dual stack, or several addresses of one family).
 * - `gateway`: the gateway the results of the ranges of its family name (inside the range or
 *   not, as in whereabouts); it is never handed out to a pod (whereabouts v0.9.0 may hand it out:
 *   Ferry does not).
 * - `network_name`: names the address space (see {@link spaceKey}); `enable_overlapping_ranges`
 *   (default true, as in whereabouts): whether ranges of one `network_name` that overlap share
 *   their addresses (true) or are independent (false: only NADs with the same range share).
 * - `routes`, `dns`: passed into the result as the static IPAM plugin does; `addresses`: static
 *   addresses (CIDR, optional gateway) added to the result and reserved in the space.
 * - Keys of whereabouts' own machinery (`kubernetes`, `datastore`, `etcd_*`, `leader_*`,
 *   `log_file`, `log_level`, `reconciler_cron_expression`, `sleep_for_race`, `node_slice_size`)
 *   are accepted and have no effect: Ferry keeps the allocations itself. `configuration_path`
 *   (a flat file on the node) is refused: a NAD's config is its whole config here.
 *
 * IPv4-mapped IPv6 addresses (`::ffff:192.168.2.1`) are read as the IPv4 address they map.
 * A bad config is a {@link CniError} with code 7 naming the key (`ipam.ipRanges[1].range`).
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import {
  addToIp,
  type Cidr,
  cidrContains,
  formatCidr,
  formatIp,
  type IpAddr,
  lastAddress,
  parseCidr,
  parseIp,
} from "./cidr.ts";

/** One range of a whereabouts config, normalised. */
export interface NadRange {
  /** The range's network (host bits cleared), e.g. `192.168.2.224/28`. */
  cidr: Cidr;
  /** The first address handed out. */
  start: IpAddr;
  /** The last address handed out. */
  end: IpAddr;
  /** Spans of `start..end` never handed out (the `exclude` entries and the gateway), inclusive. */
  excluded: { start: bigint; end: bigint }[];
  /** The gateway of this range's results (`gateway`, when of this range's family). */
  gateway?: IpAddr;
}

/** A route of the result. */
export interface NadRoute {
  /** The destination CIDR. */
  dst: string;
  /** The next hop, when given. */
  gw?: string;
}

/** A whereabouts IPAM config, normalised. */
export interface NadIpamConfig {
  /** `network_name`, "" when absent. */
  networkName: string;
  /** `enable_overlapping_ranges` (default true). */
  overlapping: boolean;
  /** The ranges, the top-level one first: one address is handed out from each. */
  ranges: NadRange[];
  /** Static addresses (`addresses`), added to every result. */
  addresses: { address: string; gateway?: string }[];
  /** `routes`. */
  routes: NadRoute[];
  /** `dns`, as written. */
  dns?: Record<string, unknown>;
}

/**
 * The most ranges (`range` and `ipRanges` together) and static `addresses` a config may give: a
 * tenant's NAD with thousands would have each pod take an address (and, in a small range, a
 * `NetworkBlock` object of its own, claimed one after another) from every one of them.
 */
export const MAX_RANGES = 16;

/** Keys whereabouts reads for its own machinery (storage, logging, leader election): accepted, without effect. */
export const WHEREABOUTS_IGNORED_KEYS = [
  "kubernetes",
  "datastore",
  "etcd_host",
  "etcd_username",
  "etcd_password",
  "etcd_key_file",
  "etcd_cert_file",
  "etcd_ca_cert_file",
  "leader_lease_duration",
  "leader_renew_deadline",
  "leader_retry_period",
  "log_file",
  "log_level",
  "reconciler_cron_expression",
  "sleep_for_race",
  "node_slice_size",
] as const;

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);

/** The failure of one key: code 7, naming `where` and the key. */
function bad(where: string, key: string, why: string): CniError {
  return new CniError(CNI_ERROR.INVALID_CONFIG, `${where}: ipam.${key}: ${why}`);
}

const MAPPED = /^::ffff:(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})$/i;

/** Parses an address; an IPv4-mapped IPv6 address is its IPv4 address. */
function ip(text: string): IpAddr {
  const mapped = MAPPED.exec(text.trim());
  return parseIp(mapped ? mapped[1] : text.trim());
}

/** Parses `address/length` keeping the address; a mapped IPv4 prefix becomes an IPv4 one. */
function ipAndCidr(text: string): { ip: IpAddr; cidr: Cidr } {
  const slash = text.indexOf("/");
  if (slash < 0) throw new Error("not a CIDR (address/length)");
  const addrText = text.slice(0, slash).trim();
  const lenText = text.slice(slash + 1).trim();
  const mapped = MAPPED.exec(addrText);
  if (mapped) {
    const len = Number(lenText);
    if (!/^\d{1,3}$/.test(lenText) || len < 96 || len > 128) {
      throw new Error("an IPv4-mapped prefix needs a length between 96 and 128");
    }
    const addr = parseIp(mapped[1]);
    return { ip: addr, cidr: parseCidr(`${mapped[1]}/${len - 96}`) };
  }
  return { ip: parseIp(addrText), cidr: parseCidr(`${addrText}/${lenText}`) };
}

const why = (e: unknown) => e instanceof Error ? e.message : String(e);

/** Parses one range entry (the top level, or an `ipRanges` item) whose keys sit under `prefix`. */
function parseRange(
  entry: Record<string, unknown>,
  prefix: string,
  where: string,
): NadRange {
  const key = (k: string) => `${prefix}${k}`;
  const text = entry.range;
  if (typeof text !== "string" || text.trim() === "") {
    throw bad(where, key("range"), "must be a CIDR or start-endCIDR");
  }
  let cidr: Cidr;
  let start: IpAddr | undefined;
  let end: IpAddr | undefined;
  const dash = text.indexOf("-");
  try {
    if (dash >= 0) {
      // `start-endCIDR`: the CIDR's address is the last address, its network the range.
      start = ip(text.slice(0, dash));
      const last = ipAndCidr(text.slice(dash + 1));
      cidr = last.cidr;
      end = last.ip;
      if (!cidrContains(cidr, start)) {
        throw new Error(`${formatIp(start)} is outside ${formatCidr(cidr)}`);
      }
    } else {
      cidr = ipAndCidr(text).cidr;
    }
  } catch (e) {
    throw bad(
      where,
      key("range"),
      `${JSON.stringify(text)} is not a CIDR or start-endCIDR (${why(e)})`,
    );
  }
  const family = cidr.network.family;
  const hostBits = (family === 4 ? 32 : 128) - cidr.prefix;
  if (hostBits < 2) {
    throw bad(where, key("range"), `${formatCidr(cidr)} has no usable address (it is too small)`);
  }
  const first = addToIp(cidr.network, 1n);
  const last = addToIp(lastAddress(cidr), -1n);
  const bound = (k: string, v: unknown): IpAddr | undefined => {
    if (v === undefined || v === null || v === "") return undefined;
    let addr: IpAddr;
    try {
      if (typeof v !== "string") throw new Error("not a string");
      addr = ip(v);
    } catch (e) {
      throw bad(where, key(k), `${JSON.stringify(v)} is not an IP address (${why(e)})`);
    }
    if (addr.family !== family) {
      throw bad(where, key(k), `${formatIp(addr)} is not of the family of ${formatCidr(cidr)}`);
    }
    if (addr.value < first.value || addr.value > last.value) {
      throw bad(
        where,
        key(k),
        `${formatIp(addr)} is outside the usable addresses of ${formatCidr(cidr)} ` +
          `(${formatIp(first)}-${formatIp(last)})`,
      );
    }
    return addr;
  };
  // The `start-end` form wins over range_start/range_end, as in whereabouts. Its ends lie in the
  // CIDR; one at the network or the all-ones address is no bound (whereabouts ignores a bound its
  // range cannot hand out: `10.0.0.0-10.0.0.255/24` serves .1 to .254 there and here).
  const usable = (a: IpAddr) => a.value >= first.value && a.value <= last.value ? a : undefined;
  start = start ? usable(start) : bound("range_start", entry.range_start);
  end = end ? usable(end) : bound("range_end", entry.range_end);
  const range: NadRange = {
    cidr,
    start: start ?? first,
    end: end ?? last,
    excluded: [],
  };
  if (range.start.value > range.end.value) {
    throw bad(
      where,
      key(dash >= 0 ? "range" : "range_end"),
      `the range ends (${formatIp(range.end)}) before it starts (${formatIp(range.start)})`,
    );
  }
  const exclude = entry.exclude ?? [];
  if (!Array.isArray(exclude)) throw bad(where, key("exclude"), "must be a list of CIDRs");
  for (const [i, x] of exclude.entries()) {
    let span: { start: bigint; end: bigint };
    try {
      if (typeof x !== "string") throw new Error("not a string");
      if (x.includes("/")) {
        const c = ipAndCidr(x).cidr;
        if (c.network.family !== family) {
          throw new Error(`not of the family of ${formatCidr(cidr)}`);
        }
        span = { start: c.network.value, end: lastAddress(c).value };
      } else {
        const a = ip(x);
        if (a.family !== family) throw new Error(`not of the family of ${formatCidr(cidr)}`);
        span = { start: a.value, end: a.value };
      }
    } catch (e) {
      throw bad(where, key(`exclude[${i}]`), `${JSON.stringify(x)}: ${why(e)}`);
    }
    range.excluded.push(span);
  }
  return range;
}

/** The number of addresses `range` hands out. */
export function rangeSize(range: NadRange): bigint {
  let n = range.end.value - range.start.value + 1n;
  const spans = mergeSpans(range.excluded);
  for (const x of spans) {
    const lo = x.start > range.start.value ? x.start : range.start.value;
    const hi = x.end < range.end.value ? x.end : range.end.value;
    if (hi >= lo) n -= hi - lo + 1n;
  }
  return n;
}

/** Spans sorted and merged (overlapping or adjacent ones joined). */
export function mergeSpans(
  spans: { start: bigint; end: bigint }[],
): { start: bigint; end: bigint }[] {
  const sorted = [...spans].sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0));
  const out: { start: bigint; end: bigint }[] = [];
  for (const s of sorted) {
    const prev = out[out.length - 1];
    if (prev && s.start <= prev.end + 1n) {
      if (s.end > prev.end) prev.end = s.end;
    } else out.push({ ...s });
  }
  return out;
}

/** Whether `range` hands out `addr` (inside start..end, not excluded). */
export function rangeHolds(range: NadRange, addr: IpAddr): boolean {
  return addr.family === range.cidr.network.family && addr.value >= range.start.value &&
    addr.value <= range.end.value &&
    !range.excluded.some((x) => addr.value >= x.start && addr.value <= x.end);
}

/**
 * Parses a whereabouts IPAM config (the `ipam` object of a NAD plugin). `where` names the pod and
 * the NAD in errors.
 *
 * @throws {CniError} code 7 naming the key that is wrong.
 * @example
 * ```ts
 * const c = parseWhereabouts({ type: "whereabouts", range: "192.168.2.225/28" }, "pod a/b");
 * formatCidr(c.ranges[0].cidr); // "192.168.2.224/28"
 * ```
 */
export function parseWhereabouts(ipam: unknown, where: string): NadIpamConfig {
  if (!isObject(ipam)) throw bad(where, "type", "the ipam section is not an object");
  if (ipam.type !== "whereabouts") {
    throw bad(where, "type", `${JSON.stringify(ipam.type)} is not whereabouts`);
  }
  if (ipam.configuration_path !== undefined && ipam.configuration_path !== "") {
    throw bad(
      where,
      "configuration_path",
      "a flat file on the node is not read: put its keys in the NAD's config",
    );
  }
  let networkName = "";
  if (ipam.network_name !== undefined) {
    if (
      typeof ipam.network_name !== "string" || !/^[A-Za-z0-9._-]{0,200}$/.test(ipam.network_name)
    ) {
      throw bad(where, "network_name", "must be a string of letters, digits, '.', '_' and '-'");
    }
    networkName = ipam.network_name;
  }
  let overlapping = true;
  if (ipam.enable_overlapping_ranges !== undefined) {
    if (typeof ipam.enable_overlapping_ranges !== "boolean") {
      throw bad(where, "enable_overlapping_ranges", "must be true or false");
    }
    overlapping = ipam.enable_overlapping_ranges;
  }
  const ranges: NadRange[] = [];
  if (ipam.range !== undefined && ipam.range !== "") {
    ranges.push(parseRange(ipam, "", where));
  } else {
    for (const k of ["range_start", "range_end"]) {
      if (ipam[k] !== undefined && ipam[k] !== "") throw bad(where, k, "is given without range");
    }
  }
  if (ipam.ipRanges !== undefined && ipam.ipRanges !== null) {
    if (!Array.isArray(ipam.ipRanges)) throw bad(where, "ipRanges", "must be a list of ranges");
    if (ranges.length + ipam.ipRanges.length > MAX_RANGES) {
      throw bad(
        where,
        "ipRanges",
        `has ${ipam.ipRanges.length} ranges: at most ${MAX_RANGES} with range (each pod takes an ` +
          "address, and often a NetworkBlock, of every range)",
      );
    }
    for (const [i, r] of ipam.ipRanges.entries()) {
      if (!isObject(r)) throw bad(where, `ipRanges[${i}]`, "must be an object with a range");
      ranges.push(parseRange(r, `ipRanges[${i}].`, where));
    }
  }
  if (Array.isArray(ipam.addresses) && ipam.addresses.length > MAX_RANGES) {
    throw bad(
      where,
      "addresses",
      `has ${ipam.addresses.length} addresses: at most ${MAX_RANGES} (each is put on every pod)`,
    );
  }
  const addresses = parseAddresses(ipam.addresses, where);
  if (ranges.length === 0 && addresses.length === 0) {
    throw bad(where, "range", "is missing (give range, ipRanges or addresses)");
  }
  if (ipam.gateway !== undefined && ipam.gateway !== "") {
    let gw: IpAddr;
    try {
      if (typeof ipam.gateway !== "string") throw new Error("not a string");
      gw = ip(ipam.gateway);
    } catch (e) {
      throw bad(
        where,
        "gateway",
        `${JSON.stringify(ipam.gateway)} is not an IP address (${why(e)})`,
      );
    }
    // Whereabouts puts the gateway on every result, inside the range or not (its own README's
    // IPv6 example names one outside its /116): so here on the ranges of its family, and taken
    // out of those that hold it.
    const family = ranges.filter((r) => r.cidr.network.family === gw.family);
    if (ranges.length && !family.length) {
      throw bad(where, "gateway", `${formatIp(gw)} is of no range's family`);
    }
    for (const r of family) {
      r.gateway = gw;
      if (cidrContains(r.cidr, gw)) r.excluded.push({ start: gw.value, end: gw.value });
    }
  }
  for (const [i, r] of ranges.entries()) {
    if (rangeSize(r) <= 0n) {
      throw bad(
        where,
        i === 0 && ipam.range ? "range" : `ipRanges[${ipam.range ? i - 1 : i}].range`,
        `${
          formatCidr(r.cidr)
        } hands out no address (range_start, range_end and exclude leave none)`,
      );
    }
    r.excluded = mergeSpans(r.excluded);
  }
  return {
    networkName,
    overlapping,
    ranges,
    addresses,
    routes: parseRoutes(ipam.routes, where),
    ...(isObject(ipam.dns) ? { dns: ipam.dns } : {}),
  };
}

function parseAddresses(v: unknown, where: string): { address: string; gateway?: string }[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw bad(where, "addresses", "must be a list of {address, gateway}");
  return v.map((a, i) => {
    const key = `addresses[${i}]`;
    if (!isObject(a) || typeof a.address !== "string") {
      throw bad(where, key, "must be an object with an address (CIDR)");
    }
    let parsed: { ip: IpAddr; cidr: Cidr };
    try {
      parsed = ipAndCidr(a.address);
    } catch (e) {
      throw bad(where, `${key}.address`, `${JSON.stringify(a.address)}: ${why(e)}`);
    }
    const out: { address: string; gateway?: string } = {
      address: `${formatIp(parsed.ip)}/${parsed.cidr.prefix}`,
    };
    if (a.gateway !== undefined) {
      try {
        if (typeof a.gateway !== "string") throw new Error("not a string");
        out.gateway = formatIp(ip(a.gateway));
      } catch (e) {
        throw bad(where, `${key}.gateway`, `${JSON.stringify(a.gateway)}: ${why(e)}`);
      }
    }
    return out;
  });
}

function parseRoutes(v: unknown, where: string): NadRoute[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw bad(where, "routes", "must be a list of {dst, gw}");
  return v.map((r, i) => {
    if (!isObject(r) || typeof r.dst !== "string") {
      throw bad(where, `routes[${i}]`, "must be an object with dst (CIDR)");
    }
    let dst: string;
    try {
      dst = formatCidr(ipAndCidr(r.dst).cidr);
    } catch (e) {
      throw bad(where, `routes[${i}].dst`, `${JSON.stringify(r.dst)}: ${why(e)}`);
    }
    const out: NadRoute = { dst };
    if (r.gw !== undefined) {
      try {
        if (typeof r.gw !== "string") throw new Error("not a string");
        out.gw = formatIp(ip(r.gw));
      } catch (e) {
        throw bad(where, `routes[${i}].gw`, `${JSON.stringify(r.gw)}: ${why(e)}`);
      }
    }
    return out;
  });
}

/**
 * The address space a range belongs to: addresses are unique within a space, cluster-wide. With
 * `enable_overlapping_ranges` (the default) the space is the `network_name` and the family, so
 * every range of that name (however the ranges of its NADs overlap) shares it; without, it is the
 * `network_name` and the range, so only NADs with that very range share it (whereabouts' pool per
 * range). NADs of different `network_name`s never share, whatever their ranges. Spaces do not see
 * each other's addresses, so two spaces of one `network_name` and family never serve overlapping
 * ranges: the owners' check refuses the later one (`nad_space_owners.ts`).
 *
 * @example
 * ```ts
 * spaceKey(c, c.ranges[0]); // "v4" for a config without network_name, "blue/v4" with one
 * ```
 */
export function spaceKey(config: NadIpamConfig, range: NadRange): string {
  const scope = config.overlapping
    ? `v${range.cidr.network.family}`
    : `range-${formatCidr(range.cidr)}`;
  return config.networkName ? `${config.networkName}/${scope}` : scope;
}

/**
 * The CIDR of every range a whereabouts IPAM config names (`range` and each `ipRanges[].range`,
 * in either form, IPv4-mapped ones as IPv4), normalised; ranges that do not parse are left out
 * (parsing the config refuses them). For checks that must see every range, such as the NAD guard.
 *
 * @example
 * ```ts
 * whereaboutsRangeCidrs({ type: "whereabouts", range: "10.0.0.5-10.0.0.9/24" }); // ["10.0.0.0/24"]
 * ```
 */
export function whereaboutsRangeCidrs(ipam: unknown): string[] {
  if (!isObject(ipam)) return [];
  const texts = [
    ipam.range,
    ...(Array.isArray(ipam.ipRanges) ? ipam.ipRanges : [])
      .map((r) => isObject(r) ? r.range : undefined),
  ];
  return texts.flatMap((t) => {
    if (typeof t !== "string") return [];
    try {
      return [formatCidr(ipAndCidr(t.slice(t.indexOf("-") + 1)).cidr)];
    } catch {
      return [];
    }
  });
}
