/**
 * Keeps this node in line with the cluster: opens the default network when the node's podCIDRs
 * appear (`ipam.mode: kubernetes`), keeps a route to every other node's pod ranges (`routing.mode:
 * host-gw`), and keeps the masquerade table for this node's pod ranges. Node changes only mark
 * the state dirty; one sync at a time reads the current nodes and reconciles everything, so a
 * burst of changes costs one sync, and a sync that fails is tried again on the next change or
 * resync. Never on the CNI request path.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { DaemonConfig } from "../config.ts";
import { type DefaultNetwork, rangesOf } from "../default_network.ts";
import { masqueradeRuleset, type Nft } from "./masquerade.ts";
import type { ClusterNode, NodeMap, Vtep } from "./nodes.ts";
import { overlayAddress, ownVtep, VXLAN_OVERHEAD, type VxlanDevice, vxlanPlan } from "./vxlan.ts";
import type { RouteTable } from "./route_table.ts";
import { hostGwRoutes, type NodeRoute, routeChanges } from "./routes.ts";

/** What the controller needs. */
export interface ClusterControllerDeps {
  /** The daemon's configuration (node name, modes, masquerade settings). */
  config: DaemonConfig;
  /** The default network it opens (kubernetes IPAM) and whose ranges it masquerades. */
  network: DefaultNetwork;
  /** The nodes, when a node watch runs. */
  nodes?: NodeMap;
  /** Ferry's routes. */
  routes: RouteTable;
  /** Ferry's nftables table. */
  nft: Nft;
  /** The VXLAN device (`routing.mode: vxlan`). */
  vxlan?: VxlanDevice;
  /** Publishes this node's VXLAN endpoint on its Node object. */
  publishVtep?: (vtep: Vtep) => Promise<void>;
  /** Where to log. */
  logger: Logger;
}

/** What the controller has done, for `/v1/stats`. */
export interface ClusterStats {
  /** Syncs run. */
  syncs: number;
  /** Routes to other nodes now in place. */
  routes: number;
  /** Node ranges that cannot be routed (no address of that family). */
  unroutable: string[];
  /** Whether the masquerade table is in place. */
  masquerading: boolean;
  /** The last sync's failure, if it failed. */
  lastError?: string;
}

/**
 * The controller.
 *
 * @example
 * ```ts
 * const cluster = new ClusterController({ config, network, nodes, routes, nft, logger });
 * cluster.start();
 * ```
 */
export class ClusterController {
  readonly #d: ClusterControllerDeps;
  readonly #stats: ClusterStats = { syncs: 0, routes: 0, unroutable: [], masquerading: false };
  #running?: Promise<void>;
  #dirty = false;
  #stopped = false;
  #ruleset?: string;
  #unsubscribe?: () => void;
  #vtep?: string;

  /** Creates the controller. */
  constructor(deps: ClusterControllerDeps) {
    this.#d = deps;
  }

  /** Subscribes to node changes and runs the first sync. */
  start(): void {
    this.#unsubscribe = this.#d.nodes?.onChange(() => this.kick());
    this.kick();
  }

  /** Stops reacting (routes and rules stay: running pods keep their connectivity). */
  stop(): void {
    this.#stopped = true;
    this.#unsubscribe?.();
  }

