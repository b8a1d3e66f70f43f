/**
 * NAD IPAM configs served by Ferry itself: Ferry's own type (`"type": "ferry"`, naming an IPPool
 * or a range: `nad_ferry_ipam.ts`), always, and whereabouts configs when
 * `multiNetwork.whereaboutsIpam` is `native`. The macvlan, ipvlan and NAD bridge drivers ask this
 * instead of exec'ing an IPAM binary. The config is parsed ({@link parseWhereabouts},
 * {@link parseFerryIpam}: a bad one is code 7 naming the key), addresses come from the node's
 * share of the network's cluster-wide space ({@link NadNetworkIpam}), and a pod's static `ips`
 * (its selection's, through `runtimeConfig.ips`) are reserved in that space.
 *
 * @module
 */
import { podRefFromArgs } from "../../lib/cni/args.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { CniResult, NetConf } from "../../lib/cni/schemas.ts";
import type { IpPoolObject } from "../ipam/ip_pools.ts";
import {
  FERRY_IPAM_TYPE,
  parseFerryIpam,
  poolSpaceName,
  refuseNetworkPoolOverlap,
  servedFerryIpam,
  staticConfigIndex,
} from "../ipam/nad_ferry_ipam.ts";
import { type NadIpamConfig, parseWhereabouts } from "../ipam/nad_ipam.ts";
import type { NadNetworkIpam, NadNetworkIpamStats } from "../ipam/nad_network_ipam.ts";
import type { SpaceOwners } from "../ipam/nad_space_owners.ts";
import type { AllocationWait } from "../ipam/quarantine.ts";
import type { AttachmentKey } from "../records/attachment_store.ts";

/** One call's inputs (a subset of the drivers' IPAM call). */
export interface NativeIpamCall {
  /** The attachment config holding `ipam`. */
  conf: NetConf;
  /** Container ID and interface. */
  key: AttachmentKey;
  /** CNI_ARGS. */
  args: Record<string, string>;
  /** How long an ADD may wait for an address in the reuse quarantine (see `quarantine.ts`). */
  addressWait?: AllocationWait;
}

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);

/** What serving NAD IPAM configs needs besides the node's NAD IPAM. */
export interface NativeNadIpamOptions {
  /** Whether `"type": "whereabouts"` configs are served here (`whereaboutsIpam: native`). */
  whereabouts: boolean;
  /** Every IPPool (the `ferry` type's pools), read when a config names one. */
  pools?: () => Promise<IpPoolObject[]>;
  /** Ferry's pod ranges now (no NAD range may overlap them); code 11 before they are known. */
  podRanges?: () => string[];
  /**
   * The owners of NAD spaces' ranges: a pod's namespace must be admitted to every range its
   * whereabouts config, or its `ferry` config's ranges (not pools), and its static `ips` take
   * addresses of (code 7 otherwise).
   */
  owners?: SpaceOwners;
}

/**
 * Serves `"type": "whereabouts"` IPAM natively.
 *
 * @example
 * ```ts
 * const native = new NativeNadIpam(() => NadNetworkIpam.open({ nodeName, api, stateDir,
 *   releaseAfterMs: 300_000, logger }));
 * if (native.serves(conf)) result = await native.add({ conf, key, args });
 * ```
 */
export class NativeNadIpam {
  readonly #opener: () => Promise<NadNetworkIpam>;
  readonly #o: NativeNadIpamOptions;
  #ipam?: Promise<NadNetworkIpam>;
  #open?: NadNetworkIpam;

  /**
   * `open` opens the node's NAD IPAM; it is called once, at the first use. Without `options`
   * whereabouts configs are served (and `ferry` configs find no pool).
   */
  constructor(open: () => Promise<NadNetworkIpam>, options?: NativeNadIpamOptions) {
    this.#opener = open;
    this.#o = options ?? { whereabouts: true };
  }

