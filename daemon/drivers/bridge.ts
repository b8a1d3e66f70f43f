/**
 * The `bridge` driver: the node's default network. A veth pair per pod, the host end on the node
 * bridge (which holds the gateways), the pod end with one address per configured family from the
 * allocators (one per family), a stable MAC, the network's MTU and a default route per family.
 *
 * @module
 */
import type { CniResult } from "../../lib/cni/schemas.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import { CURRENT_VERSION } from "../../lib/cni/versions.ts";
import type { Attachment, AttachmentKey } from "../records/attachment_store.ts";
import { podRefFromArgs } from "../../lib/cni/args.ts";
import type { FamilyAllocator, Lease } from "../ipam/allocator.ts";
import { defaultRoutes } from "../net/link_plan.ts";
import { HOST_LINK_PREFIX, hostLinkName, stableMac } from "../net/naming.ts";
import type { BridgeSpec, InterfaceAddress, Plumber, VethSpec } from "../net/plumber.ts";
import { firstDifference } from "./live_check.ts";
import type { AddContext, Driver, Plugged, RecordContext } from "./driver.ts";
import type { PortGuard } from "../portsec/port_guard.ts";
import type { PortEntry } from "../portsec/guard_table.ts";

/** What the bridge driver needs. */
export interface BridgeDriverDeps {
  /** One allocator per family (IPv4 and/or IPv6). */
  allocators: FamilyAllocator[];
  /** The kernel side. */
  plumber: Plumber;
  /** The node bridge's name. */
  bridge: string;
  /** MTU of the bridge and the pod interfaces. */
  mtu: number;
  /** Port security: each pod's port under guard before its ADD answers (off when absent). */
  guard?: Pick<PortGuard, "group" | "admit" | "release">;
}

/** The bridge the allocators imply: their gateways with their subnets' prefixes. */
export function bridgeSpec(deps: BridgeDriverDeps): BridgeSpec {
  return {
    name: deps.bridge,
    mtu: deps.mtu,
    gateways: deps.allocators.flatMap((a) => a.gateways()),
  };
}

/**
 * The default network's driver.
 *
 * @example
 * ```ts
 * const driver = new BridgeDriver({ allocators: [v4], plumber, bridge: "ferry0", mtu: 1500 });
 * await driver.prepare();
 * ```
 */
export class BridgeDriver implements Driver {
  readonly #d: BridgeDriverDeps;

  /** Creates the driver. */
  constructor(deps: BridgeDriverDeps) {
    if (deps.allocators.length === 0) {
      throw new Error("the bridge driver needs at least one allocator");
    }
    this.#d = deps;
  }

  /** Sets up the node bridge (idempotent); the daemon calls it at start. */
  prepare(): Promise<void> {
    return this.#d.plumber.ensureBridge(bridgeSpec(this.#d));
  }

  /** The MTU of the bridge and the pod interfaces. */
  get mtu(): number {
    return this.#d.mtu;
  }

  /** Addresses free in the most constrained family. */
  get free(): number {
    return Math.min(...this.#d.allocators.map((a) => a.free));
  }

  /**
   * Allocates one address per family and plugs the veth; rolls everything back on failure. The
   * allocation (files on the node's disk, or a block from the API) runs while the kernel creates
   * the pair: neither needs the other, and the addresses are needed only to configure the pod
   * end, which waits for them. An address is thus in a pod only once its allocation is written.
   * The result is announced (`ctx.resultKnown`) as soon as the addresses are allocated.
   */
  async add(ctx: AddContext): Promise<Plugged> {
    const { key, netns } = ctx;
    const spec: VethSpec = {
      netns,
      ifname: key.ifname,
      hostIfname: hostLinkName(key.containerId, key.ifname),
      bridge: this.#d.bridge,
      containerMac: stableMac(key.containerId, key.ifname, "container"),
      hostMac: stableMac(key.containerId, key.ifname, "host"),
      mtu: this.#d.mtu,
      addresses: [],
      // Made in the guard's group: the port sends nothing until its pod is admitted.
      ...(this.#d.guard ? { hostGroup: this.#d.guard.group } : {}),
    };
    let result: CniResult | undefined;
    // The result is known once the addresses are: the service may write its record while the
    // pair is still being created and the pod end configured.
    const allocation = this.#allocate(ctx, spec).then(() => {
      result = vethResult(spec, ctx.prevResult);
      ctx.resultKnown?.(result, spec.hostIfname);
    });
    // Handled here at once: it may fail while the pair is still being created, before anything
    // awaits it (an unhandled rejection would end the daemon).
    allocation.catch(() => {});
    try {
      try {
        await this.#d.plumber.plugVeth(spec, allocation);
      } catch (e) {
        // A failed allocation is the cause (the plug waited for it); it settles before anything
        // is rolled back, so nothing it wrote is left behind.
        const failed = await allocation.then(() => undefined, (a: unknown) => ({ a }));
        if (failed) throw failed.a;
        if (!(e instanceof CniError) || !e.details.includes(`"${this.#d.bridge}"`)) throw e;
        // The bridge went away under us (an operator, a restarted network service): set it up
        // again once and retry.
        await this.#d.plumber.unplugVeth(spec.hostIfname);
        await this.prepare();
        await this.#d.plumber.plugVeth(spec);
      }
      await allocation;
      await this.#d.guard?.admit(guardEntry(spec, ctx.allowedSources));
    } catch (e) {
      await this.#undo(key, spec.hostIfname);
      await this.#d.guard?.release(guardEntry(spec, ctx.allowedSources));
      throw e;
    }
    return { result: result!, hostIfname: spec.hostIfname };
  }

