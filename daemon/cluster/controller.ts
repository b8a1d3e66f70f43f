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
import type { NodeMap } from "./nodes.ts";
import type { RouteTable } from "./route_table.ts";
import { hostGwRoutes, routeChanges } from "./routes.ts";

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
      logger.info("node {node} has podCIDRs {cidrs}; opening the default network", {
        node: config.nodeName,
        cidrs: self.podCIDRs.join(", "),
      });
      await network.open(rangesOf(self.podCIDRs));
    }
    if (config.routing.mode === "host-gw" && nodes) {
      const { routes, unroutable } = hostGwRoutes(nodes.list(), config.nodeName);
      const live = await this.#d.routes.list();
      const { replace, remove } = routeChanges(live, routes);
      if (replace.length || remove.length) {
        await this.#d.routes.apply(replace, remove);
        logger.info("routes to other nodes: {set} set, {removed} removed ({total} in all)", {
          set: replace.map((r) => `${r.dst} via ${r.via}`).join(", ") || "none",
          removed: remove.map((r) => r.dst).join(", ") || "none",
          total: routes.length,
        });
      }
      if (unroutable.join() !== this.#stats.unroutable.join() && unroutable.length) {
        logger.warn("no address of the range's family to route through: {ranges}", {
          ranges: unroutable.join(", "),
        });
      }
      this.#stats.routes = routes.length;
      this.#stats.unroutable = unroutable;
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
}
