/**
 * The daemon's multi-network side, built from its config: the enabled multi-VIF drivers
 * (`multiVifDrivers`) with the NAD cache, the guard that keeps tenants' NADs off Ferry's devices
 * and ranges (and their macvlans off the node's uplink's traffic and others' MACs), and the move
 * of a pod's default route for `default-route` selections.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { DaemonConfig } from "../config/config.ts";
import type { KubeSide } from "./kube_side.ts";
import type { IpRunner } from "../net/ip_runner.ts";
import type { CniServiceDeps } from "../service/cni_service.ts";
import { type MultiVifDriver, NoopDriver, NpwgDriver } from "../multivif/drivers.ts";
import { SystemNodeDevices } from "../multivif/node_devices.ts";
import { SystemNodeLinks } from "../multivif/node_links.ts";
import { podMacsOf } from "../multivif/parent_guard.ts";
import type { Attachment } from "../records/attachment_store.ts";

/** What the multi-network side is built from. */
export interface MultiVifSideDeps {
  /** The daemon's config. */
  config: DaemonConfig;
  /** The Kubernetes side: its NAD cache and the cluster's pod ranges. */
  kube: KubeSide;
  /** The default network's ranges on this node now. */
  localSubnets: () => string[];
  /** iproute2, for moving a pod's default route. */
  ip: IpRunner;
  /** The IPPools for networks now (no NAD but a `ferry` one naming it may use their addresses). */
  networkPools?: () => Promise<{ name: string; cidrs: string[] }[]>;
  /** The node's attachment records now (the MACs of other pods' interfaces). */
  attachments?: () => Attachment[];
}

/**
 * The ranges no NAD may overlap: this node's, every pool's, every node's podCIDRs, local mode's
 * subnets. Before the node's watches have delivered their first lists the other nodes' and pools'
 * ranges are not known, so a NAD cannot be checked yet: code 11, and the runtime tries again.
 *
 * @throws {CniError} code 11 before the watches have synced.
 * @example
 * ```ts
 * ferryPodRanges(kube, config, () => network.subnets()); // ["10.244.1.0/24", ...]
 * ```
 */
export function ferryPodRanges(
  kube: Pick<KubeSide, "watcher" | "pools" | "nodes">,
  config: DaemonConfig,
  localSubnets: () => string[],
): string[] {
  if (!kube.watcher.synced) {
    throw new CniError(
      CNI_ERROR.TRY_AGAIN_LATER,
      "Ferry's pod ranges are not all known yet (the node's watches have not listed): " +
        "a NetworkAttachmentDefinition is not checked, nor plugged, before they are",
    );
  }
  return [
    ...localSubnets(),
    ...(kube.pools?.poolCidrs() ?? []),
    ...(kube.nodes?.list().flatMap((n) => n.podCIDRs) ?? []),
    ...(config.ipam.mode === "local"
      ? [config.network.subnet, ...(config.network.subnet6 ? [config.network.subnet6] : [])]
      : []),
  ];
}

/**
 * The CNI service's multi-network collaborators.
 *
 * @example
 * ```ts
 * const multiVif = multiVifSide({ config, kube, localSubnets: () => network.subnets(), ip });
 * ```
 */
export function multiVifSide(deps: MultiVifSideDeps): NonNullable<CniServiceDeps["multiVif"]> {
  const { config, kube, ip } = deps;
  const podRanges = () => ferryPodRanges(kube, config, deps.localSubnets);
  const table: Record<DaemonConfig["multiVifDrivers"][number], () => MultiVifDriver> = {
    npwg: () =>
      new NpwgDriver({
        nads: {
          waitFor(namespace: string, name: string, signal: AbortSignal) {
            kube.nads.watch();
            return kube.nads.cache.waitFor(namespace, name, signal);
          },
        },
        allowCrossNamespace: config.multiNetwork.allowCrossNamespace,
        interfacePrefix: config.multiNetwork.interfacePrefix,
        configDir: config.multiNetwork.configDir,
        guard: {
          allowedTypes: config.multiNetwork.allowedTypes,
          devices: [config.network.bridge, config.routing.vxlan.device],
          node: new SystemNodeDevices(
            ip,
            [config.network.bridge, config.routing.vxlan.device],
            config.network.bridge,
          ),
          ranges: podRanges,
          stateDir: config.stateDir,
          ...(deps.networkPools ? { networkPools: deps.networkPools } : {}),
          parents: {
            links: new SystemNodeLinks(ip),
            ferryDevices: [config.network.bridge, config.routing.vxlan.device],
            allow: {
              passthru: config.multiNetwork.passthruParents,
              anyMac: config.multiNetwork.anyMacParents,
            },
            podMacs: () => podMacsOf(deps.attachments?.() ?? []),
          },
        },
        readFile: (path) =>
          Deno.readTextFile(path).catch((e) => {
            if (e instanceof Deno.errors.NotFound) return undefined;
            throw e;
          }),
      }),
    noop: () => new NoopDriver(),
  };
  return {
    drivers: config.multiVifDrivers.map((name) => table[name]()),
    waitMs: config.podWaitSeconds * 1000,
    // default-route: the pod's default route of that family, moved to `ifname`.
    setDefaultRoute: async (netns: string, ifname: string, gateway: string) => {
      const family = gateway.includes(":") ? 6 : 4;
      try {
        await ip.batch(["route flush exact default"], { netns, family });
        await ip.batch([`route add default via ${gateway} dev ${ifname}`], { netns, family });
      } catch (e) {
        throw new CniError(
          CNI_ERROR.IO_FAILURE,
          `cannot move the default route to ${ifname} via ${gateway}`,
          String(e),
        );
      }
    },
  };
}
