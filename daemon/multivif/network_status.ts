/**
 * The NPWG `k8s.v1.cni.cncf.io/network-status` annotation of a pod, from its container's
 * attachment records. Pure.
 *
 * @module
 */
import type { Attachment } from "../service/attachment_store.ts";

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
