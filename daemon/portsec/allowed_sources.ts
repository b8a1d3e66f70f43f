/**
 * The one opt-out of port security a pod may ask for: extra source prefixes it sends from (a VPN
 * gateway, a router in a pod), named in its {@link ALLOWED_SOURCES_ANNOTATION} annotation and
 * honoured only when the operator allows it (`portSecurity.allowSourcePrefixesAnnotation`).
 * A prefix may not cover another pod's addresses (any of Ferry's pod ranges) nor addresses no pod
 * sends from (unspecified, loopback, link-local, multicast, broadcast). Pure: the annotation in,
 * the prefixes or the reason they are not honoured out.
 *
 * @module
 */
import { type Cidr, cidrsOverlap, formatCidr, parseCidr } from "../ipam/cidr.ts";

/** The pod annotation naming extra source prefixes, comma-separated CIDRs. */
export const ALLOWED_SOURCES_ANNOTATION = "ferry.dev/allowed-source-prefixes";

/** Addresses no pod sends from, whatever the operator allows (with what they are). */
const RESERVED: [string, string][] = [
  ["0.0.0.0/32", "the unspecified address"],
  ["::/128", "the unspecified address"],
  ["127.0.0.0/8", "loopback"],
  ["::1/128", "loopback"],
  ["169.254.0.0/16", "link-local"],
  ["fe80::/10", "link-local"],
  ["224.0.0.0/4", "multicast"],
  ["ff00::/8", "multicast"],
  ["255.255.255.255/32", "broadcast"],
];

/** What a pod's annotation amounts to. */
export type AllowedSources =
  | { prefixes: string[] }
  | { refused: string }
  | { invalid: string };

/**
 * The extra source prefixes `annotations` ask for: none without the annotation; refused (with
 * the sentence to say on the pod) unless `honoured`; invalid (naming the bad entry) when an
 * entry is no CIDR, overlaps one of `podRanges` (Ferry's pod ranges: the pod would send as other
 * pods) or covers unspecified, loopback, link-local, multicast or broadcast addresses. Prefixes
 * are normalised to their network address.
 *
 * @example
 * ```ts
 * allowedSources({ "ferry.dev/allowed-source-prefixes": "10.8.0.0/24" }, true, ["10.244.0.0/16"]); // { prefixes: ["10.8.0.0/24"] }
 * ```
 */
export function allowedSources(
  annotations: Record<string, string> | undefined,
  honoured: boolean,
  podRanges: string[] = [],
): AllowedSources {
  const raw = annotations?.[ALLOWED_SOURCES_ANNOTATION];
  if (raw === undefined) return { prefixes: [] };
  if (!honoured) {
    return {
      refused:
        `the pod's ${ALLOWED_SOURCES_ANNOTATION} annotation is not honoured on this node (portSecurity.allowSourcePrefixesAnnotation is off): it sends from its own addresses only`,
    };
  }
  const taken: [Cidr, string][] = [
    ...podRanges.map((r): [Cidr, string] => [parseCidr(r), `Ferry's pod range ${r}`]),
    ...RESERVED.map(([r, what]): [Cidr, string] => [parseCidr(r), `${what} (${r})`]),
  ];
  const prefixes: string[] = [];
  for (const entry of raw.split(",").map((s) => s.trim()).filter(Boolean)) {
    let cidr: Cidr;
    try {
      cidr = parseCidr(entry);
    } catch {
      return {
        invalid: `${ALLOWED_SOURCES_ANNOTATION}: ${JSON.stringify(entry)} is not a CIDR prefix`,
      };
    }
    const clash = taken.find(([t]) => cidrsOverlap(cidr, t));
    if (clash) {
      return {
        invalid: `${ALLOWED_SOURCES_ANNOTATION}: ${JSON.stringify(entry)} overlaps ${
          clash[1]
        }: a pod may not send from it`,
      };
    }
    prefixes.push(formatCidr(cidr));
  }
  return { prefixes: [...new Set(prefixes)] };
}
