/**
 * The `bridge` type of an additional network, plugged natively: a veth pair whose host end joins
 * a second bridge named by the config (created when missing, the gateway addresses on it with
 * `isGateway`), addressed by the attachment's IPAM plugin, in the reference bridge plugin's config
 * format (keys in any case, as that plugin reads them: `native_keys.ts`), with a default route
 * through the gateway only with `isDefaultGateway`. Settings this
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
import { firstDifference } from "./live_check.ts";
import { vethResult } from "./bridge.ts";
import type { AddContext, Driver, Plugged, RecordContext } from "./driver.ts";
import { refuseTakenName } from "./driver.ts";
import type { NativeNadIpam } from "./nad_native_ipam.ts";
import { ipamAdd, type IpamCall, ipamCheck, ipamDel } from "./ipam_exec.ts";
import type { PortGuard } from "../portsec/port_guard.ts";
import { canonicalIp } from "../ipam/cidr.ts";
import { BRIDGE_DELEGATED_KEYS, nativeSpelled } from "./native_keys.ts";

/** The bridge the reference plugin (and this driver) joins when a config names none. */
const DEFAULT_BRIDGE = "cni0";

/**
 * The bridge a `bridge` config joins: its `bridge` in any case, or `cni0`.
 *
 * @throws {CniError} code 7 when two of its keys are one key to a Go plugin.
 * @example
 * ```ts
 * bridgeOf({ cniVersion: "1.0.0", name: "n", type: "bridge", Bridge: "br-t" } as NetConf);
 * // "br-t"
 * ```
 */
export function bridgeOf(conf: NetConf): string {
  return (nativeSpelled(conf) as { bridge?: string }).bridge ?? DEFAULT_BRIDGE;
}

/**
 * The addresses other interfaces of this node hold on bridge `bridge` (their records), leaving
 * out the interface `except` itself.
 */
export type HeldOnBridge = (
  bridge: string,
  except: { containerId: string; ifname: string },
) => string[];

/**
 * {@link HeldOnBridge} from attachment records: the native bridge attachments (first plugin of a
 * chain, the bridge named or `cni0`) and their result's addresses.
 *
 * @example
 * ```ts
 * const held = heldOnBridgeFrom(() => store.list());
 * held("br-tenant", { containerId: "c1", ifname: "net1" }); // ["192.168.50.2"]
 * ```
 */
export function heldOnBridgeFrom(
  records: () => {
    containerId: string;
    ifname: string;
    driver?: string;
    conf?: NetConf;
    result: CniResult;
  }[],
): HeldOnBridge {
  return (bridge, except) =>
    records()
      .filter((r) =>
        r.driver === "nad-bridge" && r.conf !== undefined && bridgeOf(r.conf) === bridge &&
        !(r.containerId === except.containerId && r.ifname === except.ifname)
      )
      .flatMap((r) =>
        (r.result.ips ?? []).map((ip) => canonicalIp(ip.address.split("/")[0]) ?? ip.address)
      );
}

/**
 * Whether a `bridge` config can be plugged natively: no setting the native driver lacks
 * ({@link BRIDGE_DELEGATED_KEYS}, IPAM `routes`), in whatever case it is written.
 *
 * @throws {CniError} code 7 when two of its keys are one key to a Go plugin.
 */