  /** A copy of the counters. */
  stats(): ClusterStats {
    return { ...this.#stats, unroutable: [...this.#stats.unroutable] };
  }

  /** Marks the state dirty; a sync runs (after the one running, if any). */
  kick(): void {
    this.#dirty = true;
    this.#running ??= this.#loop().finally(() => (this.#running = undefined));
  }

  /** Settles when no sync is running or pending (tests). */
  async idle(): Promise<void> {
    while (this.#running) await this.#running;
  }

  async #loop(): Promise<void> {
    while (this.#dirty && !this.#stopped) {
      this.#dirty = false;
      try {
        await this.#sync();
        this.#stats.lastError = undefined;
      } catch (e) {
        this.#stats.lastError = e instanceof Error ? e.message : String(e);
        this.#d.logger.error("reconciling routes and masquerade failed: {error}", {
          error: this.#stats.lastError,
        });
      }
      this.#stats.syncs++;
    }
  }

  async #sync(): Promise<void> {
    const { config, network, nodes, logger } = this.#d;
    const self = nodes?.get(config.nodeName);
    if (config.ipam.mode === "kubernetes" && !network.current && self?.podCIDRs.length) {
      const mtu = await this.#podMtu(self);
      logger.info("node {node} has podCIDRs {cidrs}; opening the default network (MTU {mtu})", {
        node: config.nodeName,
        cidrs: self.podCIDRs.join(", "),
        mtu,
      });
      await network.open(rangesOf(self.podCIDRs), mtu);
    }
    if (config.routing.mode === "vxlan" && nodes && self && network.current) {
      await this.#syncVxlan(self, nodes);
    }
    if (config.routing.mode === "host-gw" && nodes) {
      const { routes, unroutable } = hostGwRoutes(nodes.list(), config.nodeName);
      await this.#setRoutes(routes, unroutable);
    }
    const own = network.ranges.map((r) => r.subnet);
    if (config.masquerade.enabled && own.length) {
      const podRanges = nodes?.list().flatMap((n) => n.podCIDRs) ?? [];
      const ruleset = masqueradeRuleset(config.masquerade.table, own, [
        ...own,
        ...podRanges,
        ...config.masquerade.nonMasqueradeCIDRs,
      ]);
      if (ruleset !== this.#ruleset) {
        await this.#d.nft.apply(ruleset);
        this.#ruleset = ruleset;
        this.#stats.masquerading = true;
        logger.info("masquerade table inet {table} set for {own}", {
          table: config.masquerade.table,
          own: own.join(", "),
        });
      }
    }
  }

  /**
   * The pods' MTU: the configured one, lowered for the overlay's overhead below the underlay's
   * MTU in vxlan mode.
   */
  async #podMtu(self: ClusterNode): Promise<number> {
    const { config, vxlan, logger } = this.#d;
    const configured = config.network.mtu;
    const local = self.internalIPs.find((ip) => !ip.includes(":"));
    if (config.routing.mode !== "vxlan" || !vxlan || !local) return configured;
    const underlay = await vxlan.underlayMtu(local);
    if (underlay === undefined) return configured;
    const fits = underlay - VXLAN_OVERHEAD;
    if (fits < configured) {
      logger.info("pod MTU {mtu}: the underlay's {underlay} less {overhead} for VXLAN", {
        mtu: fits,
        underlay,
        overhead: VXLAN_OVERHEAD,
      });
    }
    return Math.min(configured, fits);
  }

  async #syncVxlan(self: ClusterNode, nodes: NodeMap): Promise<void> {
    const { config, network, vxlan, publishVtep, logger } = this.#d;
    const local = self.internalIPs.find((ip) => !ip.includes(":"));
    const own = network.ranges.find((r) => !r.subnet.includes(":"));
    if (!vxlan || !local || !own) {
      throw new Error(`vxlan needs an IPv4 InternalIP and an IPv4 range on node ${self.name}`);
    }
    const vtep = ownVtep(self.name, local);
    if (this.#vtep !== `${vtep.mac}@${vtep.ip}`) {
      await vxlan.ensure(local, overlayAddress(own.subnet), network.current!.mtu, vtep.mac);
      this.#vtep = `${vtep.mac}@${vtep.ip}`;
    }
    if (self.vtep?.mac !== vtep.mac || self.vtep?.ip !== vtep.ip) {
      await publishVtep?.(vtep);
      logger.info("published this node's VXLAN endpoint {mac} at {ip}", { ...vtep });
    }
    const { routes, peers, unroutable } = vxlanPlan(nodes.list(), config.nodeName);
    await vxlan.apply(peers, await vxlan.neighbours());
    const device = config.routing.vxlan.device;
    await this.#setRoutes(routes.map((r) => ({ ...r, dev: device })), unroutable);
  }

  /**
   * Brings Ferry's routes in line with `routes` (replacing new or moved ones, removing those of
   * vanished nodes), and reports ranges it cannot route when that list changes.
   */
  async #setRoutes(routes: NodeRoute[], unroutable: string[]): Promise<void> {
    const { logger } = this.#d;
    const { replace, remove } = routeChanges(await this.#d.routes.list(), routes);
    if (replace.length || remove.length) {
      await this.#d.routes.apply(replace, remove);
      logger.info("routes to other nodes: {set} set, {removed} removed ({total} in all)", {
        set: replace.map((r) =>
          `${r.dst} via ${r.via}${r.dev ? ` dev ${r.dev}` : ""}`
        ).join(", ") ||
          "none",
        removed: remove.map((r) => r.dst).join(", ") || "none",
        total: routes.length,
      });
    }
    if (unroutable.join() !== this.#stats.unroutable.join() && unroutable.length) {
      logger.warn("cannot route these ranges: {ranges}", { ranges: unroutable.join(", ") });
    }
    this.#stats.routes = routes.length;
    this.#stats.unroutable = unroutable;
  }
}
