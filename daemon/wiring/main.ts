/**
 * `deno task daemon`: the node daemon, wired in this one place (the composition root,
 * `daemon/wiring/`). Each side is built by its builder beside this file, which chooses that
 * part's collaborators from the config: the kernel (`plumbing_side.ts`), Kubernetes
 * (`kube_side.ts`), IPAM (`ipam_side.ts`), the cluster (`cluster_side.ts`), port security
 * (`portsec_side.ts`), multiple networks (`multivif_side.ts`), garbage collection (`gc_side.ts`)
 * and serving (`server_side.ts`).
 *
 * Usage: `deno task daemon [--config FILE] [--socket PATH] [--node-name NAME] [--kubeconfig FILE] [--state-dir DIR] [--sysctl-dir DIR] [--staged-conflist FILE] [--standalone]`
 *
 * @module
 */
import { getLogger } from "@logtape/logtape";
import { abandonedWork, STOP_MARGIN_SECONDS } from "../daemon.ts";
import { parseDaemonArgs } from "../config/args.ts";
import { type DaemonConfig, loadConfig } from "../config/config.ts";
import type { Daemon, DaemonOverrides, DaemonStats } from "../daemon.ts";
import { clusterSide } from "./cluster_side.ts";
import { gcSide } from "./gc_side.ts";
import { ConflistPublisher } from "../install/conflist_publisher.ts";
import { localRanges, poolIpam } from "./ipam_side.ts";
import { connectKube, type KubeSide } from "./kube_side.ts";
import { ferryPodRanges, multiVifSide } from "./multivif_side.ts";
import { policyProblems } from "../policy/policy_watches.ts";
import { stopRunningPlugins } from "../net/delegate.ts";
import { NetnsGuard } from "../net/netns_guard.ts";
import { ChildSet } from "../runtime/child_set.ts";
import { openPlumbing } from "./plumbing_side.ts";
import { takeCpuPriority } from "../runtime/cpu_priority.ts";
import { IdleTrimmer, mallocTrim } from "../runtime/idle_trim.ts";
import { serverSide } from "./server_side.ts";
import { claimSocketPath } from "../server/socket_server.ts";
import { AttachmentStore } from "../records/attachment_store.ts";
import { CniService } from "../service/cni_service.ts";
import { DefaultNetwork } from "../service/default_network.ts";
import { setupLogging, teardownLogging } from "../telemetry/log.ts";
import { FerryMetrics } from "../telemetry/metrics.ts";
import { PhaseStats } from "../telemetry/phase_stats.ts";
import { StopWatchdog, type WatchdogVerdict } from "../runtime/stop_watchdog.ts";
import { SublinkDriver } from "../drivers/sublink.ts";
import { DelegatedDriver } from "../drivers/delegated.ts";
import { heldOnBridgeFrom, NadBridgeDriver } from "../drivers/nad_bridge.ts";
import { podGuardSide, portSecuritySide, removeGuardTable } from "./portsec_side.ts";
import { spoofedByPod, spoofingReporter } from "../portsec/spoofing.ts";
import { NativeNadIpam } from "../drivers/nad_native_ipam.ts";
import { SpaceOwners } from "../ipam/nad_space_owners.ts";
import { kubeNetworkOwnerApi, OWNER_CLAIM_LEASE } from "../ipam/network_owner_api.ts";
import { NadNetworkIpam } from "../ipam/nad_network_ipam.ts";
import { WhereaboutsReservations } from "../ipam/whereabouts_migration.ts";
import { KubeApiError } from "../k8s/errors.ts";
import { PODS, WHEREABOUTS_IPPOOLS } from "../k8s/resources.ts";
import type { WhereaboutsPoolObject } from "../ipam/whereabouts_pools.ts";
import { kubeNetworkBlockApi, NAD_CLAIM_LEASE } from "../ipam/network_block_api.ts";
import { ipPoolReader } from "../ipam/ip_pool_reader.ts";
import { networkPoolsOf } from "../ipam/nad_ferry_ipam.ts";

/**
 * Starts a daemon with `config`: opens its state, connects to Kubernetes (unless standalone),
 * claims the socket, serves.
 *
 * @example
 * ```ts
 * const daemon = await startDaemon(resolveConfig(undefined, { socket: "/tmp/ferry.sock", standalone: true }));
 * await daemon.stop();
 * ```
 */
