/**
 * Ferry's own IPAM type for NetworkAttachmentDefinitions (`"ipam": {"type": "ferry", …}`), the
 * pure part: a new NAD names one of Ferry's `IPPool`s, or a range, directly, and is always
 * served by the daemon with cluster-wide blocks (as native whereabouts configs are: the
 * `NetworkBlock` machinery of `nad_network_ipam.ts`). Two forms:
 *
 * - **`pool`** (one name) or **`pools`** (several, e.g. an IPv4 and an IPv6 pool): one address
 *   from each CIDR of each pool (a dual-stack pool gives one of each family). The pool must exist,
 *   say `spec.use: networks` (a pool of the default network's pods is refused: its addresses are
 *   routed to nodes and never masqueraded as pod space, and its blocks are handed to nodes as
 *   `IPBlock`s; the two IPAMs would hand out one address twice), not be `spec.disabled`, and not
 *   overlap Ferry's pod ranges. Each pool is one address space, cluster-wide, whatever NADs name
 *   it. Addresses run from the CIDR's second address to its last but one; `spec.excluded` stays
 *   out.
 * - **`range`** (and `range_start`, `range_end`, `exclude`, `ipRanges`): the whereabouts range
 *   keys with their semantics (`nad_ipam.ts`); the space is the one whereabouts NADs without
 *   `network_name` share (per family), so such NADs of both types never hand out one address
 *   twice.
 *
 * A pool is an address space of its own: a range (of either form, or a whereabouts config served
 * natively) or another pool that overlaps a pool for networks is refused
 * ({@link refuseNetworkPoolOverlap}), since two spaces would hand out the same addresses.
 *
 * Both take `gateway` (one address, for the ranges of its family, never handed out), `routes`
 * and `dns`. Any other key is refused: a new type has no legacy keys to tolerate. Every refusal
 * is a {@link CniError} with code 7 naming the key (`ipam.pool`).
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import {
  addToIp,
  cidrContains,
  cidrsOverlap,
  formatCidr,
  formatIp,
  type IpAddr,
  lastAddress,
  parseCidr,
  parseIp,
} from "./cidr.ts";
import { type IpPoolObject, parsePool } from "./ip_pools.ts";
import {
  mergeSpans,
  type NadIpamConfig,
  type NadRange,
  parseWhereabouts,
  rangeHolds,
} from "./nad_ipam.ts";

/** The IPAM type Ferry serves itself. */
export const FERRY_IPAM_TYPE = "ferry";

/** The `spec.use` of a pool NADs may name (the default, `pods`, is the default network's). */
export const NETWORKS_USE = "networks";

/** The keys of a `ferry` IPAM config. */
const KEYS = new Set([
  "type",
  "pool",
  "pools",
  "range",
  "range_start",
  "range_end",
  "exclude",
  "ipRanges",
  "gateway",
  "routes",
  "dns",
]);

/** A parsed `ferry` IPAM config: the pools it names, or the ranges it gives. */
export type FerryIpamRequest =
  | { pools: string[]; gateway?: IpAddr; base: NadIpamConfig }
  | { pools?: undefined; config: NadIpamConfig; topRange: boolean };

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);

const POOL_NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

function bad(where: string, key: string, why: string): CniError {
  return new CniError(CNI_ERROR.INVALID_CONFIG, `${where}: ipam.${key}: ${why}`);
}

/** The space of pool `name`'s addresses (`:` is not in a whereabouts network_name). */
export function poolSpaceName(name: string): string {
  return `ippool:${name}`;
}

/**
 * Parses a `ferry` IPAM config (the `ipam` object of a NAD plugin). `where` names the pod and the
 * network in errors.
 *
 * @throws {CniError} code 7 naming the key that is wrong.
 * @example
 * ```ts
 * parseFerryIpam({ type: "ferry", pool: "telco-vlan10" }, "network ns/a").pools; // ["telco-vlan10"]
 * ```
 */
