/**
 * The `bridge` type of an additional network, plugged natively: a veth pair whose host end joins
 * a second bridge named by the config (created when missing, the gateway addresses on it with
 * `isGateway`), addressed by the attachment's IPAM plugin, in the reference bridge plugin's config
 * format, with a default route through the gateway only with `isDefaultGateway`. Settings this
 * driver does not implement (`vlan`, `ipMasq`, `promiscMode`, …, and IPAM `routes`) send the
 * attachment to the reference plugin instead (see {@link nativeBridgeConf}).
 *
 * @module
 */
import type { NadBridgeConf } from "./nad_bridge_schema.ts";
import { validateNadBridgeConf } from "../../lib/_generated/validateNadBridgeConf.js";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { CniResult, NetConf } from "../../lib/cni/schemas.ts";
import { checkShape } from "../../lib/validate.ts";
import { hostLinkName, stableMac } from "../net/naming.ts";
import type { Plumber, VethSpec } from "../net/plumber.ts";
import { firstDifference } from "../service/live_check.ts";
import { vethResult } from "./bridge.ts";
import type { AddContext, Driver, Plugged, RecordContext } from "./driver.ts";
import { refuseTakenName } from "./driver.ts";
import type { NativeNadIpam } from "./nad_native_ipam.ts";
import { ipamAdd, type IpamCall, ipamCheck, ipamDel } from "./ipam_exec.ts";
import type { PortGuard } from "../portsec/port_guard.ts";

/** Reference bridge settings this driver does not implement: present and set, they delegate. */
const DELEGATED_SETTINGS = [
  "vlan",
  "vlanTrunk",
  "preserveDefaultVlan",
  "ipMasq",
  "ipMasqBackend",
  "promiscMode",
  "macspoofchk",
  "enabledad",
  "forceAddress",
  "disableContainerInterface",
  "portIsolation",
];

/** Whether a `bridge` config can be plugged natively (no setting the native driver lacks). */
export function nativeBridgeConf(conf: NetConf): boolean {
  const c = conf as Record<string, unknown>;
  const ipam = c.ipam as Record<string, unknown> | undefined;
  // IPAM routes are installed by the reference plugin; this driver sets only default routes.
  return conf.type === "bridge" && !ipam?.routes &&
    !DELEGATED_SETTINGS.some((k) => c[k] !== undefined && c[k] !== false);
}

/**
 * The driver.
 *
 * @example
 * ```ts
 * const bridge = new NadBridgeDriver(plumber, () => AbortSignal.timeout(60_000));
 * ```
 */
export class NadBridgeDriver implements Driver {
  readonly #plumber: Plumber;
  readonly #pluginTimeoutMs: number;
  readonly #guard?: Pick<PortGuard, "close" | "admit" | "release">;
  readonly #validate = validateNadBridgeConf;

  readonly #native?: NativeNadIpam;

  /**
   * Creates the driver; its IPAM plugin is killed after `pluginTimeoutMs`. With `guard` (port
   * security), each pod's port is under guard before its ADD answers, as on the default network;
   * `native` serves whereabouts configs in-process.
   */
  constructor(
    plumber: Plumber,
    pluginTimeoutMs: number,
    guard?: Pick<PortGuard, "close" | "admit" | "release">,
    native?: NativeNadIpam,
  ) {
    this.#native = native;
    this.#plumber = plumber;
    this.#pluginTimeoutMs = pluginTimeoutMs;
    this.#guard = guard;
  }

