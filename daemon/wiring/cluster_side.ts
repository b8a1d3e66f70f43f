/**
 * The daemon's cluster side, built from its config: the node's identity (one daemon per node
 * name, in every mode that takes ranges from the cluster) and the controller that opens the
 * default network on the node's ranges and keeps routes, the overlay and masquerade in step with
 * the cluster's nodes.
 *
 * @module
 */
import { getLogger } from "@logtape/logtape";
import type { DaemonConfig } from "../config/config.ts";
import type { KubeSide } from "./kube_side.ts";
import { kubeLeaseApi } from "../k8s/lease_api.ts";
import type { Plumbing } from "./plumbing_side.ts";
import type { DefaultNetwork } from "../service/default_network.ts";
import type { PoolIpam } from "./ipam_side.ts";
import { ClusterController } from "../cluster/controller.ts";
import { NftRunner } from "../cluster/masquerade.ts";
import { NetlinkRouteTable } from "../cluster/netlink_route_table.ts";
import { NetlinkVxlanEntries } from "../cluster/netlink_vxlan_entries.ts";
import { NodeIdentity, nodeLeaseName } from "../cluster/node_identity.ts";
import { IpRouteTable } from "../cluster/route_table.ts";
import { IpVxlanEntries, VxlanDevice } from "../cluster/vxlan.ts";

/**
 * How long the node identity Lease lasts without renewal: a daemon whose node's state was lost
 * waits this long after the last one stopped before it takes the node over.
 */
export const NODE_IDENTITY_LEASE_MS = 60_000;

/** What the cluster side is built from. */
export interface ClusterSideDeps {
  /** The daemon's config. */
  config: DaemonConfig;
  /** The default network the controller opens and holds back. */
  network: DefaultNetwork;
  /** The Kubernetes side (none standalone). */
  kube?: KubeSide;
  /** The kernel side. */
  plumbing: Plumbing;
  /** Pool IPAM's opener, in pool or auto mode. */
  pool?: PoolIpam;
  /** Called, with why, when the daemon must start anew (its node's podCIDRs changed). */
  rangesChanged(why: string): void;
}

/** The cluster side of a daemon. */
export interface ClusterSide {
  /** The controller (started). */
  controller: ClusterController;
  /** The node's identity, in the modes that take ranges from the cluster. */
  identity?: NodeIdentity;
}

/**
 * How often the routes to other nodes' pods (and the overlay's entries) are compared with the
 * kernel's even when no node changed: one route list, and what is missing is put back.
 */
export const ROUTES_RESYNC_MS = 30_000;

/**
 * Takes the node's identity (when ranges come from the cluster) and starts the controller.
 *
 * @example
 * ```ts
 * const { controller, identity } = await clusterSide({ config, network, kube, plumbing, pool,
 *   rangesChanged: (why) => restart(why) });
 * ```
 */
export async function clusterSide(deps: ClusterSideDeps): Promise<ClusterSide> {
  const { config, network, kube, plumbing, pool } = deps;
  const { ip, libc } = plumbing;
  let controller: ClusterController | undefined;
  const identity = kube && config.ipam.mode !== "local"
    ? await NodeIdentity.start({
      nodeName: config.nodeName,
      stateDir: config.stateDir,
      lease: kubeLeaseApi(kube.client, config.gc.leaseNamespace, nodeLeaseName(config.nodeName)),
      leaseName: `${config.gc.leaseNamespace}/${nodeLeaseName(config.nodeName)}`,
      durationMs: NODE_IDENTITY_LEASE_MS,
      onChange: (id) => {
        network.holdBack(id.reason, "identity");
        controller?.kick();
      },
      logger: getLogger(["ferry", "daemon"]),
    })
    : undefined;
  try {
    controller = new ClusterController({
      identity,
      resyncMs: ROUTES_RESYNC_MS,
      nodesSynced: kube ? () => kube.watcher.synced : undefined,
      rangesChanged: deps.rangesChanged,
      poolEvent: kube
        ? (obj, type, reason, message) =>
          void kube.event(
            {
              kind: "IPPool",
              apiVersion: "ferry.dev/v1",
              name: obj.metadata?.name ?? "",
              uid: obj.metadata?.uid,
            },
            type,
            reason,
            message,
          ).catch(() => {})
        : undefined,
      // A Node's Events are found by `kubectl describe node` under its name as UID.
      nodeEvent: kube
        ? (node, type, reason, message) =>
          void kube.event(
            { kind: "Node", apiVersion: "v1", name: node, uid: node },
            type,
            reason,
            message,
          )
            .catch(() => {})
        : undefined,
      config,
      network,
      nodes: kube?.nodes,
      pools: kube?.pools,
      poolWatch: kube?.poolWatch,
      openPool: pool?.open,
      routes: libc ? new NetlinkRouteTable(libc) : new IpRouteTable(ip),
      nft: new NftRunner(),
      vxlan: config.routing.mode === "vxlan"
        ? new VxlanDevice(
          ip,
          config.routing.vxlan,
          libc ? new NetlinkVxlanEntries(libc) : new IpVxlanEntries(ip),
        )
        : undefined,
      publishVtep: kube?.publishVtep,
      logger: getLogger(["ferry", "cluster"]),
    });
    controller.start();
  } catch (e) {
    identity?.stop();
    throw e;
  }
  return { controller, identity };
}