export function parseFerryIpam(ipam: unknown, where: string): FerryIpamRequest {
  if (!isObject(ipam)) throw bad(where, "type", "the ipam section is not an object");
  if (ipam.type !== FERRY_IPAM_TYPE) {
    throw bad(where, "type", `${JSON.stringify(ipam.type)} is not ${FERRY_IPAM_TYPE}`);
  }
  for (const k of Object.keys(ipam)) {
    if (!KEYS.has(k)) {
      throw bad(where, k, `is not a key of the ${FERRY_IPAM_TYPE} IPAM type (see docs/ipam.md)`);
    }
  }
  const ranged = ["range", "range_start", "range_end", "exclude", "ipRanges"].find((k) =>
    ipam[k] !== undefined
  );
  const hasPool = ipam.pool !== undefined || ipam.pools !== undefined;
  if (hasPool && ranged) {
    throw bad(where, ranged, "is given with a pool: name a pool or give ranges, not both");
  }
  if (ipam.pool !== undefined && ipam.pools !== undefined) {
    throw bad(where, "pools", "is given with pool: use one of them");
  }
  if (!hasPool) {
    if (!ranged) throw bad(where, "pool", "is missing (name an IPPool, or give a range)");
    // The whereabouts range keys, with their semantics; the space is the one of whereabouts NADs
    // without network_name.
    const config = parseWhereabouts({ ...ipam, type: "whereabouts" }, where);
    return { config, topRange: ipam.range !== undefined && ipam.range !== "" };
  }
  const key = ipam.pool !== undefined ? "pool" : "pools";
  const names = ipam.pool !== undefined ? [ipam.pool] : ipam.pools;
  if (!Array.isArray(names) || names.length === 0) {
    throw bad(where, key, "must be a non-empty list of IPPool names");
  }
  const pools = names.map((n, i) => {
    const k = key === "pool" ? key : `${key}[${i}]`;
    if (typeof n !== "string" || !POOL_NAME.test(n) || n.length > 253) {
      throw bad(where, k, `${JSON.stringify(n)} is not an IPPool name`);
    }
    return n;
  });
  if (new Set(pools).size !== pools.length) throw bad(where, key, "names a pool twice");
  // Gateway, routes and dns are read as whereabouts reads them (on a stand-in range).
  const base = parseWhereabouts(
    {
      type: "whereabouts",
      range: "0.0.0.0/0",
      ...(ipam.routes !== undefined ? { routes: ipam.routes } : {}),
      ...(ipam.dns !== undefined ? { dns: ipam.dns } : {}),
    },
    where,
  );
  base.ranges = [];
  let gateway: IpAddr | undefined;
  if (ipam.gateway !== undefined && ipam.gateway !== "") {
    try {
      if (typeof ipam.gateway !== "string") throw new Error("not a string");
      gateway = parseIp(ipam.gateway.trim());
    } catch (e) {
      throw bad(
        where,
        "gateway",
        `${JSON.stringify(ipam.gateway)} is not an IP address (${
          e instanceof Error ? e.message : e
        })`,
      );
    }
  }
  return { pools, base, ...(gateway ? { gateway } : {}) };
}

/** What a pool config is checked against when it is served. */
export interface PoolLookup {
  /** The pool called `name`, or undefined when it does not exist. */
  pool(name: string): IpPoolObject | undefined;
  /** Ferry's pod ranges now (CIDR text): no NAD range may overlap them. */
  podRanges(): string[];
  /** Every pool (a range may not overlap a pool for networks it does not name). */
  all?(): IpPoolObject[];
}

/** The key of range `i` of a whereabouts-style config (`range`, or `ipRanges[j].range`). */
const rangeKey = (i: number, topRange: boolean) =>
  i === 0 && topRange ? "range" : `ipRanges[${topRange ? i - 1 : i}].range`;

/**
 * Refuses a NAD range that overlaps a pool for networks (`spec.use: networks`) other than
 * `except`: the NADs naming the pool and this range would be two address spaces sharing
 * addresses, and each would hand out what the other did. `topRange`: whether the config has a
 * top-level `range` (which is range 0).
 *
 * @throws {CniError} code 7 naming the range's key and the pool.
 * @example
 * ```ts
 * refuseNetworkPoolOverlap(config.ranges, true, pools, "network ns/a"); // throws on an overlap
 * ```
 */
