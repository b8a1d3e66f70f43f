/**
 * Multi-VIF drivers (the kuryr multi-VIF design): each looks at a pod and says which additional
 * attachments it wants besides the default network's interface; the daemon plugs them all. Drivers
 * are enabled by name, in order, from a table built at start (`multiVifDrivers`): `npwg` (the
 * Network Plumbing Working Group annotation and NetworkAttachmentDefinitions) and `noop`
 * (nothing).
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { NetConf } from "../../lib/cni/schemas.ts";
import {
  jsonBoundsProblem,
  MAX_CONFIG_DEPTH,
  MAX_NAD_CONFIG_BYTES,
} from "../../lib/json_bounds.ts";
import type { RegisteredPod } from "../records/registry.ts";
import type { NadCache } from "./nad_cache.ts";
import { guardNadPlugins, type NadGuard, resultRefusal } from "./nad_guard.ts";
import { foldKey, respelled } from "../../lib/cni/json_keys.ts";
import { NATIVE_KEYS } from "../drivers/native_keys.ts";
import { pluginDriver } from "./plugin_driver.ts";
import { FERRY_IPAM_TYPE } from "../ipam/nad_ferry_ipam.ts";
import {
  DEFAULT_NETWORK_ANNOTATION,
  interfaceNames,
  NETWORKS_ANNOTATION,
  type NetworkSelection,
  parseSelections,
} from "./selections.ts";

/** One attachment a driver asks for. */
export interface RequestedAttachment {
  /** The network's name as network-status shows it (`namespace/name` of its NAD). */
  network: string;
  /** The interface in the pod. */
  ifname: string;
  /** The plugins to run, in order (one for a single config; a conflist's chain otherwise). */
  plugins: NetConf[];
  /** Gateways the pod's default route should go through on this interface (`default-route`). */
  defaultRoute?: string[];
  /**
   * Why the chain's result may not stand (an address it got at ADD in Ferry's pod ranges), or
   * undefined; the attachment is undone when it says why (the NAD guard's `resultRefusal`).
   */
  checkResult?: (result: unknown) => string | undefined;
}

/** A multi-VIF driver. */
export interface MultiVifDriver {
  /** Its name in `multiVifDrivers`. */
  readonly name: string;
  /**
   * The pod's additional attachments.
   *
   * @throws {CniError} code 7 for a bad annotation or NAD (naming the pod), 11 when a selected
   * NAD has not reached the watch before `signal` aborts.
   */
  requested(
    pod: RegisteredPod,
    defaultIfname: string,
    signal: AbortSignal,
  ): Promise<{ attachments: RequestedAttachment[]; warnings: string[] }>;
  /**
   * The network that replaces the pod's default network on `ifname`, if the pod asks for one.
   *
   * @throws {CniError} as {@link MultiVifDriver.requested}.
   */
  defaultNetwork?(
    pod: RegisteredPod,
    ifname: string,
    signal: AbortSignal,
  ): Promise<RequestedAttachment | undefined>;
}

/** The `noop` driver: no additional attachments (kuryr's default). */
export class NoopDriver implements MultiVifDriver {
  /** `noop`. */
  readonly name = "noop";

  /** Nothing. */
  requested(): Promise<{ attachments: RequestedAttachment[]; warnings: string[] }> {
    return Promise.resolve({ attachments: [], warnings: [] });
  }
}

/** What the `npwg` driver needs. */
export interface NpwgDeps {
  /** The NAD watch's cache (waiting starts the watch when it is not running yet). */
  nads: Pick<NadCache, "waitFor">;
  /** Whether a pod may select a NAD of another namespace. */
  allowCrossNamespace: boolean;
  /** Prefix of generated interface names (`net` → net1, net2, …). */
  interfacePrefix: string;
  /** Where a NAD without `spec.config` finds its config (`<name>.conflist`, `.conf`, `.json`). */
  configDir: string;
  /** Reads a file; undefined when it does not exist. */
  readFile: (path: string) => Promise<string | undefined>;
  /** What a NAD may ask of the node (see `nad_guard.ts`); unchecked when absent. */
  guard?: NadGuard;
}

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);

/** Keys (folded) only the runtime sets; a NAD's own are dropped (and `plugins`, the list's). */
const RUNTIME_KEYS = new Set(["runtimeconfig", "prevresult", "plugins"]);