  /** One address per family into `spec.addresses`, in the allocators' order (all settle first). */
  async #allocate(ctx: AddContext, spec: VethSpec): Promise<void> {
    const pod = podRefFromArgs(ctx.args);
    const allocating = performance.now();
    const leases = await Promise.allSettled(
      this.#d.allocators.map((allocator) => allocator.allocate(ctx.key, pod, ctx.addressWait)),
    );
    for (const lease of leases) if (lease.status === "rejected") throw lease.reason;
    for (const lease of leases as PromiseFulfilledResult<Lease>[]) {
      spec.addresses.push({
        cidr: `${lease.value.ip}/${lease.value.prefix}`,
        gateway: lease.value.gateway,
      });
    }
    ctx.ipamTime?.(performance.now() - allocating);
  }

  async #undo(key: AttachmentKey, hostIfname: string): Promise<void> {
    await this.#d.plumber.unplugVeth(hostIfname).catch(() => {});
    for (const a of this.#d.allocators) await a.release(key).catch(() => {});
  }

  /**
   * Removes the host end (the pod end goes with it) and releases the addresses. The kernel takes
   * most of a DEL's time tearing a veth pair down (20-30 ms here, waiting for RCU grace periods
   * after the link is already unlinked from the bridge), so the runtime is answered once the
   * removal is under way; the addresses are released only after the kernel has confirmed it, so
   * no address is handed out while an interface still holds it.
   */
  async del(ctx: RecordContext): Promise<void> {
    const hostIfname = ctx.record?.hostIfname ??
      hostLinkName(ctx.key.containerId, ctx.key.ifname);
    const entry = {
      port: hostIfname,
      mac: stableMac(ctx.key.containerId, ctx.key.ifname, "container"),
      ips: ctx.record
        ? (ctx.record.result.ips ?? []).map((ip) => ip.address.split("/")[0])
        : this.addressesOf(ctx.key),
      ...(ctx.record?.allowedSources ? { allowed: ctx.record.allowedSources } : {}),
    };
    const removal = this.#d.plumber.unplugVeth(hostIfname);
    ctx.answerNow?.();
    await removal;
    // Only once the link is gone: the pod sends as itself until then, never as anyone.
    await this.#d.guard?.release(entry);
    for (const a of this.#d.allocators) await a.release(ctx.key);
  }

  /** Compares link, addresses and routes in the pod with `expected`, and the host end's bridge. */
  async check(ctx: RecordContext & { netns: string }, expected: CniResult): Promise<void> {
    const live = await this.#d.plumber.inspect(ctx.netns, ctx.key.ifname);
    const diff = firstDifference(expected, ctx.key.ifname, ctx.netns, live);
    // The pod end exists only while its host end does (a veth pair dies whole).
    if (diff) throw new CniError(CNI_ERROR.CHECK_MISMATCH, diff);
    const host = ctx.record?.hostIfname;
    if (host && !(await this.#d.plumber.bridgePorts(this.#d.bridge)).includes(host)) {
      throw new CniError(
        CNI_ERROR.CHECK_MISMATCH,
        `host link ${host} is not a port of bridge ${this.#d.bridge}`,
      );
    }
  }

  /**
   * Puts the node back in line with the record after a crash: allocation files that name no
   * owner are given back to the attachment recorded with that address (or freed), then Ferry's
   * links on the bridge that no attachment names are removed, the ports of those it names set as
   * a plug sets them ({@link Plumber.securePort}), and addresses that no attachment holds are
   * released (an ADD killed halfway leaves both). `damaged` are keys whose record
   * cannot be read: what they hold is kept. Run at start, before any request is served.
   */
  async reconcile(
    records: Attachment[],
    damaged: AttachmentKey[] = [],
  ): Promise<{ links: string[]; addresses: number; repaired: string[] }> {
    const holders = new Map<string, AttachmentKey>();
    for (const r of records) {
      if ((r.driver ?? "bridge") !== "bridge") continue;
      for (const ip of r.result.ips ?? []) holders.set(ip.address.split("/")[0], r);
    }
    const repaired: string[] = [];
    for (const allocator of this.#d.allocators) {
      const { restored, freed } = await allocator.repair(holders);
      repaired.push(
        ...restored.map((ip) => `${ip} (restored)`),
        ...freed.map((ip) => `${ip} (freed)`),
      );
    }
    const { links, owners } = await this.orphans(records, damaged);
    for (const name of links) await this.#d.plumber.unplugVeth(name);
    // The ports kept, set as a plug sets them now (an older Ferry's still learned, flooded and
    // handed link-local group frames up their own stack).
    for (const r of records) {
      if ((r.driver ?? "bridge") !== "bridge" || !r.hostIfname) continue;
      await this.#d.plumber.securePort({
        hostIfname: r.hostIfname,
        podMac: stableMac(r.containerId, r.ifname, "container"),
        guarded: this.#d.guard !== undefined,
      });
    }
    let addresses = 0;
    for (const owner of owners) addresses += await this.releaseOwner(owner);
    return { links, addresses, repaired };
  }

  /**
   * What no attachment names: Ferry's host links on the bridge, and owners holding addresses.
   * `unrecorded` keys (records that cannot be read, ADDs in flight) count as named.
   */
  async orphans(
    records: Attachment[],
    unrecorded: AttachmentKey[] = [],
  ): Promise<{ links: string[]; owners: AttachmentKey[] }> {
    const known = new Set([
      ...records.map((r) => r.hostIfname).filter(Boolean),
      ...unrecorded.map((k) => hostLinkName(k.containerId, k.ifname)),
    ]);
    const links = (await this.#d.plumber.bridgePorts(this.#d.bridge)).filter((name) =>
      name.startsWith(HOST_LINK_PREFIX) && !known.has(name)
    );
    const named = new Set(
      [...records, ...unrecorded].map((r) => `${r.containerId}/${r.ifname}`),
    );
    const owners = this.owners().filter((o) =>
      !named.has(`${o.containerId}/${o.ifname}`) &&
      !this.#d.allocators.some((a) => a.adopted?.(o))
    );
    return { links, owners };
  }

  /** Releases every address `owner` holds; how many. */
  async releaseOwner(owner: AttachmentKey): Promise<number> {
    let n = 0;
    for (const a of this.#d.allocators) if (await a.release(owner)) n++;
    return n;
  }

  /** Removes a host link of the bridge (an orphan found by the sweep); absent is fine. */
  removeHostLink(name: string): Promise<void> {
    return this.#d.plumber.unplugVeth(name);
  }

  /** Whether `owner` holds addresses in this driver's allocators. */
  holds(owner: AttachmentKey): boolean {
    return this.#d.allocators.some((a) => a.addressOf(owner) !== undefined);
  }

  /** The addresses `owner` holds. */
  addressesOf(owner: AttachmentKey): string[] {
    return this.#d.allocators.map((a) => a.addressOf(owner)).filter((ip): ip is string => !!ip);
  }

  /** Every owner holding addresses. */
  owners(): AttachmentKey[] {
    return this.#d.allocators.flatMap((a) => a.allocations().map((x) => x.owner));
  }
}

