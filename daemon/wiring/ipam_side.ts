/**
 * Where the default network's addresses come from, built from the daemon's config: the fixed
 * ranges of `local` mode, and the opener of pool IPAM (blocks of Ferry's IPPools) that the
 * cluster controller calls once the node turns out to take its ranges from pools.
 *
 * @module
 */
import { getLogger } from "@logtape/logtape";
import type { DaemonConfig } from "../config/config.ts";
import { ConfigError } from "../config/config.ts";
import type { KubeSide } from "./kube_side.ts";
import { CLAIM_LEASE, kubeBlockApi } from "../ipam/pool_api.ts";
import type { Plumber } from "../net/plumber.ts";
import type { AttachmentStore } from "../records/attachment_store.ts";
import type { NetworkRange } from "../ipam/network_range.ts";
import type { FamilyAllocator } from "../ipam/allocator.ts";
import { BlockIpam } from "../ipam/block_ipam.ts";
import { parseCidr } from "../ipam/cidr.ts";
import { defaultRange } from "../ipam/local_pool.ts";

/**
 * The default network's ranges in `local` IPAM mode: `subnet`, and `subnet6` for dual stack.
 * Throws a {@link ConfigError} for ranges that cannot serve.
 *
 * @example
 * ```ts
 * const ranges = localRanges(config); // [{ subnet: "10.244.0.0/24", range }]
 * ```
 */
export function localRanges(config: DaemonConfig): NetworkRange[] {
  const { network } = config;
  let ranges: NetworkRange[];
  try {
    ranges = [
      {
        subnet: network.subnet,
        range: defaultRange(parseCidr(network.subnet), {
          start: network.rangeStart,
          end: network.rangeEnd,
          gateway: network.gateway,
        }),
      },
    ];
    if (network.subnet6) {
      ranges.push({ subnet: network.subnet6, range: defaultRange(parseCidr(network.subnet6)) });
    }
  } catch (e) {
    throw new ConfigError(`invalid network: ${e instanceof Error ? e.message : e}`);
  }
  if (ranges.length === 2) {
    const [a, b] = ranges.map((r) => r.range.subnet.network.family);
    if (a !== 4 || b !== 6) {
      throw new ConfigError("invalid network: subnet must be IPv4 and subnet6 IPv6 for dual stack");
    }
  }
  return ranges;
}

/** Pool IPAM, opened on demand. */
export interface PoolIpam {
  /** Opens the node's blocks (their gateways on the bridge at `mtu`); its allocators. */
  open(mtu: number): Promise<FamilyAllocator[]>;
  /** The open pool IPAM, once opened. */
  current(): BlockIpam | undefined;
}

/**
 * The opener of pool IPAM for this node, when the Kubernetes side watches pools (`ipam.mode`
 * pool or auto); undefined otherwise.
 *
 * @example
 * ```ts
 * const pool = poolIpam({ config, kube, plumber, store });
 * const allocators = await pool?.open(1500);
 * ```
 */
export function poolIpam(deps: {
  config: DaemonConfig;
  kube?: KubeSide;
  plumber: Plumber;
  store: AttachmentStore;
}): PoolIpam | undefined {
  const { config, kube, plumber, store } = deps;
  const view = kube?.pools;
  if (!kube || !view) return undefined;
  let ipam: BlockIpam | undefined;
  return {
    current: () => ipam,
    async open(mtu) {
      ipam = await BlockIpam.open({
        nodeName: config.nodeName,
        poolNames: config.ipam.pools,
        api: kubeBlockApi(kube.client, {
          namespace: config.gc.leaseNamespace,
          name: CLAIM_LEASE.name,
        }),
        view,
        stateDir: config.stateDir,
        gateways: {
          add: (cidr) =>
            plumber.ensureBridge({ name: config.network.bridge, mtu, gateways: [cidr] }),
          remove: (cidr) => plumber.removeBridgeAddress(config.network.bridge, cidr),
        },
        podOf: (owner) => store.get(owner)?.pod,
        releaseAfterMs: config.ipam.blockReleaseSeconds * 1000,
        reuseDelayMs: config.ipam.reuseDelaySeconds * 1000,
        logger: getLogger(["ferry", "ipam"]),
      });
      return ipam.allocators();
    },
  };
}