  #conf(conf: NetConf): NadBridgeConf {
    return checkShape<NadBridgeConf>(
      this.#validate,
      conf,
      CNI_ERROR.INVALID_CONFIG,
      `bridge config of network ${conf.name}`,
    );
  }

  #ipam(ctx: RecordContext | AddContext): IpamCall {
    return { ...ctx, timeoutMs: this.#pluginTimeoutMs, native: this.#native };
  }

  /** Addresses from the IPAM plugin, the bridge (with gateways), the veth; undone on failure. */
  async add(ctx: AddContext): Promise<Plugged> {
    const conf = this.#conf(ctx.conf);
    const { key, netns } = ctx;
    await refuseTakenName(this.#plumber, ctx);
    const ipam: CniResult = ctx.conf.ipam
      ? await ipamAdd(this.#ipam(ctx))
      : { cniVersion: ctx.conf.cniVersion };
    const bridge = conf.bridge ?? "cni0";
    const mtu = conf.mtu ?? 1500;
    const ips = ipam.ips ?? [];
    const spec: VethSpec = {
      netns,
      ifname: key.ifname,
      hostIfname: hostLinkName(key.containerId, key.ifname),
      bridge,
      containerMac: stableMac(key.containerId, key.ifname, "container"),
      hostMac: stableMac(key.containerId, key.ifname, "host"),
      mtu,
      addresses: ips.map((ip) => ({
        cidr: ip.address,
        ...(conf.isDefaultGateway && ip.gateway ? { gateway: ip.gateway } : {}),
      })),
    };
    try {
      await this.#plumber.ensureBridge({
        name: bridge,
        mtu,
        gateways: conf.isGateway || conf.isDefaultGateway
          ? ips.filter((ip) => ip.gateway).map((ip) => `${ip.gateway}/${ip.address.split("/")[1]}`)
          : [],
      });
      // Closed before its link exists: the port sends nothing until its pod is admitted.
      await this.#guard?.close(spec.hostIfname);
      await this.#plumber.plugVeth(spec);
      await this.#guard?.admit({
        port: spec.hostIfname,
        mac: spec.containerMac,
        ips: ips.map((ip) => ip.address.split("/")[0]),
      });
    } catch (e) {
      await this.#plumber.unplugVeth(spec.hostIfname).catch(() => {});
      await this.#guard?.release({
        port: spec.hostIfname,
        mac: spec.containerMac,
        ips: ips.map((ip) => ip.address.split("/")[0]),
      });
      if (ctx.conf.ipam) await ipamDel(this.#ipam(ctx)).catch(() => {});
      throw e instanceof CniError
        ? e
        : new CniError(CNI_ERROR.IO_FAILURE, `cannot plug ${key.ifname} on ${bridge}`, String(e));
    }
    const result = vethResult(spec, ctx.prevResult);
    if (ipam.dns) result.dns = ipam.dns;
    return { result, hostIfname: spec.hostIfname };
  }

  /** Removes the host end (the pod end goes with it) and releases the addresses. */
  async del(ctx: RecordContext): Promise<void> {
    this.#conf(ctx.conf);
    const port = ctx.record?.hostIfname ?? hostLinkName(ctx.key.containerId, ctx.key.ifname);
    // The link goes first: the pod sends as itself until then, never as anyone.
    await this.#plumber.unplugVeth(port);
    await this.#guard?.release({
      port,
      mac: stableMac(ctx.key.containerId, ctx.key.ifname, "container"),
      ips: (ctx.record?.result.ips ?? []).map((ip) => ip.address.split("/")[0]),
    });
    if (ctx.conf.ipam) await ipamDel(this.#ipam(ctx));
  }

  /** The IPAM plugin's CHECK, then the link, addresses and routes, and the host end's bridge. */
  async check(ctx: RecordContext & { netns: string }, expected: CniResult): Promise<void> {
    const conf = this.#conf(ctx.conf);
    if (ctx.conf.ipam) await ipamCheck(this.#ipam(ctx), expected);
    const live = await this.#plumber.inspect(ctx.netns, ctx.key.ifname);
    const diff = firstDifference(expected, ctx.key.ifname, ctx.netns, live);
    if (diff) throw new CniError(CNI_ERROR.CHECK_MISMATCH, diff);
    const host = hostLinkName(ctx.key.containerId, ctx.key.ifname);
    if (!(await this.#plumber.bridgePorts(conf.bridge ?? "cni0")).includes(host)) {
      throw new CniError(
        CNI_ERROR.CHECK_MISMATCH,
        `host link ${host} is not a port of bridge ${conf.bridge ?? "cni0"}`,
      );
    }
  }
}