  /** The node's NAD IPAM (opened at the first call; a failed open is tried again next time). */
  ipam(): Promise<NadNetworkIpam> {
    this.#ipam ??= this.#opener().then((ipam) => this.#open = ipam).catch((e) => {
      this.#ipam = undefined;
      throw new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        "the cluster-wide IPAM of NAD networks is not available yet",
        e instanceof Error ? e.message : String(e),
      );
    });
    return this.#ipam;
  }

  /** Writes what is pending (until `signal` aborts) and stops; nothing to do if never opened. */
  async close(signal?: AbortSignal): Promise<void> {
    const ipam = await this.#ipam?.catch(() => undefined);
    await ipam?.flush(signal);
    // Not awaited: as the pool IPAM's, a write under way ends with the client.
    void ipam?.close();
  }

  /** The node's NAD IPAM if it is open (or opening), else undefined; never opens it. */
  async opened(): Promise<NadNetworkIpam | undefined> {
    return await this.#ipam?.catch(() => undefined);
  }

  /** What the node's NAD IPAM holds now (see `NadNetworkIpam.held`), once it is open. */
  held(): ReturnType<NadNetworkIpam["held"]> | undefined {
    return this.#open?.held();
  }

  /** The NAD IPAM's counters, once it is open. */
  stats(): NadNetworkIpamStats | undefined {
    return this.#open?.stats();
  }

  /** Whether `conf`'s IPAM is served here. */
  serves(conf: NetConf): boolean {
    return conf.ipam?.type === FERRY_IPAM_TYPE ||
      (this.#o.whereabouts && conf.ipam?.type === "whereabouts");
  }

  /** The configs `conf`'s IPAM is served with: one per address space (a `ferry` pool each). */
  async #configs(conf: NetConf, where: string): Promise<NadIpamConfig[]> {
    if (conf.ipam?.type !== FERRY_IPAM_TYPE) {
      const config = parseWhereabouts(conf.ipam, where);
      const ipam = conf.ipam as { range?: unknown };
      const top = ipam.range !== undefined && ipam.range !== "";
      refuseNetworkPoolOverlap(config.ranges, top, await this.#pools(), where);
      return [config];
    }
    const req = parseFerryIpam(conf.ipam, where);
    const pools = await this.#pools();
    return servedFerryIpam(req, {
      pool: (name) => pools.find((p) => p.metadata?.name === name),
      podRanges: () => this.#o.podRanges?.() ?? [],
      all: () => pools,
    }, where);
  }

  async #pools(): Promise<IpPoolObject[]> {
    try {
      return await (this.#o.pools?.() ?? Promise.resolve([]));
    } catch (e) {
      throw new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        "cannot read the IPPools a NAD names",
        e instanceof Error ? e.message : String(e),
      );
    }
  }

  /**
   * Allocates the attachment's addresses.
   *
   * @throws {CniError} 7 for a bad config, a static address another pod holds or a range of a
   * whereabouts space another namespace owns, 101 when a range is full.
   */
  async add(call: NativeIpamCall): Promise<CniResult> {
    const pod = podRefFromArgs(call.args);
    const where = `${pod ? `pod ${pod.namespace}/${pod.name}: ` : ""}network ${call.conf.name}`;
    const configs = await this.#configs(call.conf, where);
    const rc = isObject(call.conf.runtimeConfig) ? call.conf.runtimeConfig : {};
    const statics = Array.isArray(rc.ips) ? rc.ips.filter((x) => typeof x === "string") : [];
    // Each static address in the space that may hold it (a pool's own), or refused.
    const named = call.conf.ipam?.type === FERRY_IPAM_TYPE
      ? parseFerryIpam(call.conf.ipam, where).pools
      : undefined;
    const pools = statics.length ? await this.#pools() : [];
    const placed = statics.map((s) => staticConfigIndex(s, configs, pools, named, where));
    // A range NADs give (whereabouts', or the `ferry` type's ranges) belongs to the namespace
    // that first used it; a pool's space is the operator's, handed out by naming the pool.
    for (const [i, config] of configs.entries()) {
      if (!pod || !this.#o.owners || config.networkName.startsWith(poolSpaceName(""))) continue;
      await this.#o.owners.admit(config, statics.filter((_, j) => placed[j] === i), pod, where);
    }
    const ipam = await this.ipam();
    const heldBefore = ipam.addressesOf(call.key).length > 0;
    const result: CniResult = { cniVersion: call.conf.cniVersion, ips: [] };
    try {
      // One space per pool; a static address is reserved in the pool whose CIDR holds it.
      for (const [i, config] of configs.entries()) {
        const mine = statics.filter((_, j) => placed[j] === i);
        const r = await ipam.add(config, call.conf.name, call.key, pod, mine, call.addressWait);
        result.ips!.push(...r.ips);
        if (i > 0) continue;
        if (r.routes.length) result.routes = r.routes;
        if (r.dns) result.dns = r.dns as CniResult["dns"];
      }
    } catch (e) {
      // A later pool full: what the earlier ones gave this ADD goes back (a repeated ADD keeps).
      if (configs.length > 1 && !heldBefore) await ipam.release(call.key).catch(() => {});
      throw e;
    }
    return result;
  }

  /** Releases the attachment's addresses (nothing held is not an error). */
  async del(call: NativeIpamCall): Promise<void> {
    await (await this.ipam()).release(call.key);
  }

  /**
   * Confirms the attachment still holds the addresses of `expected`.
   *
   * @throws {CniError} 100 naming an address it no longer holds.
   */
  async check(call: NativeIpamCall, expected: CniResult): Promise<void> {
    const held = new Set((await this.ipam()).addressesOf(call.key));
    const statics = new Set(
      call.conf.ipam?.type === FERRY_IPAM_TYPE
        ? []
        : parseWhereabouts(call.conf.ipam, `network ${call.conf.name}`).addresses.map((a) =>
          a.address
        ),
    );
    for (const ip of expected.ips ?? []) {
      if (statics.has(ip.address)) continue;
      const addr = ip.address.split("/")[0];
      if (!held.has(addr)) {
        throw new CniError(
          CNI_ERROR.CHECK_MISMATCH,
          `network ${call.conf.name}: ${addr} is no longer held by ${call.key.containerId}/${call.key.ifname}`,
        );
      }
    }
  }
}