/** What a veth plug's pod may send from its host end (port security). */
function guardEntry(spec: VethSpec, allowed: string[] | undefined): PortEntry {
  return {
    port: spec.hostIfname,
    mac: spec.containerMac,
    ips: spec.addresses.map((a) => a.cidr.split("/")[0]),
    ...(allowed?.length ? { allowed } : {}),
  };
}

/**
 * The result of a veth plug, appended to `prev` (a chained plugin's previous result) when given.
 *
 * @example
 * ```ts
 * vethResult(spec, undefined).ips; // [{ address: "10.244.0.5/24", gateway: "10.244.0.1", interface: 1 }]
 * ```
 */
export function vethResult(spec: VethSpec, prev: CniResult | undefined): CniResult {
  const interfaces = [...(prev?.interfaces ?? [])];
  interfaces.push({ name: spec.hostIfname, mac: spec.hostMac, mtu: spec.mtu });
  const podIndex = interfaces.push({
    name: spec.ifname,
    mac: spec.containerMac,
    mtu: spec.mtu,
    sandbox: spec.netns,
  }) - 1;
  const result: CniResult = {
    cniVersion: CURRENT_VERSION,
    interfaces,
    ips: [...(prev?.ips ?? []), ...spec.addresses.map((a) => ipEntry(a, podIndex))],
    routes: [...(prev?.routes ?? []), ...defaultRoutes(spec.addresses)],
  };
  if (prev?.dns) result.dns = prev.dns;
  return result;
}

function ipEntry(a: InterfaceAddress, index: number) {
  return { address: a.cidr, ...(a.gateway ? { gateway: a.gateway } : {}), interface: index };
}
