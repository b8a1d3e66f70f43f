/**
 * The `macvlan` and `ipvlan` drivers: a link on a host master interface, created directly in the
 * pod's namespace, addressed by the attachment's IPAM plugin. Configs use the reference plugins'
 * format (`master` defaulting to the host's default-route interface, `mode`, `mtu`, `ipam`,
 * `runtimeConfig.mac`), read in any case as those plugins read them (`native_keys.ts`), so
 * NetworkAttachmentDefinitions written for them work unchanged and the NAD guard checks the device
 * a link is plugged on.
 *
 * @module
 */
import type { SublinkConf } from "./sublink_schema.ts";
import { validateMacvlanConf } from "../../lib/_generated/validateMacvlanConf.js";
import { validateIpvlanConf } from "../../lib/_generated/validateIpvlanConf.js";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { CniResult, NetConf } from "../../lib/cni/schemas.ts";
import { CURRENT_VERSION } from "../../lib/cni/versions.ts";
import { checkShape } from "../../lib/validate.ts";
import { stableMac } from "../net/naming.ts";
import type { Plumber, SublinkSpec } from "../net/plumber.ts";
import { firstDifference } from "./live_check.ts";
import type { AddContext, Driver, Plugged, RecordContext } from "./driver.ts";
import type { NativeNadIpam } from "./nad_native_ipam.ts";
import { ipamAdd, type IpamCall, ipamCheck, ipamDel } from "./ipam_exec.ts";
import { refuseTakenName } from "./driver.ts";
import { guardableIfname, podGuardScript, podGuardTable } from "../portsec/pod_guard.ts";
import { nativeSpelled } from "./native_keys.ts";

/** Port security in the pod's namespace: the table's name and how a script runs there. */
export interface SublinkGuard {
  /** The guard table's name (one per interface: `<table>-<ifname>`). */
  table: string;
  /** Runs an `nft -f` script inside the network namespace at path `netns`. */
  applyIn(netns: string, script: string): Promise<void>;
  /**
   * Deletes netdev table `table` inside the network namespace at path `netns`; an absent table
   * or a namespace that is gone is success.
   */
  removeIn(netns: string, table: string): Promise<void>;
}

/**
 * A macvlan or ipvlan driver.
 *
 * @example
 * ```ts
 * const macvlan = new SublinkDriver("macvlan", plumber, 60_000);
 * ```
 */
export class SublinkDriver implements Driver {
  readonly #kind: "macvlan" | "ipvlan";
  readonly #plumber: Plumber;
  readonly #pluginTimeoutMs: number;
  readonly #guard?: SublinkGuard;
  readonly #validate;

  readonly #native?: NativeNadIpam;

  /**
   * Creates the driver for `kind`; its IPAM plugin is killed after `pluginTimeoutMs`. With
   * `guard` (port security), each interface gets its guard table in the pod's namespace before
   * its ADD answers; `native` serves whereabouts configs in-process.
   */
  constructor(
    kind: "macvlan" | "ipvlan",
    plumber: Plumber,
    pluginTimeoutMs: number,
    guard?: SublinkGuard,
    native?: NativeNadIpam,
  ) {
    this.#native = native;
    this.#kind = kind;
    this.#plumber = plumber;
    this.#pluginTimeoutMs = pluginTimeoutMs;
    this.#guard = guard;
    this.#validate = kind === "macvlan" ? validateMacvlanConf : validateIpvlanConf;
  }

