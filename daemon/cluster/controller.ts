/**
 * Keeps this node in line with the cluster: opens the default network when the node's podCIDRs
 * appear (`ipam.mode: kubernetes`) or once an IP pool exists (`pool`; `auto` picks one of the two
 * by whether the node has podCIDRs), keeps a route to every other node's pod ranges (its
 * podCIDRs, or its blocks in pool mode; `routing.mode: host-gw` or `vxlan`), and keeps the
 * masquerade table for this node's pod ranges. Node, pool and block changes only mark the state
 * dirty; one sync at a time reads the current state and reconciles everything, so a burst of
 * changes costs one sync. Each route (and each VXLAN peer's entries) is set on its own, and the
 * masquerade table apart from them: a range the kernel will not route (a node whose address is
 * not on this node's segment) is reported (`unroutable` in the stats, a log line, a Warning Event
 * on its Node, a metric; readiness says degraded) while every other route and masquerade stay in
 * place, and a sync with such failures is tried again with backoff, as well as on every change.
 * Never on the CNI request path.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { type NetworkRange, rangesOf } from "../ipam/network_range.ts";
import { masqueradeRuleset, type Nft } from "./masquerade.ts";
import type { ClusterNode, NodeMap, Vtep } from "./nodes.ts";
import type { PoolMap } from "../ipam/pool_map.ts";
import { DirtyLoop } from "../runtime/dirty_loop.ts";
import type { FamilyAllocator } from "../ipam/allocator.ts";
import { type IpPoolObject, parsePool } from "../ipam/ip_pools.ts";
import { overlayAddress, ownVtep, VXLAN_OVERHEAD, type VxlanDevice, vxlanPlan } from "./vxlan.ts";
import type { RouteTable } from "./route_table.ts";
import { hostGwRoutes, type NodeRoute, routeChanges } from "./routes.ts";
import { sleep } from "../runtime/sleep.ts";
import {
  Backoff,
  ROUTE_FAILED_REASON,
  type UnroutableRange,
  UnroutableReport,
} from "./unroutable.ts";

/**
 * The default network as the controller drives it (`service/default_network.ts`'s
 * `DefaultNetwork`): opened on the node's ranges or its pool blocks, held back while the node is
 * not its own, and asked what it hands out.
 */
export interface ControlledNetwork {
  /** The network once open: the pods' MTU. */
  readonly current: { readonly mtu: number } | undefined;
  /** The subnets addresses come from now (empty before it opens). */
  subnets(): string[];
  /** Holds ADD back for `reason` (per `cause`); `undefined` lets that cause go. */
  holdBack(reason: string | undefined, cause?: string): void;
  /** Says what the network waits for while it is not open. */
  waitFor(reason: string): void;
  /** Opens it on fixed ranges with pod interfaces of `mtu`. */
  open(ranges: NetworkRange[], mtu?: number): Promise<void>;
  /** Opens it on the allocators `make` returns (pool IPAM). */
  openWith(make: (mtu: number) => Promise<FamilyAllocator[]>, mtu?: number): Promise<void>;
}

/**
 * The settings the controller works to: the daemon's config has this shape, and the composition
 * root hands it in.
 */
export interface ClusterSettings {
  /** This node's name. */
  nodeName: string;
  /** Where the node's state is kept (pool mode's block directories). */
  stateDir: string;
  /** Where the default network's ranges come from, and the IPPools pool mode claims blocks of. */
  ipam: { mode: "local" | "kubernetes" | "pool" | "auto"; pools: string[] };
  /** The pods' MTU as configured (VXLAN takes its overhead off it). */
  network: { mtu: number };
  /** How other nodes' pods are reached, and the overlay's device. */
  routing: { mode: "none" | "host-gw" | "vxlan"; vxlan: { device: string } };
  /** Masquerade of traffic leaving the pod ranges: on or off, its table, the ranges it spares. */
  masquerade: { enabled: boolean; table: string; nonMasqueradeCIDRs: string[] };
}

