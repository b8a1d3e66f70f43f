/**
 * The default network of this node, once its address ranges are known. In `local` IPAM mode they
 * come from the configuration and the network opens at start; in `kubernetes` mode they are the
 * node's `spec.podCIDRs`, which may appear only after the daemon started (the controller-manager
 * assigns them), so the network opens when they do; in `pool` mode they are the blocks this
 * node holds in Ferry's cluster pools, and the network opens once a pool exists. Until then ADD
 * waits for it (bounded, then code 11), STATUS answers 50 and readiness stays false, each saying
 * why.
 *
 * Opening means: the allocators of each family, the node bridge with their gateways, and the
 * start-up reconcile against the attachment records.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { Attachment, AttachmentStore } from "../records/attachment_store.ts";
import { BridgeDriver } from "../drivers/bridge.ts";
import type { PortGuard } from "../portsec/port_guard.ts";
import { entryOfResult, type PortEntry } from "../portsec/guard_table.ts";
import { hostLinkName, stableMac } from "../net/naming.ts";
import { LocalPool } from "../ipam/local_pool.ts";
import type { NetworkRange } from "../ipam/network_range.ts";
import { type FamilyAllocator, RangeAllocator } from "../ipam/allocator.ts";
import type { Plumber } from "../net/plumber.ts";

/** Where a pool keeps its allocations. */
export function poolDir(stateDir: string, subnet: string): string {
  return `${stateDir}/ipam/${subnet.replaceAll("/", "_").replaceAll(":", "-")}`;
}

/** The ranges of a podCIDR list (`ipam/network_range.ts`), which this network opens on. */
export { type NetworkRange, rangesOf } from "../ipam/network_range.ts";

/** What opening the network needs. */
export interface DefaultNetworkDeps {
  /** The kernel side. */
  plumber: Plumber;
  /** The node bridge's name and MTU. */
  bridge: string;
  /** MTU of the bridge and the pod interfaces. */
  mtu: number;
  /** The state directory (pools live under `ipam/`). */
  stateDir: string;
  /** The attachment records, for the start-up reconcile. */
  store: AttachmentStore;
  /** Where to log. */
  logger: Logger;
  /** How long a released address stays out of use (ms). */
  reuseDelayMs?: number;
  /** Port security: rebuilt from the records when the network opens (off when absent). */
  guard?: PortGuard;
  /**
   * `portSecurity.allowSourcePrefixesAnnotation`: when off, the prefixes records name are not
   * given back at the rebuild.
   */
  honourAllowedSources?: boolean;
}

/**
 * The gate.
 *
 * @example
 * ```ts
 * const network = new DefaultNetwork(deps, "node n1 has no spec.podCIDRs yet");
 * await network.open(rangesOf(["10.244.1.0/24"]));
 * const bridge = await network.driver(AbortSignal.timeout(60_000));
 * ```
 */
export class DefaultNetwork {
  readonly #d: DefaultNetworkDeps;
  readonly #opened = Promise.withResolvers<BridgeDriver>();
  #driver?: BridgeDriver;
  #allocators: FamilyAllocator[] = [];
  #waitingFor: string;
  readonly #holds = new Map<string, string>();
  #opening?: Promise<void>;

  /** Creates a network not yet open; `waitingFor` says what it waits for. */
  constructor(deps: DefaultNetworkDeps, waitingFor: string) {
    this.#d = deps;
    this.#waitingFor = waitingFor;
    this.#opened.promise.catch(() => {});
  }

  /** Why ADD cannot be served yet (or now: see {@link DefaultNetwork.holdBack}), or undefined. */
  get waitingFor(): string | undefined {
    return this.#heldBack ?? (this.#driver ? undefined : this.#waitingFor);
  }

  /**
   * Holds ADD back for `reason`, open or not (another daemon holds this node's identity; the node
   * is gone from the API): ADD is answered code 11 and STATUS 50 with the reason, DEL and CHECK go
   * on. Each `cause` holds on its own; `undefined` lets that one go.
   */
  holdBack(reason: string | undefined, cause = "identity"): void {
    if (reason === undefined) this.#holds.delete(cause);
    else this.#holds.set(cause, reason);
  }

