/**
 * The NPWG `k8s.v1.cni.cncf.io/network-status` annotation of a pod, from its container's
 * attachment records, and read back from any pod. Pure.
 *
 * @module
 */
import { canonicalIp } from "../ipam/cidr.ts";
import type { Attachment } from "../records/attachment_store.ts";

/**
 * The NPWG `network-status` of a container: the default network's interface first (`default:
 * true`), then every additional one in the order it was plugged; addresses without prefix, the
 * pod-side MAC, DNS when a plugin gave it.
 */
export function networkStatus(containerId: string, all: Attachment[]): string {
  const mine = all.filter((a) => a.containerId === containerId);
  const ordered = [
    ...mine.filter((a) => !a.parent),
    ...mine.filter((a) => a.parent).sort((a, b) => a.createdAt.localeCompare(b.createdAt)),
  ];
  return JSON.stringify(ordered.map((a) => {
    const entry: Record<string, unknown> = {
      name: a.network,
      interface: a.ifname,
      ips: a.result.ips?.map((ip) => ip.address.split("/")[0]) ?? [],
    };
    const mac = a.result.interfaces?.find((i) => i.name === a.ifname && i.sandbox)?.mac;
    if (mac) entry.mac = mac;
    if (!a.parent && ((a.driver ?? "bridge") === "bridge" || a.defaultNetwork)) {
      entry.default = true;
    }
    const dns = a.result.dns;
    if (dns && Object.keys(dns).length) entry.dns = dns;
    return entry;
  }));
}

/** A `network-status` annotation read back: the pod's addresses per additional network. */
export interface ReadNetworkStatus {
  /** Canonical addresses per network (`namespace/name`) the pod may claim. */
  networks: Record<string, string[]>;
  /** What was left out, and why (each value once). */
  dropped: { value: string; reason: string }[];
}

/**
 * The addresses a pod of namespace `podNamespace` claims on its additional networks in its
 * `network-status` annotation (the default network's entry left out: its addresses are the pod's
 * own). Only entries naming a NetworkAttachmentDefinition of the pod's own namespace count (a
 * bare name is the pod's namespace's): a pod can write its own annotation, so what it claims may
 * only ever concern networks of its own namespace. Every address is parsed and written in its
 * canonical form; anything that is no address is dropped, and said so in `dropped`. Malformed
 * JSON claims nothing. Pure.
 *
 * @example
 * ```ts
 * readNetworkStatus('[{"name":"a/net1","ips":["10.1.0.5","nope"]},{"name":"b/x","ips":["10.2.0.1"]}]', "a");
 * // { networks: { "a/net1": ["10.1.0.5"] }, dropped: [{ value: "nope", … }, { value: "b/x", … }] }
 * ```
 */
export function readNetworkStatus(
  raw: string | undefined,
  podNamespace: string,
): ReadNetworkStatus {
  const out: ReadNetworkStatus = { networks: {}, dropped: [] };
  if (!raw) return out;
  let entries: unknown;
  try {
    entries = JSON.parse(raw);
  } catch {
    out.dropped.push({ value: raw.slice(0, 80), reason: "the annotation is not JSON" });
    return out;
  }
  const seen = new Set<string>();
  const drop = (value: string, reason: string) => {
    if (seen.has(value)) return;
    seen.add(value);
    out.dropped.push({ value: value.slice(0, 80), reason });
  };
  for (const e of Array.isArray(entries) ? entries : []) {
    if (typeof e !== "object" || e === null) continue;
    const { name, ips, default: isDefault } = e as Record<string, unknown>;
    if (isDefault === true || typeof name !== "string" || !Array.isArray(ips)) continue;
    const network = name.includes("/") ? name : `${podNamespace}/${name}`;
    if (network.slice(0, network.indexOf("/")) !== podNamespace) {
      drop(network, `a network of another namespace than the pod's (${podNamespace})`);
      continue;
    }
    const list = out.networks[network] ??= [];
    for (const ip of ips) {
      const address = canonicalAddress(ip);
      if (address === undefined) drop(String(ip), "not an IP address");
      else if (!list.includes(address)) list.push(address);
    }
  }
  return out;
}

/** `text` as a canonical address, or undefined when it is no IPv4 or IPv6 address. */
function canonicalAddress(text: unknown): string | undefined {
  return typeof text === "string" ? canonicalIp(text) : undefined;
}