/** What the controller needs. */
export interface ClusterControllerDeps {
  /** The settings it works to (node name, modes, masquerade settings). */
  config: ClusterSettings;
  /** The default network it opens (kubernetes IPAM) and whose ranges it masquerades. */
  network: ControlledNetwork;
  /** The nodes, when a node watch runs. */
  nodes?: NodeMap;
  /** The IP pools and blocks, fed by their watches (`ipam.mode` pool or auto). */
  pools?: PoolMap;
  /** Starts the pool watches (auto mode, a node without podCIDRs) and stops them (podCIDRs). */
  poolWatch?: { start(): void; stop(): Promise<void> };
  /** Whether the node watch has delivered its first list (a node missing from it is gone). */
  nodesSynced?: () => boolean;
  /** Called once when this node's podCIDRs change under a running daemon (it must start anew). */
  rangesChanged?: (why: string) => void;
  /** Records an Event on a pool (best effort). */
  poolEvent?: (
    pool: IpPoolObject,
    type: "Normal" | "Warning",
    reason: string,
    message: string,
  ) => void;
  /** Whether this daemon holds its node's identity (see `node_identity.ts`); none: always. */
  identity?: { readonly held: boolean };
  /** Opens this node's share of the pools (pool IPAM) and returns its allocators. */
  openPool?: (mtu: number) => Promise<FamilyAllocator[]>;
  /** Ferry's routes. */
  routes: RouteTable;
  /** Ferry's nftables table. */
  nft: Nft;
  /** The VXLAN device (`routing.mode: vxlan`). */
  vxlan?: VxlanDevice;
  /** Publishes this node's VXLAN endpoint on its Node object. */
  publishVtep?: (vtep: Vtep) => Promise<void>;
  /** Records an Event on a Node (best effort): why a range of it cannot be routed. */
  nodeEvent?: (node: string, type: "Normal" | "Warning", reason: string, message: string) => void;
  /** Backoff of the retries of a sync with failures (default 1 s doubling to 60 s). */
  retry?: { initialMs: number; maxMs: number };
  /**
   * A sync this often even when nothing changed (ms; none or 0: only on changes): what was
   * removed by hand (a route to another node's pods) is put back, and `/v1/stats` counts again
   * what is in place.
   */
  resyncMs?: number;
  /** Where to log. */
  logger: Logger;
}

/** What the controller has done, for `/v1/stats`. */
export interface ClusterStats {
  /** Syncs run. */
  syncs: number;
  /** Routes to other nodes now in place. */
  routes: number;
  /**
   * Other nodes' ranges without a working route, with why: no address of the range's family, no
   * VXLAN endpoint yet, or the kernel's refusal of the route or overlay entries (tried again).
   */
  unroutable: UnroutableRange[];
  /** Set while some ranges cannot be routed: ready, but not every node's pods are reachable. */
  degraded?: string;
  /** While a retry is pending (refused ranges, or a failed sync): its delay (backoff), in ms. */
  retryDelayMs?: number;
  /** Whether the masquerade table is in place. */
  masquerading: boolean;
  /** The last sync's failure, if it failed. */
  lastError?: string;
  /** The IPAM mode in use (`auto` resolved), once decided. */
  ipamMode?: "local" | "kubernetes" | "pool";
}