  /** The config with its keys spelled as read here (`native_keys.ts`), checked. */
  #conf(conf: NetConf): NetConf & SublinkConf {
    return checkShape<NetConf & SublinkConf>(
      this.#validate,
      nativeSpelled(conf),
      CNI_ERROR.INVALID_CONFIG,
      `${this.#kind} config of network ${conf.name}`,
    );
  }

  /** The IPAM call of `ctx`, on `conf` (its keys spelled as read here). */
  #ipam(ctx: RecordContext | AddContext, conf: NetConf): IpamCall {
    return { ...ctx, conf, timeoutMs: this.#pluginTimeoutMs, native: this.#native };
  }

  /** Gets addresses from the IPAM plugin, creates and configures the link; undoes both on failure. */
  async add(ctx: AddContext): Promise<Plugged> {
    const conf = this.#conf(ctx.conf);
    const { key, netns } = ctx;
    const master = conf.master ?? await this.#plumber.defaultRouteInterface();
    if (!master) {
      throw new CniError(
        CNI_ERROR.INVALID_CONFIG,
        `${this.#kind} network ${ctx.conf.name}: no master given and the host has no default route`,
      );
    }
    // The pod chooses the name (its network selection): one the guard's script cannot carry is
    // refused before anything is allocated or created.
    if (this.#guard && !guardableIfname(key.ifname)) {
      throw new CniError(
        CNI_ERROR.INVALID_CONFIG,
        `${this.#kind} network ${ctx.conf.name}: interface name ${
          JSON.stringify(key.ifname)
        } cannot be guarded by port security (letters, digits, '.', '-' and '_' only)`,
      );
    }
    await refuseTakenName(this.#plumber, ctx);
    const ipam = await ipamAdd(this.#ipam(ctx, conf));
    const mac = conf.type === "macvlan"
      ? (conf.runtimeConfig?.mac ?? stableMac(key.containerId, key.ifname, "container"))
      : undefined;
    const spec: SublinkSpec = {
      kind: this.#kind,
      netns,
      ifname: key.ifname,
      master,
      mode: conf.mode ?? (conf.type === "macvlan" ? "bridge" : "l2"),
      mtu: conf.mtu,
      mac,
      addresses: (ipam.ips ?? []).map((ip) => ({ cidr: ip.address, gateway: ip.gateway })),
      routes: (ipam.routes ?? []).map((r) => ({ dst: r.dst, gw: r.gw })),
    };
    try {
      // The plumber removes the link itself if it created it and then failed.
      await this.#plumber.plugSublink(spec);
    } catch (e) {
      await ipamDel(this.#ipam(ctx, conf)).catch(() => {});
      throw e;
    }
    if (this.#guard) {
      const script = podGuardScript(this.#guard.table, {
        ifname: key.ifname,
        mac,
        ips: (ipam.ips ?? []).map((ip) => ip.address.split("/")[0]),
        dhcp: (conf.ipam as { type?: string } | undefined)?.type === "dhcp",
      });
      try {
        await this.#guard.applyIn(netns, script);
      } catch (e) {
        await this.#plumber.unplugIn(netns, key.ifname).catch(() => {});
        await ipamDel(this.#ipam(ctx, conf)).catch(() => {});
        throw new CniError(
          CNI_ERROR.IO_FAILURE,
          `port security for ${key.ifname} could not be put in place`,
          e instanceof Error ? e.message : String(e),
        );
      }
    }
    const iface = {
      name: key.ifname,
      mac: mac ?? await masterMac(master),
      ...(conf.mtu ? { mtu: conf.mtu } : {}),
      sandbox: netns,
    };
    const result: CniResult = {
      cniVersion: CURRENT_VERSION,
      interfaces: [iface],
      ips: (ipam.ips ?? []).map((ip) => ({ ...ip, interface: 0 })),
      routes: ipam.routes ?? [],
    };
    if (ipam.dns) result.dns = ipam.dns;
    return { result };
  }

  /**
   * Removes the link in the pod (gone namespace or link is fine) and releases the addresses. The
   * service hands a namespace only when it recorded plugging this link there.
   */
  async del(ctx: RecordContext): Promise<void> {
    const conf = this.#conf(ctx.conf);
    if (ctx.netns) await this.#plumber.unplugIn(ctx.netns, ctx.key.ifname);
    if (ctx.netns && this.#guard) {
      const table = podGuardTable(this.#guard.table, ctx.key.ifname);
      // A namespace gone takes its tables along; a failure leaves a table only in this one.
      await this.#guard.removeIn(ctx.netns, table).catch(() => {});
    }
    await ipamDel(this.#ipam(ctx, conf));
  }

  /** Asks the IPAM plugin to confirm its addresses, then compares the link in the pod with `expected`. */
  async check(ctx: RecordContext & { netns: string }, expected: CniResult): Promise<void> {
    const conf = this.#conf(ctx.conf);
    await ipamCheck(this.#ipam(ctx, conf), expected);
    const live = await this.#plumber.inspect(ctx.netns, ctx.key.ifname);
    const diff = firstDifference(expected, ctx.key.ifname, ctx.netns, live);
    if (diff) throw new CniError(CNI_ERROR.CHECK_MISMATCH, diff);
  }
}

/** An ipvlan link shares its master's MAC. */
async function masterMac(master: string): Promise<string | undefined> {
  try {
    return (await Deno.readTextFile(`/sys/class/net/${master}/address`)).trim();
  } catch {
    return undefined;
  }
}