  get #heldBack(): string | undefined {
    return this.#holds.values().next().value;
  }

  /** The driver, once open. */
  get current(): BridgeDriver | undefined {
    return this.#driver;
  }

  /**
   * The subnets addresses come from now: the fixed ranges, or the node's blocks of a pool (which
   * change as blocks are claimed and given back). Empty before the network opens.
   */
  subnets(): string[] {
    return this.#allocators.flatMap((a) => a.subnets());
  }

  /** Every allocation now (none before the network opens), with whether it was adopted. */
  allocations(): {
    ip: string;
    owner: { containerId: string; ifname: string };
    adopted: boolean;
  }[] {
    return this.#allocators.flatMap((a) =>
      a.allocations().map(({ ip, owner }) => ({ ip, owner, adopted: a.adopted?.(owner) ?? false }))
    );
  }

  /** Per range (or block): addresses in use and free (none before the network opens). */
  usage(): { range: string; used: number; free: number }[] {
    return this.#allocators.flatMap((a) => a.usage());
  }

  /** Says what the network waits for now (while it is not open). */
  waitFor(reason: string): void {
    this.#waitingFor = reason;
  }

  /**
   * Opens the network on fixed `ranges` (`local` and `kubernetes` IPAM) with pod interfaces of
   * `mtu` (the configured one unless an overlay needs less); see {@link DefaultNetwork.openWith}.
   */
  open(ranges: NetworkRange[], mtu = this.#d.mtu): Promise<void> {
    return this.openWith(async () => {
      const pools = await Promise.all(
        ranges.map((r) =>
          LocalPool.open(poolDir(this.#d.stateDir, r.subnet), r.range, {
            reuseDelayMs: this.#d.reuseDelayMs,
          })
        ),
      );
      return pools.map((p) => new RangeAllocator(p));
    }, mtu);
  }

  /**
   * Opens the network on the allocators `make` returns (called once, with the pods' MTU):
   * bridge, reconcile. A second
   * call is ignored (a node's ranges never change once set); a failure is kept as the reason and
   * may be retried.
   */
  openWith(make: (mtu: number) => Promise<FamilyAllocator[]>, mtu = this.#d.mtu): Promise<void> {
    this.#opening ??= this.#open(make, mtu).catch((e) => {
      this.#opening = undefined;
      this.#waitingFor = `the default network could not be opened: ${
        e instanceof Error ? e.message : e
      }`;
      throw e;
    });
    return this.#opening;
  }

  async #open(make: (mtu: number) => Promise<FamilyAllocator[]>, mtu: number): Promise<void> {
    const allocators = await make(mtu);
    const driver = new BridgeDriver({
      allocators,
      plumber: this.#d.plumber,
      bridge: this.#d.bridge,
      mtu,
      guard: this.#d.guard,
    });
    await driver.prepare();
    const { store, logger } = this.#d;
    for (const key of store.damaged()) {
      logger.error(
        "the attachment record of {containerId}/{ifname} cannot be read; what it holds is kept " +
          "until a DEL for it" + (this.#d.guard ? ", and port security drops all it sends" : ""),
        { ...key },
      );
    }
    const swept = await driver.reconcile(store.list(), store.damaged());
    if (swept.repaired.length) {
      logger.warn("settled allocation files that named no owner: {addresses}", {
        addresses: swept.repaired.join(", "),
      });
    }
    if (swept.links.length || swept.addresses) {
      logger.warn(
        "removed {links} unrecorded links ({names}) and {addresses} unrecorded addresses",
        { links: swept.links.length, names: swept.links.join(", "), addresses: swept.addresses },
      );
    }
    // The previous daemon's guard stays until this replaces it whole, before any ADD is served.
    if (this.#d.guard) {
      const entries = guardedPorts(store.list());
      const revoked = this.#d.honourAllowedSources ? [] : entries.filter((e) => e.allowed);
      for (const e of revoked) {
        logger.warn(
          "port {port} no longer sends from {prefixes}: portSecurity.allowSourcePrefixesAnnotation is off",
          { port: e.port, prefixes: e.allowed!.join(", ") },
        );
        delete e.allowed;
      }
      const closed = store.damaged().map((k) => hostLinkName(k.containerId, k.ifname));
      await this.#d.guard.rebuild(entries, closed);
    }
    this.#allocators = allocators;
    this.#driver = driver;
    this.#opened.resolve(driver);
    logger.info("default network open on bridge {bridge}: {subnets} ({free} free)", {
      bridge: this.#d.bridge,
      subnets: this.subnets().join(" "),
      free: driver.free,
    });
  }

  /**
   * The driver, waiting for the network to open until `signal` aborts.
   *
   * @throws {CniError} code 11 naming what it waits for.
   */
  async driver(signal: AbortSignal): Promise<BridgeDriver> {
    if (this.#heldBack) {
      throw new CniError(CNI_ERROR.TRY_AGAIN_LATER, `ADD is held back: ${this.#heldBack}`);
    }
    if (this.#driver) return this.#driver;
    const aborted = new Promise<never>((_, reject) => {
      const fail = () =>
        reject(
          new CniError(
            CNI_ERROR.TRY_AGAIN_LATER,
            `the default network is not open yet: ${this.#waitingFor}`,
          ),
        );
      if (signal.aborted) fail();
      else signal.addEventListener("abort", fail, { once: true });
    });
    return await Promise.race([this.#opened.promise, aborted]);
  }
}

/**
 * The guard entries of the recorded interfaces on Ferry's veths (port security): the default
 * network's, and native NAD bridges' (whose records name no host end: it is derived). The MAC is the one Ferry gave the interface at ADD, not the result's (a chained
 * `tuning` may have changed it there).
 */
function guardedPorts(records: Attachment[]): PortEntry[] {
  return records.flatMap((r) => {
    const driver = r.driver ?? "bridge";
    if (driver !== "bridge" && driver !== "nad-bridge") return [];
    const port = r.hostIfname ?? hostLinkName(r.containerId, r.ifname);
    const entry = entryOfResult(r.result, port);
    if (!entry) return [];
    entry.mac = stableMac(r.containerId, r.ifname, "container");
    return [r.allowedSources?.length ? { ...entry, allowed: r.allowedSources } : entry];
  });
}