export function nativeBridgeConf(conf: NetConf): boolean {
  if (conf.type !== "bridge") return false;
  const c = nativeSpelled(conf) as Record<string, unknown>;
  const ipam = c.ipam as Record<string, unknown> | undefined;
  // IPAM routes are installed by the reference plugin; this driver sets only default routes.
  return !ipam?.routes && !BRIDGE_DELEGATED_KEYS.some((k) => c[k] !== undefined && c[k] !== false);
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
  readonly #guard?: Pick<PortGuard, "group" | "admit" | "release">;
  readonly #validate = validateNadBridgeConf;

  readonly #native?: NativeNadIpam;
  readonly #held?: HeldOnBridge;
  /**
   * Addresses this daemon plugged on each bridge since it started, until their DEL (an ADD's
   * record is written only once its whole chain is plugged; earlier ones come from `held`).
   */
  readonly #inFlight = new Map<string, Map<string, string>>();

  /**
   * Creates the driver; its IPAM plugin is killed after `pluginTimeoutMs`. With `guard` (port
   * security), each pod's port is under guard before its ADD answers, as on the default network;
   * `native` serves whereabouts configs in-process; with `held`, an address another interface of
   * the same bridge holds is refused (code 7): a pod cannot take a neighbour's address there
   * through its own NAD's IPAM (a static address, a second NAD on the same bridge).
   */
  constructor(
    plumber: Plumber,
    pluginTimeoutMs: number,
    guard?: Pick<PortGuard, "group" | "admit" | "release">,
    native?: NativeNadIpam,
    held?: HeldOnBridge,
  ) {
    this.#native = native;
    this.#held = held;
    this.#plumber = plumber;
    this.#pluginTimeoutMs = pluginTimeoutMs;
    this.#guard = guard;
  }

  /** The config with its keys spelled as read here (`native_keys.ts`), checked. */
  #conf(conf: NetConf): NetConf & NadBridgeConf {
    return checkShape<NetConf & NadBridgeConf>(
      this.#validate,
      nativeSpelled(conf),
      CNI_ERROR.INVALID_CONFIG,
      `bridge config of network ${conf.name}`,
    );
  }

  /** The IPAM call of `ctx`, on `conf` (its keys spelled as read here). */
  #ipam(ctx: RecordContext | AddContext, conf: NetConf): IpamCall {
    return { ...ctx, conf, timeoutMs: this.#pluginTimeoutMs, native: this.#native };
  }

  /** Addresses from the IPAM plugin, the bridge (with gateways), the veth; undone on failure. */
  async add(ctx: AddContext): Promise<Plugged> {
    const conf = this.#conf(ctx.conf);
    const { key, netns } = ctx;
    await refuseTakenName(this.#plumber, ctx);
    const ipam: CniResult = conf.ipam
      ? await ipamAdd(this.#ipam(ctx, conf))
      : { cniVersion: conf.cniVersion };
    const bridge = conf.bridge ?? DEFAULT_BRIDGE;
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
      // Made in the guard's group: the port sends nothing until its pod is admitted.
      ...(this.#guard ? { hostGroup: this.#guard.group } : {}),
    };
    const mine = ips.map((ip) => canonicalIp(ip.address.split("/")[0]) ?? ip.address);
    const owner = `${key.containerId}/${key.ifname}`;
    try {
      // Checked and taken in one step (no await between): two ADDs cannot both find it free.
      const taken = this.#takenOn(bridge, key).find((t) => mine.includes(t));
      if (taken) {
        throw new CniError(
          CNI_ERROR.INVALID_CONFIG,
          `address ${taken} is already held by another interface on bridge ${bridge}`,
        );
      }
      const inFlight = this.#inFlight.get(bridge) ?? new Map<string, string>();
      this.#inFlight.set(bridge, inFlight);
      for (const ip of mine) inFlight.set(ip, owner);
      await this.#plumber.ensureBridge({
        name: bridge,
        mtu,
        gateways: conf.isGateway || conf.isDefaultGateway
          ? ips.filter((ip) => ip.gateway).map((ip) => `${ip.gateway}/${ip.address.split("/")[1]}`)
          : [],
      });
      await this.#plumber.plugVeth(spec);
      await this.#guard?.admit({
        port: spec.hostIfname,
        mac: spec.containerMac,
        ips: ips.map((ip) => ip.address.split("/")[0]),
      });
    } catch (e) {
      this.#forget(bridge, owner);
      await this.#plumber.unplugVeth(spec.hostIfname).catch(() => {});
      await this.#guard?.release({
        port: spec.hostIfname,
        mac: spec.containerMac,
        ips: ips.map((ip) => ip.address.split("/")[0]),
      });
      if (conf.ipam) await ipamDel(this.#ipam(ctx, conf)).catch(() => {});
      throw e instanceof CniError
        ? e
        : new CniError(CNI_ERROR.IO_FAILURE, `cannot plug ${key.ifname} on ${bridge}`, String(e));
    }
    const result = vethResult(spec, ctx.prevResult);
    if (ipam.dns) result.dns = ipam.dns;
    return { result, hostIfname: spec.hostIfname };
  }

  /** Addresses other interfaces hold on `bridge` (recorded, or plugged by an ADD under way). */
  #takenOn(bridge: string, key: { containerId: string; ifname: string }): string[] {
    const owner = `${key.containerId}/${key.ifname}`;
    const flying = [...(this.#inFlight.get(bridge) ?? new Map<string, string>())]
      .filter(([, o]) => o !== owner)
      .map(([ip]) => ip);
    return [...flying, ...(this.#held?.(bridge, key) ?? [])];
  }

  #forget(bridge: string, owner: string): void {
    const inFlight = this.#inFlight.get(bridge);
    for (const [ip, o] of inFlight ?? []) if (o === owner) inFlight!.delete(ip);
    if (inFlight?.size === 0) this.#inFlight.delete(bridge);
  }

  /** An interface's DEL: its addresses are free on its bridge. */
  #settled(key: { containerId: string; ifname: string }): void {
    for (const bridge of [...this.#inFlight.keys()]) {
      this.#forget(bridge, `${key.containerId}/${key.ifname}`);
    }
  }

  /** Removes the host end (the pod end goes with it) and releases the addresses. */
  async del(ctx: RecordContext): Promise<void> {
    const conf = this.#conf(ctx.conf);
    this.#settled(ctx.key);
    const port = ctx.record?.hostIfname ?? hostLinkName(ctx.key.containerId, ctx.key.ifname);
    // The link goes first: the pod sends as itself until then, never as anyone.
    await this.#plumber.unplugVeth(port);
    await this.#guard?.release({
      port,
      mac: stableMac(ctx.key.containerId, ctx.key.ifname, "container"),
      ips: (ctx.record?.result.ips ?? []).map((ip) => ip.address.split("/")[0]),
    });
    if (conf.ipam) await ipamDel(this.#ipam(ctx, conf));
  }

  /** The IPAM plugin's CHECK, then the link, addresses and routes, and the host end's bridge. */
  async check(ctx: RecordContext & { netns: string }, expected: CniResult): Promise<void> {
    const conf = this.#conf(ctx.conf);
    if (conf.ipam) await ipamCheck(this.#ipam(ctx, conf), expected);
    const live = await this.#plumber.inspect(ctx.netns, ctx.key.ifname);
    const diff = firstDifference(expected, ctx.key.ifname, ctx.netns, live);
    if (diff) throw new CniError(CNI_ERROR.CHECK_MISMATCH, diff);
    const host = hostLinkName(ctx.key.containerId, ctx.key.ifname);
    const bridge = conf.bridge ?? DEFAULT_BRIDGE;
    if (!(await this.#plumber.bridgePorts(bridge)).includes(host)) {
      throw new CniError(
        CNI_ERROR.CHECK_MISMATCH,
        `host link ${host} is not a port of bridge ${bridge}`,
      );
    }
  }
}