export function refuseNetworkPoolOverlap(
  ranges: NadRange[],
  topRange: boolean,
  pools: IpPoolObject[],
  where: string,
  except?: { name: string; key: string },
): void {
  for (const p of pools) {
    const name = p.metadata?.name ?? "";
    if (p.spec?.use !== NETWORKS_USE || name === except?.name) continue;
    for (const text of p.spec.cidrs ?? []) {
      let cidr;
      try {
        cidr = parseCidr(text);
      } catch {
        continue;
      }
      const i = ranges.findIndex((r) => cidrsOverlap(r.cidr, cidr));
      if (i < 0) continue;
      throw bad(
        where,
        except?.key ?? rangeKey(i, topRange),
        `${formatCidr(ranges[i].cidr)} overlaps IPPool ${name} (${formatCidr(cidr)}), a pool ` +
          `for networks: name that pool ("type": "${FERRY_IPAM_TYPE}", "pool": "${name}") instead`,
      );
    }
  }
}

/**
 * The served config of a parsed `ferry` IPAM config: a pool config's ranges from its pools (one
 * space per pool, {@link poolSpaceName}); a range config as it is. Either is checked against
 * Ferry's pod ranges (the NAD guard's rule).
 *
 * @throws {CniError} code 7 naming the key: a pool that does not exist, is not for networks, is
 * disabled, is broken, or overlaps Ferry's pod ranges; a range that overlaps them; a gateway of no
 * range's family.
 * @example
 * ```ts
 * const config = servedFerryIpam(parseFerryIpam(ipam, where), lookup, where);
 * config.ranges[0].cidr; // the pool's IPv4 CIDR
 * ```
 */
export function servedFerryIpam(
  req: FerryIpamRequest,
  lookup: PoolLookup,
  where: string,
): NadIpamConfig[] {
  const pod = lookup.podRanges().flatMap((text) => {
    try {
      return [parseCidr(text)];
    } catch {
      return [];
    }
  });
  const overlap = (key: string, range: NadRange, what: string) => {
    const hit = pod.find((p) => cidrsOverlap(p, range.cidr));
    if (hit) {
      throw bad(
        where,
        key,
        `${what} ${formatCidr(range.cidr)} overlaps Ferry's pod range ${formatCidr(hit)}`,
      );
    }
  };
  if (!req.pools) {
    req.config.ranges.forEach((r, i) => overlap(rangeKey(i, req.topRange), r, "range"));
    refuseNetworkPoolOverlap(req.config.ranges, req.topRange, lookup.all?.() ?? [], where);
    return [req.config];
  }
  const key = (i: number) => req.pools!.length === 1 ? "pool" : `pools[${i}]`;
  const configs = req.pools.map((name, i): NadIpamConfig => {
    const obj = lookup.pool(name);
    if (!obj) throw bad(where, key(i), `IPPool ${name} does not exist`);
    const use = obj.spec?.use;
    if (use !== NETWORKS_USE) {
      throw bad(
        where,
        key(i),
        `IPPool ${name} is a pool of the default network's pods (spec.use is ` +
          `${JSON.stringify(use ?? "pods")}): a NAD names a pool with spec.use: ${NETWORKS_USE}`,
      );
    }
    if (obj.spec?.disabled === true) {
      throw bad(where, key(i), `IPPool ${name} is disabled (spec.disabled)`);
    }
    let families;
    try {
      // A NAD network's blocks are sized to the range (`nad_blocks.ts`): blockSize is not used.
      families = parsePool({ ...obj, spec: { ...obj.spec, blockSize: { ipv4: 30, ipv6: 126 } } });
    } catch (e) {
      throw bad(where, key(i), e instanceof Error ? e.message : String(e));
    }
    const ranges = families.map((f): NadRange => {
      const start = addToIp(f.cidr.network, 1n);
      const end = addToIp(lastAddress(f.cidr), -1n);
      if (start.value > end.value) {
        throw bad(where, key(i), `IPPool ${name}: ${formatCidr(f.cidr)} has no usable address`);
      }
      const range: NadRange = { cidr: f.cidr, start, end, excluded: [...f.excluded] };
      if (req.gateway?.family === f.family) {
        range.gateway = req.gateway;
        if (cidrContains(f.cidr, req.gateway)) {
          range.excluded.push({ start: req.gateway.value, end: req.gateway.value });
        }
      }
      range.excluded = mergeSpans(range.excluded);
      overlap(key(i), range, `IPPool ${name}'s CIDR`);
      return range;
    });
    refuseNetworkPoolOverlap(ranges, false, lookup.all?.() ?? [], where, { name, key: key(i) });
    return { ...req.base, networkName: poolSpaceName(name), overlapping: true, ranges };
  });
  if (req.gateway && !configs.some((c) => c.ranges.some((r) => r.gateway))) {
    throw bad(where, "gateway", `${formatIp(req.gateway)} is of no pool's family`);
  }
  return configs;
}