export async function startDaemon(
  config: DaemonConfig,
  overrides: DaemonOverrides = {},
): Promise<Daemon> {
  const logger = getLogger(["ferry", "daemon"]);
  const local = config.ipam.mode === "local" ? localRanges(config) : undefined;
  const store = await AttachmentStore.open(`${config.stateDir}/attachments`);
  const plumbing = openPlumbing(config, overrides.plumber, logger);
  const { plumber } = plumbing;
  const netns = await NetnsGuard.forThisProcess();
  const guardChildren = new ChildSet();
  const guard = portSecuritySide({
    config,
    netfilter: plumbing.libc,
    links: plumbing.libc,
    logger: getLogger(["ferry", "portsec"]),
    children: guardChildren,
  });
  const network = new DefaultNetwork(
    {
      plumber,
      bridge: config.network.bridge,
      mtu: config.network.mtu,
      stateDir: config.stateDir,
      store,
      logger,
      reuseDelayMs: config.ipam.reuseDelaySeconds * 1000,
      guard,
      honourAllowedSources: config.portSecurity.allowSourcePrefixesAnnotation,
    },
    `node ${config.nodeName} has no spec.podCIDRs yet (ipam.mode kubernetes)`,
  );
  let kube: KubeSide | undefined;
  /** Settles when the daemon cannot go on as it is (its node's ranges changed under it). */
  const fatal = Promise.withResolvers<string>();
  // Sources are read at scrape time, once everything below exists.
  const metrics = new FerryMetrics({
    pods: () => kube?.pods.registry.size ?? 0,
    watches: () => kube?.watcher.stats() ?? {},
    apiRequests: () => ({ ...(kube?.transport.outcomes ?? {}) }),
    addresses: () => network.usage(),
    attachments: () => {
      const by: Record<string, number> = {};
      for (const a of store.list()) by[a.network] = (by[a.network] ?? 0) + 1;
      return by;
    },
    gc: () => gc.podGcStats(),
    ipamCheck: () => gc.nodeCheck.stats(),
    policyRules: () => kube?.policy?.ruleCounts() ?? [],
    unroutableRanges: () => cluster?.controller.stats().unroutable.length ?? 0,
    policyProblems: () => policyProblems(kube?.policy?.stats(), kube?.multiPolicy?.stats()),
    policyRefused: () => kube?.policy?.refused() ?? [],
    spoofed: () => spoofedByPod(guard?.counts() ?? [], store.list()),
  });
  let cluster: Awaited<ReturnType<typeof clusterSide>>;
  let pool: ReturnType<typeof poolIpam>;
  try {
    // The socket first: a second daemon for the same node stops here, before it touches the
    // bridge or sweeps links that the running one may be plugging.
    await claimSocketPath(config.socket);
    if (!guard) await removeGuardTable(config.portSecurity.table, getLogger(["ferry", "portsec"]));
    if (local) await network.open(local);
    kube = config.standalone
      ? undefined
      : await connectKube(config, store, (method, ms) => metrics.apiRequest(method, ms));
    pool = poolIpam({ config, kube, plumber, store });
    cluster = await clusterSide({
      config,
      network,
      kube,
      plumbing,
      pool,
      rangesChanged: (why) => fatal.resolve(why),
    });
  } catch (e) {
    await kube?.close();
    plumbing.close();
    guardChildren.close();
    throw e;
  }
  const { controller, identity } = cluster;
  const pluginTimeoutMs = config.pluginTimeoutSeconds * 1000;
  const podGuard = guard
    ? podGuardSide({
      config,
      libc: plumbing.libc,
      logger: getLogger(["ferry", "portsec"]),
      children: guardChildren,
    })
    : undefined;
  // whereabouts' own records, so that its live pods' addresses are never handed out (migration).
  const whereabouts = kube && config.multiNetwork.whereaboutsIpam === "native"
    ? new WhereaboutsReservations({
      list: () =>
        kube!.client.listAll<WhereaboutsPoolObject>(WHEREABOUTS_IPPOOLS, {}).then(
          (l) => l.items,
          (e) => {
            if (e instanceof KubeApiError && e.isNotFound) return []; // whereabouts not installed
            throw e;
          },
        ),
      podExists: async (namespace, name) =>
        (await kube!.client.find(PODS, namespace, name, { metadataOnly: true })) !== undefined,
      logger: getLogger(["ferry", "ipam", "networks"]),
    })
    : undefined;
  // Read again with the sweep: while nodes still delegating to whereabouts add to its records.
  if (config.gc.intervalSeconds > 0) whereabouts?.start(config.gc.intervalSeconds * 1000);
  // NAD IPAM served here: Ferry's own `ferry` type always, whereabouts configs in native mode.
  const nadIpam = kube
    ? new NativeNadIpam(async () => {
      await whereabouts?.refresh();
      return await NadNetworkIpam.open({
        nodeName: config.nodeName,
        api: kubeNetworkBlockApi(kube!.client, {
          namespace: config.gc.leaseNamespace,
          name: NAD_CLAIM_LEASE.name,
        }),
        stateDir: config.stateDir,
        releaseAfterMs: config.ipam.blockReleaseSeconds * 1000,
        reuseDelayMs: config.ipam.reuseDelaySeconds * 1000,
        logger: getLogger(["ferry", "ipam", "networks"]),
        foreign: whereabouts && ((ip) => whereabouts.holder(ip)),
        recorded: (owner) => store.get(owner) !== undefined,
      });
    }, {
      whereabouts: !!whereabouts,
      // A range of a NAD's space (whereabouts', or a `ferry` NAD's ranges) belongs to the
      // namespace that first used it.
      owners: new SpaceOwners({
        api: kubeNetworkOwnerApi(kube.client, {
          namespace: config.gc.leaseNamespace,
          name: OWNER_CLAIM_LEASE.name,
        }),
        shared: config.multiNetwork.sharedWhereaboutsSpaces,
        blocks: (network) => kubeNetworkBlockApi(kube!.client).list({ network }),
        foreign: whereabouts && (() => whereabouts.all()),
        refused: (pod, message) =>
          void kube!.event(
            {
              kind: "Pod",
              apiVersion: "v1",
              namespace: pod.namespace,
              name: pod.name,
              uid: pod.uid,
            },
            "Warning",
            "NetworkRangeOwned",
            message,
          ).catch(() => {}),
        logger: getLogger(["ferry", "ipam", "networks"]),
      }),
      pools: ipPoolReader(kube.client, kube.pools),
      podRanges: () => ferryPodRanges(kube!, config, () => network.subnets()),
    })
    : undefined;
  // Opened at start (not only at the first NAD ADD): its reconcile adopts what a lost state dir
  // left in the API, and the sweep releases what of that belongs to gone pods; neither by a
  // daemon that does not hold its node's identity (another holds the node's blocks).
  const nodeHeld = () => !identity || identity.held;
  // Without whereabouts served here, only when this node holds NAD blocks (of `ferry` pools): a
  // cluster without Ferry's CRDs is not asked about NetworkBlocks at every start.
  const holdsNadBlocks = await (async () => {
    for await (const _ of Deno.readDir(`${config.stateDir}/ipam/networks`)) return true;
    return false;
  })().catch(() => false);
  if (nodeHeld() && (whereabouts || holdsNadBlocks)) {
    void nadIpam?.ipam().catch((e) =>
      logger.warn("NAD networks' IPAM not open yet: {error}", { error: String(e) })
    );
  }
  let serving = false;
  // Ready: the socket serves, the first pod list is in, and the pod watch is not failing past
  // its deadline (then new pods cannot be seen, so ADD cannot be served).
  const ready = () =>
    serving && !network.waitingFor && (kube ? kube.watcher.synced && kube.watcher.healthy : true);
  const healthy = () => kube?.watcher.healthy ?? true;
  const trim = mallocTrim();
  const trimmer = trim ? new IdleTrimmer(trim, overrides.trimQuietMs) : undefined;
  // The first lists (a cluster's pods, with policy) free memory given back once quiet after them.
  void kube?.watcher.firstSync().then(() => trimmer?.touch());
  const phases = new PhaseStats(1024, (phase, ms) => metrics.phase(phase, ms));
  const service = new CniService({
    phases,
    network,
    networkWaitMs: config.podWaitSeconds * 1000,
    drivers: {
      macvlan: new SublinkDriver("macvlan", plumber, pluginTimeoutMs, podGuard, nadIpam),
      ipvlan: new SublinkDriver("ipvlan", plumber, pluginTimeoutMs, podGuard, nadIpam),
      delegate: new DelegatedDriver(pluginTimeoutMs, plumber),
      "nad-bridge": new NadBridgeDriver(
        plumber,
        pluginTimeoutMs,
        guard,
        nadIpam,
        heldOnBridgeFrom(() => store.list()),
      ),
    },
    store,
    netns,
    isReady: ready,
    logger: getLogger(["ferry", "cni"]),
    pods: kube?.pods,
    policy: kube?.policy,
    multiPolicy: kube?.multiPolicy,
    portSecurity: guard
      ? {
        ...config.portSecurity,
        podRanges: () =>
          kube ? ferryPodRanges(kube, config, () => network.subnets()) : network.subnets(),
      }
      : undefined,
    multiVif: kube
      ? multiVifSide({
        config,
        kube,
        localSubnets: () => network.subnets(),
        ip: plumbing.ip,
        networkPools: networkPoolsOf(ipPoolReader(kube.client, kube.pools)),
        attachments: () => store.list(),
      })
      : undefined,
  });
  const gc = gcSide({
    config,
    kube,
    store,
    network,
    service,
    netns,
    ipam: () => pool?.current(),
    nadIpam: nadIpam && (() => nodeHeld() ? nadIpam.opened() : Promise.resolve(undefined)),
    nadCheck: nadIpam && {
      networks: () => nodeHeld() ? nadIpam.held() : undefined,
      servedNatively: (conf) => nadIpam.serves(conf),
    },
  });
  let server: Awaited<ReturnType<typeof serverSide>> | undefined;
  const stats = (): DaemonStats => ({
    cniRequests: { ...server?.cniRequests },
    memory: Deno.memoryUsage(),
    memoryTrims: trimmer?.trims ?? 0,
    finishingDels: service.finishingDels,
    apiCallsOnCniPath: 0,
    apiRequests: {},
    ...kube?.stats(),
    ...gc.stats(),
    socket: server?.socket.status(),
    addPhases: phases.summary(),
    ...plumbing.syncStats(),
    network: { waitingFor: network.waitingFor, ranges: network.subnets() },
    identity: identity
      ? { id: identity.id, held: identity.held, reason: identity.reason }
      : undefined,
    cluster: controller.stats(),
    ipam: pool?.current()?.stats(),
    nadIpam: nadIpam?.stats(),
    portSecurity: guard ? { enabled: true, ...guard.stats() } : { enabled: false },
  });
  try {
    // Ready but degraded while some ranges of other nodes cannot be routed.
    const readyNote = () => {
      const degraded = controller.stats().degraded;
      return degraded ? `degraded: ${degraded}` : undefined;
    };
    server = await serverSide({
      config,
      service,
      metrics,
      trimmer,
      healthy,
      ready,
      readyNote,
      stats,
      logger,
    });
  } catch (e) {
    controller.stop();
    identity?.stop();
    await gc.close();
    await kube?.close();
    plumbing.close();
    guardChildren.close();
    throw e;
  }
  const { socket, httpPort, metricsPort } = server;
  serving = true;
  const conflist = config.stagedConflist
    ? new ConflistPublisher({
      staged: config.stagedConflist,
      confDir: config.cniConfDir,
      ready,
      logger,
    })
    : undefined;
  conflist?.start();
  guard?.startCounting(
    10_000,
    spoofingReporter({
      records: () => store.list(),
      logger: getLogger(["ferry", "portsec"]),
      event: (namespace, name, reason, message) => {
        const pod = kube?.pods.registry.get(namespace, name);
        if (pod) kube!.pods.event?.(pod, "Warning", reason, message);
      },
    }),
  );
  if (network.waitingFor) logger.warn("not ready: {why}", { why: network.waitingFor });
  return {
    config,
    finished: socket.finished,
    stats,
    ready,
    healthy,
    httpAddress: httpPort?.address,
    metricsAddress: metricsPort?.address,
    idle: () => service.idle(),
    mustRestart: fatal.promise,
    async stop() {
      serving = false;
      logger.info("shutting down");
      await Promise.all([server!.closePorts(), conflist?.close()]);
      await socket.shutdown(config.shutdownTimeoutSeconds * 1000);
      // Requests still in a plugin past the shutdown timeout are abandoned, and their plugins
      // ended (each runs in a session of its own: nothing else would end it).
      const plugins = stopRunningPlugins();
      if (plugins) {
        logger.warn(
          "stopped {n} plugin run(s) still going at shutdown; their requests are abandoned",
          { n: plugins },
        );
      }
      await service.idle(); // DELs answered before the kernel finished removing their links
      controller.stop();
      // Given up, not left to expire: the node's next daemon holds it at once.
      await identity?.release();
      await gc.close();
      const ipam = pool?.current();
      // Block allocations not yet written reach the API unless it is unreachable for long (the
      // next start would write them anyway: the node's files are the truth).
      await ipam?.flush(AbortSignal.timeout(5000));
      // Not awaited: a write still under way ends when the client below is closed (or the API
      // answers, or its request time limit passes); nothing is sent after it.
      ipam?.close();
      whereabouts?.stop();
      await nadIpam?.close(AbortSignal.timeout(5000));
      await kube?.close();
      plumbing.close();
      trimmer?.stop();
      guard?.stopCounting();
      guardChildren.close();
    },
  };
}

