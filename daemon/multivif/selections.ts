/**
 * The NPWG network selection annotation (`k8s.v1.cni.cncf.io/networks`), parsed and checked.
 * Pure. Both forms of the Kubernetes Network Plumbing Working Group v1 spec:
 *
 * - a comma list: `net`, `ns/net`, `net@ifname`, `ns/net@ifname`;
 * - a JSON list of selection elements: `name` (required), `namespace`, `interface`, `ips`, `mac`,
 *   `default-route`, `cni-args`, `portMappings`, `bandwidth` (`infiniband-guid` is ignored, with a
 *   warning, as this node has no InfiniBand support).
 *
 * A selection without a namespace refers to the pod's namespace.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import { IFNAME_PATTERN } from "../../lib/cni/names.ts";
import {
  jsonBoundsProblem,
  MAX_CONFIG_DEPTH,
  MAX_NAD_CONFIG_BYTES,
} from "../../lib/json_bounds.ts";
import { parseCidr, parseIp } from "../ipam/cidr.ts";

/** The annotation that selects a pod's additional networks. */
export const NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks";
/** The annotation Ferry writes after ADD: every interface of the pod, default network first. */
export const NETWORK_STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status";
/** The annotation that replaces a pod's default network with a NetworkAttachmentDefinition. */
export const DEFAULT_NETWORK_ANNOTATION = "v1.multus-cni.io/default-network";

/** One requested attachment. */
export interface NetworkSelection {
  /** The NetworkAttachmentDefinition's namespace (the pod's when the selection names none). */
  namespace: string;
  /** Its name. */
  name: string;
  /** The interface name asked for, if any. */
  interface?: string;
  /** Static addresses (`ips` runtimeConfig), CIDR or bare. */
  ips?: string[];
  /** A static MAC (`mac` runtimeConfig). */
  mac?: string;
  /** Gateways this attachment's default route should use. */
  defaultRoute?: string[];
  /** Extra CNI args for the attachment's plugin (`cni-args`). */
  cniArgs?: Record<string, unknown>;
  /** `portMappings` runtimeConfig. */
  portMappings?: unknown[];
  /** `bandwidth` runtimeConfig. */
  bandwidth?: Record<string, unknown>;
}

/** What parsing found besides the selections. */
export interface ParsedSelections {
  /** The selections, in order. */
  selections: NetworkSelection[];
  /** Things ignored, to log. */
  warnings: string[];
}

const NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;
const MAC = /^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/;
const IFNAME = new RegExp(IFNAME_PATTERN);
const KNOWN = new Set([
  "name",
  "namespace",
  "interface",
  "ips",
  "mac",
  "default-route",
  "cni-args",
  "portMappings",
  "bandwidth",
  "infiniband-guid",
]);

function invalid(pod: string, why: string): CniError {
  return new CniError(
    CNI_ERROR.INVALID_CONFIG,
    `pod ${pod}: invalid ${NETWORKS_ANNOTATION}: ${why}`,
  );
}

function checkName(pod: string, kind: string, value: unknown): string {
  if (typeof value !== "string" || value.length > 253 || !NAME.test(value)) {
    throw invalid(pod, `${kind} ${JSON.stringify(value)} is not a valid object name`);
  }
  return value;
}

function checkIfname(pod: string, value: unknown): string {
  if (typeof value !== "string" || !IFNAME.test(value)) {
    throw invalid(pod, `interface ${JSON.stringify(value)} is not a valid interface name`);
  }
  return value;
}

function checkIp(pod: string, value: unknown): string {
  if (typeof value !== "string") throw invalid(pod, `ip ${JSON.stringify(value)} is not text`);
  try {
    if (value.includes("/")) parseCidr(value);
    else parseIp(value);
  } catch {
    throw invalid(pod, `ip ${JSON.stringify(value)} is not an address`);
  }
  return value;
}

function fromText(item: string, podNamespace: string, pod: string): NetworkSelection {
  const trimmed = item.trim();
  const at = trimmed.indexOf("@");
  const ref = at < 0 ? trimmed : trimmed.slice(0, at);
  const ifname = at < 0 ? undefined : trimmed.slice(at + 1);
  const slash = ref.indexOf("/");
  const selection: NetworkSelection = slash < 0
    ? { namespace: podNamespace, name: checkName(pod, "network", ref) }
    : {
      namespace: checkName(pod, "namespace", ref.slice(0, slash)),
      name: checkName(pod, "network", ref.slice(slash + 1)),
    };
  if (ifname !== undefined) selection.interface = checkIfname(pod, ifname);
  return selection;
}