/**
 * Where a pod's static address (`ips` of its selection, `address/prefix`) is reserved: the index
 * of the config (of `configs`, a NAD's served configs) whose space takes it. A static address is
 * never a range's gateway (every pod of the network routes through it), never in a pool for
 * networks its NAD does not name (that pool's space would hand it out again: one address on two
 * pods), and, for a NAD naming pools (`pools`), always an address one of them hands out (in its
 * CIDRs, not its ends nor in its `spec.excluded`: the operator's), reserved in that pool's space. IPv4-mapped addresses are checked as the IPv4 address they map. An address that
 * does not parse is left to the reservation to refuse.
 *
 * @throws {CniError} code 7 naming the address and why.
 * @example
 * ```ts
 * staticConfigIndex("192.168.50.20/24", configs, pools, ["telco-vlan10"], where); // 0
 * ```
 */
export function staticConfigIndex(
  text: string,
  configs: NadIpamConfig[],
  pools: IpPoolObject[],
  named: string[] | undefined,
  where: string,
): number {
  let ip: IpAddr;
  try {
    ip = parseIp(text.split("/")[0]);
  } catch {
    return 0;
  }
  // An IPv4-mapped address is the IPv4 address it maps (as Go's plugins read it).
  if (ip.family === 6 && ip.value >> 32n === 0xffffn) {
    ip = { family: 4, value: ip.value & 0xffffffffn };
  }
  const refuse = (why: string) =>
    new CniError(CNI_ERROR.INVALID_CONFIG, `${where}: ips: static address ${formatIp(ip)} ${why}`);
  const gateway = configs.some((c) =>
    c.ranges.some((r) => r.gateway?.family === ip.family && r.gateway.value === ip.value)
  );
  if (gateway) throw refuse("is the network's gateway");
  if (named) {
    const i = configs.findIndex((c) => c.ranges.some((r) => cidrContains(r.cidr, ip)));
    if (i < 0) throw refuse(`is outside the IPPool the NAD names (${named.join(", ")})`);
    // The pool's spec.excluded are the operator's (its routers, its reservations).
    if (!configs[i].ranges.some((r) => rangeHolds(r, ip))) {
      throw refuse(`is not an address IPPool ${named[i]} hands out (spec.excluded, or its ends)`);
    }
    return i;
  }
  for (const p of pools) {
    if (p.spec?.use !== NETWORKS_USE) continue;
    for (const c of p.spec.cidrs ?? []) {
      let cidr;
      try {
        cidr = parseCidr(c);
      } catch {
        continue;
      }
      if (cidrContains(cidr, ip)) {
        throw refuse(
          `lies in IPPool ${p.metadata?.name ?? ""} (${formatCidr(cidr)}), a pool for networks ` +
            `this NAD does not name: that pool would hand it out again`,
        );
      }
    }
  }
  return 0;
}

/**
 * The pools for networks (`spec.use: networks`) of `read`'s pools, name and CIDRs: what the NAD
 * guard keeps other IPAM types off.
 *
 * @throws {CniError} code 11 when the pools cannot be read.
 * @example
 * ```ts
 * const networkPools = networkPoolsOf(ipPoolReader(client, pools));
 * await networkPools(); // [{ name: "telco-vlan10", cidrs: ["192.168.50.0/24"] }]
 * ```
 */
export function networkPoolsOf(
  read: () => Promise<IpPoolObject[]>,
): () => Promise<{ name: string; cidrs: string[] }[]> {
  return async () => {
    let pools: IpPoolObject[];
    try {
      pools = await read();
    } catch (e) {
      throw new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        "cannot read the IPPools for networks a NetworkAttachmentDefinition is checked against",
        e instanceof Error ? e.message : String(e),
      );
    }
    return pools.filter((p) => p.spec?.use === NETWORKS_USE).map((p) => ({
      name: p.metadata?.name ?? "",
      cidrs: p.spec?.cidrs ?? [],
    }));
  };
}