/**
 * The plugins of a NAD config (single or conflist), each a complete config: the keys Ferry reads
 * spelled as it reads them, in whatever case a Go plugin reads them (`native_keys.ts`; two keys
 * that are one to it are refused), `cniVersion` and `name` inherited from the list (or the NAD's
 * name), runtimeConfig from the selection for the capabilities a plugin declares (a NAD's own
 * `runtimeConfig` and `prevResult` are dropped: they are the runtime's to give, and would hand a
 * plugin ranges or port mappings nobody checked), `cni-args` as `args.cni`.
 *
 * @throws {CniError} code 7 naming the pod and the NAD.
 */
export function nadPlugins(
  text: string,
  nad: { namespace: string; name: string },
  selection: NetworkSelection,
  pod: string,
): NetConf[] {
  const fail = (why: string) =>
    new CniError(
      CNI_ERROR.INVALID_CONFIG,
      `pod ${pod}: NetworkAttachmentDefinition ${nad.namespace}/${nad.name}: ${why}`,
    );
  // Bounded before anything parses or walks it (every walk recurses once per level).
  const unbounded = jsonBoundsProblem(text, {
    maxDepth: MAX_CONFIG_DEPTH,
    maxBytes: MAX_NAD_CONFIG_BYTES,
  });
  if (unbounded) throw fail(`its config is refused: ${unbounded}`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw fail(`its config is not valid JSON (${e instanceof Error ? e.message : e})`);
  }
  if (!isObject(parsed)) throw fail("its config is not a JSON object");
  const cniVersion = typeof parsed.cniVersion === "string" ? parsed.cniVersion : "1.0.0";
  const name = typeof parsed.name === "string" ? parsed.name : nad.name;
  const list = parsed.plugins === undefined ? [parsed] : parsed.plugins;
  if (!Array.isArray(list) || list.length === 0) throw fail("plugins must be a non-empty list");
  const runtime: Record<string, unknown> = {};
  if (selection.ips) runtime.ips = selection.ips;
  if (selection.mac) runtime.mac = selection.mac;
  if (selection.portMappings) runtime.portMappings = selection.portMappings;
  if (selection.bandwidth) runtime.bandwidth = selection.bandwidth;
  return list.map((written, i) => {
    if (!isObject(written)) throw fail(`plugin ${i} has no type`);
    // What the runtime alone may hand a plugin (runtimeConfig, prevResult) is never taken from
    // the tenant's config, in whatever case a Go plugin would read the key.
    const own = Object.fromEntries(
      Object.entries(written).filter(([k]) => !RUNTIME_KEYS.has(foldKey(k))),
    );
    // The keys Ferry reads, spelled as it reads them: what a Go plugin reads in any case is what
    // the guard checks (keys folded) and what the native drivers and IPAM act on.
    const { value, clash } = respelled(own, NATIVE_KEYS);
    if (clash) {
      throw fail(
        `plugin ${i}: its keys ${JSON.stringify(clash.keys[0])} and ` +
          `${JSON.stringify(clash.keys[1])} (${clash.at}) are one key to a Go plugin`,
      );
    }
    const p = value as Record<string, unknown>;
    if (typeof p.type !== "string" || p.type === "") throw fail(`plugin ${i} has no type`);
    if (p.type === "ferry") throw fail("a NAD cannot delegate to Ferry itself");
    const conf: Record<string, unknown> = { ...p, cniVersion, name, type: p.type };
    const caps = isObject(p.capabilities) ? p.capabilities : {};
    const rc: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(runtime)) if (caps[k] === true) rc[k] = v;
    if (Object.keys(rc).length) conf.runtimeConfig = rc;
    if (selection.cniArgs) {
      const args = isObject(p.args) ? p.args : {};
      conf.args = {
        ...args,
        cni: { ...(isObject(args.cni) ? args.cni : {}), ...selection.cniArgs },
      };
    }
    // Ferry's own IPAM type is served in the daemon, by the drivers that plug a NAD natively;
    // a delegated plugin would exec the shim as an IPAM binary.
    if (
      isObject(p.ipam) && p.ipam.type === FERRY_IPAM_TYPE &&
      pluginDriver(conf as NetConf, i) === "delegate"
    ) {
      throw fail(
        `plugin ${i} (${p.type}): ipam.type ${FERRY_IPAM_TYPE} is served only for the first ` +
          "plugin of a NAD, when it is macvlan, ipvlan or a bridge Ferry plugs itself",
      );
    }
    return conf as NetConf;
  });
}