if (import.meta.main) {
  let daemon: Daemon | undefined;
  let stopping = false;
  const stop = async (code = 0) => {
    if (stopping) return;
    stopping = true;
    if (!daemon) Deno.exit(0);
    // Whatever is in flight, the stop ends within its documented bound: kept by a thread of its
    // own, which a blocked event loop cannot hold up (stop_watchdog.ts).
    const boundSeconds = daemon.config.shutdownTimeoutSeconds + STOP_MARGIN_SECONDS;
    const running = daemon;
    const late = (): WatchdogVerdict => {
      const abandoned = abandonedWork(running.stats());
      return {
        message: `stop did not finish within ${boundSeconds} s; exiting with ${abandoned}`,
        properties: { seconds: boundSeconds, abandoned },
        code: 1,
      };
    };
    const watchdog = StopWatchdog.arm(
      boundSeconds * 1000,
      daemon.config.logFormat,
      late(),
      (why) => {
        // Without its thread, a timer on the event loop keeps the bound while the loop runs.
        getLogger(["ferry", "daemon"]).error("the stop's watchdog did not start: {why}", { why });
        setTimeout(() => Deno.exit(1), boundSeconds * 1000);
      },
    );
    // What it would abandon, kept current while the loop runs.
    const counting = setInterval(() => watchdog.tell(late()), 250);
    await daemon.stop();
    clearInterval(counting);
    // Not disarmed: should the exit itself not complete, the process ends at the bound all the
    // same, with the code the stop earned.
    watchdog.tell({
      message: `stop finished, but the process had not ended ${boundSeconds} s after it began`,
      properties: { seconds: boundSeconds },
      code,
    });
    // Lines a log reader has not taken (it stopped reading: stderr's pipe is full, and a write
    // blocked on it) are given up after a second rather than holding the exit.
    await Promise.race([teardownLogging(), new Promise((r) => setTimeout(r, 1000))]);
    Deno.exit(code);
  };
  // Before anything is served: Deno sets its signal handling up on the first listener, which
  // must not come while clients hold every file descriptor.
  Deno.addSignalListener("SIGTERM", () => stop());
  Deno.addSignalListener("SIGINT", () => stop());
  try {
    const { configFile, overrides } = parseDaemonArgs(Deno.args);
    const config = await loadConfig(configFile, overrides);
    await setupLogging(config.logLevel, config.logFormat);
    takeCpuPriority(config.nice, getLogger(["ferry", "daemon"]));
    daemon = await startDaemon(config);
  } catch (e) {
    console.error(`ferry daemon: ${e instanceof Error ? e.message : e}`);
    Deno.exit(1);
  }
  // SIGHUP re-reads the config and applies its log level (everything else needs a restart).
  Deno.addSignalListener("SIGHUP", async () => {
    try {
      const { configFile, overrides } = parseDaemonArgs(Deno.args);
      const fresh = await loadConfig(configFile, overrides);
      await setupLogging(fresh.logLevel, fresh.logFormat);
      getLogger(["ferry", "daemon"]).info("SIGHUP: log level now {level}", {
        level: fresh.logLevel,
      });
    } catch (e) {
      getLogger(["ferry", "daemon"]).error("SIGHUP: the config could not be re-read: {error}", {
        error: e instanceof Error ? e.message : String(e),
      });
    }
  });
  const restart = await Promise.race([daemon.finished.then(() => undefined), daemon.mustRestart]);
  if (restart) {
    getLogger(["ferry", "daemon"]).error("stopping to start anew: {why}", { why: restart });
    await stop(1);
  }
}