function fromJson(
  element: unknown,
  podNamespace: string,
  pod: string,
  warnings: string[],
): NetworkSelection {
  if (typeof element !== "object" || element === null || Array.isArray(element)) {
    throw invalid(pod, "each element of the JSON list must be an object");
  }
  const e = element as Record<string, unknown>;
  const selection: NetworkSelection = {
    namespace: e.namespace === undefined ? podNamespace : checkName(pod, "namespace", e.namespace),
    name: checkName(pod, "network", e.name),
  };
  if (e.interface !== undefined) selection.interface = checkIfname(pod, e.interface);
  if (e.ips !== undefined) {
    if (!Array.isArray(e.ips)) throw invalid(pod, "ips must be a list");
    selection.ips = e.ips.map((ip) => checkIp(pod, ip));
  }
  if (e.mac !== undefined) {
    if (typeof e.mac !== "string" || !MAC.test(e.mac)) {
      throw invalid(pod, `mac ${JSON.stringify(e.mac)} is not a MAC address`);
    }
    selection.mac = e.mac.toLowerCase();
  }
  if (e["default-route"] !== undefined) {
    if (!Array.isArray(e["default-route"])) throw invalid(pod, "default-route must be a list");
    selection.defaultRoute = e["default-route"].map((ip) => checkIp(pod, ip));
  }
  if (e["cni-args"] !== undefined) {
    if (
      typeof e["cni-args"] !== "object" || e["cni-args"] === null || Array.isArray(e["cni-args"])
    ) {
      throw invalid(pod, "cni-args must be an object");
    }
    selection.cniArgs = e["cni-args"] as Record<string, unknown>;
  }
  if (e.portMappings !== undefined) {
    if (!Array.isArray(e.portMappings)) throw invalid(pod, "portMappings must be a list");
    selection.portMappings = e.portMappings;
  }
  if (e.bandwidth !== undefined) {
    if (typeof e.bandwidth !== "object" || e.bandwidth === null || Array.isArray(e.bandwidth)) {
      throw invalid(pod, "bandwidth must be an object");
    }
    selection.bandwidth = e.bandwidth as Record<string, unknown>;
  }
  if (e["infiniband-guid"] !== undefined) {
    warnings.push(`infiniband-guid of ${selection.namespace}/${selection.name} ignored`);
  }
  for (const key of Object.keys(e)) {
    if (!KNOWN.has(key)) warnings.push(`unknown key ${key} of ${selection.name} ignored`);
  }
  return selection;
}

/**
 * Parses the annotation of the pod `pod` (namespace/name, for messages) in `podNamespace`.
 *
 * @throws {CniError} code 7 naming the pod and what is wrong.
 * @example
 * ```ts
 * parseSelections("macvlan-conf@net5, other/sriov", "default", "default/web-0").selections;
 * // [{ namespace: "default", name: "macvlan-conf", interface: "net5" }, { namespace: "other", name: "sriov" }]
 * ```
 */
export function parseSelections(
  annotation: string,
  podNamespace: string,
  pod: string,
): ParsedSelections {
  const text = annotation.trim();
  const warnings: string[] = [];
  if (text === "") return { selections: [], warnings };
  let selections: NetworkSelection[];
  if (text.startsWith("[")) {
    // Bounded before it is parsed and walked (cni-args are copied into a plugin's config).
    const unbounded = jsonBoundsProblem(text, {
      maxDepth: MAX_CONFIG_DEPTH,
      maxBytes: MAX_NAD_CONFIG_BYTES,
    });
    if (unbounded) throw invalid(pod, unbounded);
    let list: unknown;
    try {
      list = JSON.parse(text);
    } catch (e) {
      throw invalid(pod, `not valid JSON (${e instanceof Error ? e.message : e})`);
    }
    if (!Array.isArray(list)) throw invalid(pod, "the JSON form must be a list");
    selections = list.map((el) => fromJson(el, podNamespace, pod, warnings));
  } else {
    if (text.startsWith("{")) throw invalid(pod, "the JSON form must be a list, not an object");
    selections = text.split(",").map((item) => fromText(item, podNamespace, pod));
  }
  return { selections, warnings };
}

/**
 * The interface names of `selections`: an explicit one wins; the others get `prefix1`,
 * `prefix2`, … in order (skipping names taken explicitly), as Multus does with `net`.
 *
 * @throws {CniError} code 7 when two attachments (or one and the default interface) share a name.
 */
export function interfaceNames(
  selections: NetworkSelection[],
  defaultIfname: string,
  prefix: string,
  pod: string,
): string[] {
  const taken = new Set([defaultIfname]);
  for (const s of selections) {
    if (!s.interface) continue;
    if (taken.has(s.interface)) {
      throw invalid(pod, `interface ${s.interface} is requested twice`);
    }
    taken.add(s.interface);
  }
  let next = 1;
  return selections.map((s) => {
    if (s.interface) return s.interface;
    while (taken.has(`${prefix}${next}`)) next++;
    const name = `${prefix}${next++}`;
    taken.add(name);
    return name;
  });
}