/**
 * The `npwg` driver.
 *
 * @example
 * ```ts
 * const npwg = new NpwgDriver({ nads, allowCrossNamespace: false, interfacePrefix: "net",
 *   configDir: "/etc/cni/multus/net.d", readFile });
 * const { attachments } = await npwg.requested(pod, "eth0", AbortSignal.timeout(60_000));
 * ```
 */
export class NpwgDriver implements MultiVifDriver {
  /** `npwg`. */
  readonly name = "npwg";
  readonly #d: NpwgDeps;

  /** Creates the driver. */
  constructor(deps: NpwgDeps) {
    this.#d = deps;
  }

  /** The attachments the pod's annotation selects, resolved through the NAD cache. */
  async requested(
    pod: RegisteredPod,
    defaultIfname: string,
    signal: AbortSignal,
  ): Promise<{ attachments: RequestedAttachment[]; warnings: string[] }> {
    const podName = `${pod.namespace}/${pod.name}`;
    const annotation = pod.annotations[NETWORKS_ANNOTATION];
    if (!annotation) return { attachments: [], warnings: [] };
    const { selections, warnings } = parseSelections(annotation, pod.namespace, podName);
    const names = interfaceNames(selections, defaultIfname, this.#d.interfacePrefix, podName);
    const attachments: RequestedAttachment[] = [];
    for (const [i, s] of selections.entries()) {
      attachments.push(await this.#resolve(s, names[i], pod, signal));
    }
    return { attachments, warnings };
  }

  /** The NAD named by `v1.multus-cni.io/default-network` (`name` or `namespace/name`). */
  async defaultNetwork(
    pod: RegisteredPod,
    ifname: string,
    signal: AbortSignal,
  ): Promise<RequestedAttachment | undefined> {
    const text = pod.annotations[DEFAULT_NETWORK_ANNOTATION]?.trim();
    if (!text) return undefined;
    const podName = `${pod.namespace}/${pod.name}`;
    const { selections } = parseSelections(text, pod.namespace, podName);
    if (selections.length !== 1 || selections[0].interface) {
      throw new CniError(
        CNI_ERROR.INVALID_CONFIG,
        `pod ${podName}: ${DEFAULT_NETWORK_ANNOTATION} must name one network (no @interface)`,
      );
    }
    return await this.#resolve(selections[0], ifname, pod, signal);
  }

  async #resolve(
    s: NetworkSelection,
    ifname: string,
    pod: RegisteredPod,
    signal: AbortSignal,
  ): Promise<RequestedAttachment> {
    const podName = `${pod.namespace}/${pod.name}`;
    if (s.namespace !== pod.namespace && !this.#d.allowCrossNamespace) {
      throw new CniError(
        CNI_ERROR.INVALID_CONFIG,
        `pod ${podName}: network ${s.namespace}/${s.name} is in another namespace ` +
          "(multiNetwork.allowCrossNamespace is off)",
      );
    }
    let nad;
    try {
      nad = await this.#d.nads.waitFor(s.namespace, s.name, signal);
    } catch {
      throw new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        `pod ${podName}: NetworkAttachmentDefinition ${s.namespace}/${s.name} is not known (yet)`,
      );
    }
    const text = nad.config ?? await this.#fromDir(s.name);
    if (text === undefined) {
      throw new CniError(
        CNI_ERROR.INVALID_CONFIG,
        `pod ${podName}: NetworkAttachmentDefinition ${s.namespace}/${s.name} has no ` +
          `spec.config and ${this.#d.configDir} has no ${s.name}.conflist, .conf or .json`,
      );
    }
    const attachment: RequestedAttachment = {
      network: `${s.namespace}/${s.name}`,
      ifname,
      plugins: this.#d.guard
        ? await guardNadPlugins(nadPlugins(text, nad, s, podName), this.#d.guard, s, podName)
        : nadPlugins(text, nad, s, podName),
    };
    if (s.defaultRoute?.length) attachment.defaultRoute = s.defaultRoute;
    const guard = this.#d.guard;
    if (guard) attachment.checkResult = (result) => resultRefusal(result, () => guard.ranges());
    return attachment;
  }

  async #fromDir(name: string): Promise<string | undefined> {
    for (const ext of ["conflist", "conf", "json"]) {
      const text = await this.#d.readFile(`${this.#d.configDir}/${name}.${ext}`);
      if (text !== undefined) return text;
    }
    return undefined;
  }
}
