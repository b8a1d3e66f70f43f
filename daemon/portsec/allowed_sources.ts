/**
 * The one opt-out of port security a pod may ask for: extra source prefixes it sends from (a VPN
 * gateway, a router in a pod), named in its {@link ALLOWED_SOURCES_ANNOTATION} annotation and
 * honoured only when the operator allows it (`portSecurity.allowSourcePrefixesAnnotation`).
 * Pure: the annotation in, the prefixes or the reason they are not honoured out.
 *
 * @module
 */
import { formatCidr, parseCidr } from "../ipam/cidr.ts";

/** The pod annotation naming extra source prefixes, comma-separated CIDRs. */
export const ALLOWED_SOURCES_ANNOTATION = "ferry.dev/allowed-source-prefixes";

/** What a pod's annotation amounts to. */
export type AllowedSources =
  | { prefixes: string[] }
  | { refused: string }
  | { invalid: string };

/**
 * The extra source prefixes `annotations` ask for: none without the annotation; refused (with
 * the sentence to say on the pod) unless `honoured`; invalid (naming the bad entry) when an
 * entry is no CIDR. Prefixes are normalised to their network address.
 *
 * @example
 * ```ts
 * allowedSources({ "ferry.dev/allowed-source-prefixes": "10.8.0.0/24" }, true); // { prefixes: ["10.8.0.0/24"] }
 * ```
 */
export function allowedSources(
  annotations: Record<string, string> | undefined,
  honoured: boolean,
): AllowedSources {
  const raw = annotations?.[ALLOWED_SOURCES_ANNOTATION];
  if (raw === undefined) return { prefixes: [] };
  if (!honoured) {
    return {
      refused:
        `the pod's ${ALLOWED_SOURCES_ANNOTATION} annotation is not honoured on this node (portSecurity.allowSourcePrefixesAnnotation is off): it sends from its own addresses only`,
    };
  }
  const prefixes: string[] = [];
  for (const entry of raw.split(",").map((s) => s.trim()).filter(Boolean)) {
    try {
      prefixes.push(formatCidr(parseCidr(entry)));
    } catch {
      return {
        invalid: `${ALLOWED_SOURCES_ANNOTATION}: ${JSON.stringify(entry)} is not a CIDR prefix`,
      };
    }
  }
  return { prefixes: [...new Set(prefixes)] };
}