/** How often a controller whose node or pool watches have not listed yet looks again. */
const LISTS_POLL_MS = 1000;

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
  readonly #loop = new DirtyLoop(() => this.#pass(), () => !this.#stopped);
  #stopped = false;
  #ruleset?: string;
  /** The periodic re-check is due: whether the masquerade table is still there is looked at. */
  #recheckMasquerade = false;
  #unsubscribe?: () => void;
  #vtep?: string;
  #mode?: "local" | "kubernetes" | "pool";
  readonly #poolReported = new Map<string, string>();
  /** The podCIDRs the default network opened on (kubernetes IPAM). */
  #openedOn?: string[];
  #nodeMissing = false;
  #rangesChangeSaid = false;
  #waitLogged?: string;
  readonly #report = new UnroutableReport();
  readonly #backoff: Backoff;
  readonly #closing = new AbortController();
  /** Whether the last pass found the node or pool watches not listed yet (routes and masquerade wait). */
  #waitingForLists = false;
  /** What this pass found unroutable, by routing step; undefined when the step did not run. */
  #unroutable?: UnroutableRange[];

  /** Creates the controller. */
  constructor(deps: ClusterControllerDeps) {
    this.#d = deps;
    this.#backoff = new Backoff(deps.retry?.initialMs ?? 1000, deps.retry?.maxMs ?? 60_000);
  }

  /** Subscribes to node changes and runs the first sync. */
  start(): void {
    const offNodes = this.#d.nodes?.onChange(() => this.kick());
    const offPools = this.#d.pools?.onChange(() => this.kick());
    this.#unsubscribe = () => {
      offNodes?.();
      offPools?.();
    };
    const mode = this.#d.config.ipam.mode;
    if (mode !== "auto") this.#stats.ipamMode = this.#mode = mode;
    if (this.#d.resyncMs) {
      const timer = setInterval(() => {
        this.#recheckMasquerade = true;
        this.kick();
      }, this.#d.resyncMs);
      Deno.unrefTimer(timer);
      this.#closing.signal.addEventListener("abort", () => clearInterval(timer));
    }
    this.kick();
  }

  /** Stops reacting (routes and rules stay: running pods keep their connectivity). */
  stop(): void {
    this.#stopped = true;
    this.#closing.abort();
    this.#unsubscribe?.();
    // An nft still running is killed (its transaction is all or nothing): none outlives the daemon.
    this.#d.nft.close?.();
  }

  /** A copy of the counters. */
  stats(): ClusterStats {
    return { ...this.#stats, unroutable: this.#stats.unroutable.map((u) => ({ ...u })) };
  }

  /** Marks the state dirty; a sync runs (after the one running, if any). */
  kick(): void {
    this.#loop.kick();
  }

  /** Settles when no sync is running or pending (tests). */
  idle(): Promise<void> {
    return this.#loop.idle();
  }

  /**
   * One sync; a failure, a range the kernel refused, or watches not listed yet (routes and
   * masquerade wait for them) is kept for the stats and tried again with backoff (and on the
   * next change).
   */
  async #pass(): Promise<void> {
    const before = this.#stats.lastError;
    this.#unroutable = undefined;
    try {
      await this.#sync();
      this.#stats.lastError = undefined;
    } catch (e) {
      this.#stats.lastError = e instanceof Error ? e.message : String(e);
      if (this.#stats.lastError !== before) {
        this.#d.logger.error("reconciling routes and masquerade failed: {error}", {
          error: this.#stats.lastError,
        });
      }
    }
    if (this.#unroutable) this.#said(this.#unroutable);
    this.#stats.syncs++;
    if (this.#stats.lastError || this.#stats.unroutable.some((u) => u.refused)) this.#retry();
    else {
      this.#backoff.reset();
      // Watches not listed yet: looked at again each second (no backoff: nothing failed).
      if (this.#waitingForLists) this.#retry(LISTS_POLL_MS);
    }
  }

  /**
   * Runs a sync again after `ms`, by default the backoff's delay (one timer at a time; cancelled
   * by stop).
   */
  #retry(ms?: number): void {
    if (this.#stats.retryDelayMs !== undefined || this.#stopped) return;
    ms = this.#stats.retryDelayMs = ms ?? this.#backoff.next();
    void sleep(ms, this.#closing.signal, { unref: true }).then(() => {
      this.#stats.retryDelayMs = undefined;
      if (!this.#stopped) this.kick();
    });
  }

  /** Keeps the unroutable ranges for the stats; logs, and records Events on, what is new. */
  #said(unroutable: UnroutableRange[]): void {
    const { logger, nodeEvent } = this.#d;
    this.#stats.unroutable = unroutable;
    // Degraded: routes the kernel refused (planning's unroutable ranges are the setup's shape).
    const refused = unroutable.filter((u) => u.refused);
    this.#stats.degraded = refused.length
      ? `${refused.length} pod range(s) of other nodes cannot be routed: ${
        refused.slice(0, 3).map((u) => `${u.node || "(stale)"} ${u.dst}: ${u.reason}`).join("; ")
      }${refused.length > 3 ? "; …" : ""}`
      : undefined;
    const news = this.#report.update(unroutable, Date.now());
    for (const u of news.fresh) {
      logger.warn("cannot route {dst} of node {node}{via}: {reason}", {
        dst: u.dst,
        node: u.node || "(none)",
        via: u.via ? ` via ${u.via}` : "",
        reason: u.reason,
      });
    }
    for (const range of news.resolved) {
      logger.info("route to {range} in place again", { range });
    }
    for (const e of news.events) nodeEvent?.(e.node, "Warning", ROUTE_FAILED_REASON, e.message);
  }

  async #sync(): Promise<void> {
    const { config, network, nodes, pools } = this.#d;
    const self = nodes?.get(config.nodeName);
    if (!network.current) await this.#open(self);
    if (this.#mode === "kubernetes" && network.current && this.#d.nodesSynced?.()) {
      this.#checkOwnRanges(self);
    }
    // Routes and masquerade follow the cluster's nodes (and blocks) only once their watches have
    // delivered a first list: before, an empty list would remove every route to the other nodes
    // and masquerade traffic to their pods, a blip in running pods' traffic at every restart.
    const synced = !nodes ||
      ((this.#d.nodesSynced?.() ?? true) && (this.#mode !== "pool" || !!pools?.synced));
    // A watch's first list need not change anything it tells about (the same nodes as before a
    // restart): nothing would kick the next pass, so one is due again shortly.
    this.#waitingForLists = !synced;
    const ranged = synced ? this.#rangedNodes() : undefined;
    // Routing and masquerade apart: masquerade depends only on the ranges, never on a route.
    let failed: unknown;
    try {
      if (config.routing.mode === "vxlan" && ranged && self && network.current) {
        await this.#syncVxlan(self, ranged);
      }
      if (config.routing.mode === "host-gw" && ranged) {
        const { routes, unroutable } = hostGwRoutes(ranged, config.nodeName);
        await this.#setRoutes(routes, unroutable, ranged);
      }
    } catch (e) {
      failed = e;
    }
    await this.#masquerade(ranged, synced);
    if (failed) throw failed;
  }

  /** Keeps the masquerade table for this node's ranges (once the watches have listed). */
  async #masquerade(ranged: ClusterNode[] | undefined, synced: boolean): Promise<void> {
    const { config, network, pools, logger } = this.#d;
    const own = network.subnets();
    if (config.masquerade.enabled && own.length && synced) {
      const podRanges = [
        ...(ranged?.flatMap((n) => n.podCIDRs) ?? []),
        ...(this.#mode === "pool" ? pools?.poolCidrs() ?? [] : []),
      ];
      const ruleset = masqueradeRuleset(config.masquerade.table, own, [
        ...own,
        ...podRanges,
        ...config.masquerade.nonMasqueradeCIDRs,
      ]);
      // At each periodic re-check, a table deleted behind the daemon's back is written again.
      if (ruleset === this.#ruleset && this.#recheckMasquerade && this.#d.nft.listJson) {
        this.#recheckMasquerade = false;
        // A listing that failed (rather than found no table) says nothing: looked at next time.
        const listed = await this.#d.nft.listJson(config.masquerade.table).catch(() => "");
        if (listed === undefined) {
          logger.warn("masquerade table inet {table} is gone (deleted by hand?): written again", {
            table: config.masquerade.table,
          });
          this.#ruleset = undefined;
        }
      }
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
   * The nodes with the pod ranges routes lead to: their podCIDRs, or in pool mode their blocks.
   */
  #rangedNodes(): ClusterNode[] | undefined {
    const { nodes, pools } = this.#d;
    if (!nodes) return undefined;
    if (this.#mode !== "pool" || !pools) return nodes.list();
    const blocks = pools.blocksByNode();
    return nodes.list().map((n) => ({ ...n, podCIDRs: blocks.get(n.name) ?? [] }));
  }

  /** Decides the IPAM mode (`auto`) and opens the default network when it can. */
  async #open(self: ClusterNode | undefined): Promise<void> {
    const { config, network, pools, logger } = this.#d;
    // Nothing of the node's ranges is touched (no block reconciled, adopted or claimed) while
    // another daemon holds the node's identity; the network says why (holdBack).
    if (this.#d.identity && !this.#d.identity.held) return;
    const names = config.ipam.pools;
    // A node that holds blocks opens on them even when its pool is gone (deleted by hand): the
    // pods in them must still be torn down, and DEL releases what the node recorded.
    const holdsBlocks = () =>
      !!pools?.synced &&
      (pools.blocks().some((b) => b.node === config.nodeName) || hasBlockDirs(config.stateDir));
    const poolExists = () => !!pools?.synced && (names.some((n) => pools.pool(n)) || holdsBlocks());
    if (!this.#mode) {
      if (!self) return this.#wait(`node ${config.nodeName} is not in the node watch yet`);
      if (self.podCIDRs.length) {
        this.#mode = "kubernetes";
        await this.#d.poolWatch?.stop();
      } else {
        this.#d.poolWatch?.start();
        if (poolExists()) this.#mode = "pool";
      }
      if (this.#mode) {
        this.#stats.ipamMode = this.#mode;
        logger.info("ipam auto: node {node} {has}; using {mode} mode", {
          node: config.nodeName,
          has: this.#mode === "kubernetes"
            ? `has podCIDRs ${self!.podCIDRs.join(", ")}`
            : `has no podCIDRs and IPPool ${names.join(", ")} exists`,
          mode: this.#mode,
        });
      } else {
        this.#wait(
          `node ${config.nodeName} has no spec.podCIDRs and no IPPool named ${
            names.join(" or ")
          } exists (ipam.mode auto): give the node a podCIDR, or create a pool ` +
            "(deploy/base/ippool-default.yaml)",
        );
        return;
      }
    }
    if (this.#mode === "kubernetes" && self?.podCIDRs.length) {
      const mtu = await this.#podMtu(self);
      logger.info("node {node} has podCIDRs {cidrs}; opening the default network (MTU {mtu})", {
        node: config.nodeName,
        cidrs: self.podCIDRs.join(", "),
        mtu,
      });
      await network.open(rangesOf(self.podCIDRs), mtu);
      this.#openedOn = [...self.podCIDRs].sort();
    } else if (this.#mode === "pool") {
      if (!pools?.synced) return this.#wait("the first lists of IPPools and IPBlocks");
      if (!poolExists()) {
        return this.#wait(
          `no IPPool named ${names.join(" or ")} exists (ipam.mode pool): create one ` +
            "(deploy/base/ippool-default.yaml)",
        );
      }
      // A pool that cannot be used (a block size that does not fit its CIDR, …) is said on the
      // pool (an Event) and, while no configured pool is usable, in readiness and STATUS.
      const broken = this.#brokenPools(names);
      const usable = names.some((n) => pools.pool(n) && !broken.has(n));
      if (!usable && !holdsBlocks()) return this.#wait([...broken.values()].join("; "));
      const mtu = self ? await this.#podMtu(self) : config.network.mtu;
      await network.openWith(this.#d.openPool!, mtu);
      logger.info("pool IPAM open: blocks held {blocks}; new blocks come from IPPool {pools}", {
        blocks: network.subnets().join(", ") || "none yet (claimed at the first ADD)",
        pools: names.join(", "),
      });
    }
  }

  /**
   * Kubernetes IPAM: the node's podCIDRs are its only right to its range. A node gone from the
   * API (deleted, as by `kubectl delete node`) may see its podCIDR given to another node, so ADD is
   * held back until it is registered again; a node registered again with other podCIDRs gets a
   * daemon that starts anew on them (`rangesChanged`), never one still allocating from the old.
   */
  #checkOwnRanges(self: ClusterNode | undefined): void {
    const { config, network, logger } = this.#d;
    if (!self) {
      const why = `node ${config.nodeName} is not in the API (deleted?): its podCIDR may be ` +
        "given to another node, so no pod gets an address here until it is registered again";
      if (!this.#nodeMissing) logger.error("{why}", { why });
      this.#nodeMissing = true;
      network.holdBack(why, "node");
      return;
    }
    const now = [...self.podCIDRs].sort();
    if (this.#openedOn && now.join() !== this.#openedOn.join()) {
      const why = `node ${config.nodeName}'s podCIDRs changed from ${this.#openedOn.join(", ")} ` +
        `to ${now.join(", ") || "none"}; the daemon starts anew on them`;
      network.holdBack(why, "node");
      if (!this.#rangesChangeSaid) {
        this.#rangesChangeSaid = true;
        logger.error("{why}", { why });
        this.#d.rangesChanged?.(why);
      }
      return;
    }
    if (this.#nodeMissing) {
      logger.info("node {node} is registered again with the same podCIDRs", {
        node: config.nodeName,
      });
    }
    this.#nodeMissing = false;
    network.holdBack(undefined, "node");
  }

  /** The configured pools that cannot be used, with why; each reported once per reason. */
  #brokenPools(names: string[]): Map<string, string> {
    const broken = new Map<string, string>();
    for (const name of names) {
      const obj = this.#d.pools?.pool(name);
      if (!obj) continue;
      try {
        parsePool(obj);
      } catch (e) {
        const why = e instanceof Error ? e.message : String(e);
        broken.set(name, why);
        if (this.#poolReported.get(name) === why) continue;
        this.#poolReported.set(name, why);
        this.#d.logger.error("{why}: no block of it can be claimed", { why });
        this.#d.poolEvent?.(
          obj,
          "Warning",
          "InvalidIPPool",
          `${why} (node ${this.#d.config.nodeName})`,
        );
      }
    }
    return broken;
  }

  /** Records (and logs, once per reason) what the default network waits for. */
  #wait(reason: string): void {
    this.#d.network.waitFor(reason);
    if (this.#waitLogged === reason) return;
    this.#waitLogged = reason;
    this.#d.logger.warn("not ready: {why}", { why: reason });
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

  async #syncVxlan(self: ClusterNode, nodes: ClusterNode[]): Promise<void> {
    const { config, network, vxlan, publishVtep, logger } = this.#d;
    const local = self.internalIPs.find((ip) => !ip.includes(":"));
    const own = network.subnets().find((s) => !s.includes(":"));
    if (!vxlan || !local || !own) {
      throw new Error(`vxlan needs an IPv4 InternalIP and an IPv4 range on node ${self.name}`);
    }
    const vtep = ownVtep(self.name, local);
    if (this.#vtep !== `${vtep.mac}@${vtep.ip}`) {
      await vxlan.ensure(local, overlayAddress(own), network.current!.mtu, vtep.mac);
      this.#vtep = `${vtep.mac}@${vtep.ip}`;
    }
    if (self.vtep?.mac !== vtep.mac || self.vtep?.ip !== vtep.ip) {
      await publishVtep?.(vtep);
      logger.info("published this node's VXLAN endpoint {mac} at {ip}", { ...vtep });
    }
    const { routes, peers, unroutable } = vxlanPlan(nodes, config.nodeName);
    // Each peer's entries on their own: one the kernel refuses leaves the others (and its route:
    // harmless without the entries) in place, and is reported with its range.
    const refused = await vxlan.apply(peers, await vxlan.neighbours());
    const rangeOf = new Map(routes.map((r) => [r.via, r.dst]));
    const entries = refused.map((f): UnroutableRange =>
      f.peer
        ? {
          node: ownerOf(nodes, rangeOf.get(f.peer.gateway) ?? ""),
          dst: rangeOf.get(f.peer.gateway) ?? f.peer.gateway,
          via: f.peer.ip,
          reason: f.reason,
          refused: true,
        }
        : { node: "", dst: "", reason: f.reason, refused: true }
    );
    const device = config.routing.vxlan.device;
    await this.#setRoutes(
      routes.map((r) => ({ ...r, dev: device })),
      [...unroutable, ...entries],
      nodes,
    );
  }

  /**
   * Brings Ferry's routes in line with `routes` (replacing new or moved ones, removing those of
   * vanished nodes), each on its own; what the kernel refuses joins `unroutable` for the stats.
   */
  async #setRoutes(
    routes: NodeRoute[],
    unroutable: UnroutableRange[],
    nodes: ClusterNode[],
  ): Promise<void> {
    const { logger } = this.#d;
    const { replace, remove } = routeChanges(await this.#d.routes.list(), routes);
    const refused = replace.length || remove.length
      ? await this.#d.routes.apply(replace, remove)
      : [];
    const failed = new Set(refused.map((f) => f.route.dst));
    const set = replace.filter((r) => !failed.has(r.dst));
    const removed = remove.filter((r) => !failed.has(r.dst));
    if (set.length || removed.length) {
      logger.info("routes to other nodes: {set} set, {removed} removed ({total} in all)", {
        set: set.map((r) => `${r.dst} via ${r.via}${r.dev ? ` dev ${r.dev}` : ""}`).join(", ") ||
          "none",
        removed: removed.map((r) => r.dst).join(", ") || "none",
        total: routes.length - refused.filter((f) => f.op === "replace").length,
      });
    }
    this.#stats.routes = routes.length - refused.filter((f) => f.op === "replace").length;
    this.#unroutable = [
      ...unroutable,
      ...refused.map((f): UnroutableRange => ({
        node: f.op === "replace" ? ownerOf(nodes, f.route.dst) : "",
        dst: f.route.dst,
        via: f.route.via,
        reason: f.op === "replace" ? f.reason : `a stale route could not be removed: ${f.reason}`,
        refused: true,
      })),
    ];
  }
}

/** The name of the node whose pod ranges hold `dst` ("" when none does). */
function ownerOf(nodes: ClusterNode[], dst: string): string {
  return nodes.find((n) => n.podCIDRs.includes(dst))?.name ?? "";
}

/** Whether the node's state holds block directories (pool IPAM's node-local allocations). */
function hasBlockDirs(stateDir: string): boolean {
  try {
    for (const entry of Deno.readDirSync(`${stateDir}/ipam/blocks`)) {
      if (entry.isDirectory) return true;
    }
  } catch { /* none yet */ }
  return false;
}
