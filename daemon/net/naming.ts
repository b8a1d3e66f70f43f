/**
 * Deterministic names and MAC addresses for a (container ID, interface) pair, so that a repeated
 * ADD, a CHECK and a DEL after a daemon restart all find the same links. Pure functions.
 *
 * @module
 */

/** The prefix of every host-side link Ferry creates. */
export const HOST_LINK_PREFIX = "fy";

function fnv1a64(text: string): bigint {
  let h = 0xcbf29ce484222325n;
  for (const byte of new TextEncoder().encode(text)) {
    h ^= BigInt(byte);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return h;
}

/**
 * The host-side veth name for a container interface: `fy` and 12 hex digits (14 bytes, under
 * the kernel's 15).
 *
 * @example
 * ```ts
 * hostLinkName("4f2a…", "eth0"); // "fy3c9d0e1b2a47"
 * ```
 */
export function hostLinkName(containerId: string, ifname: string): string {
  return HOST_LINK_PREFIX +
    fnv1a64(`${containerId}/${ifname}`).toString(16).padStart(16, "0").slice(0, 12);
}

/**
 * A stable, locally administered unicast MAC for one end of a container interface.
 *
 * @example
 * ```ts
 * stableMac("4f2a…", "eth0", "container"); // "0a:58:…"
 * ```
 */
export function stableMac(containerId: string, ifname: string, end: "host" | "container"): string {
  const h = fnv1a64(`${end}/${containerId}/${ifname}`);
  const bytes = Array.from({ length: 6 }, (_, i) => Number((h >> BigInt(8 * i)) & 0xffn));
  bytes[0] = (bytes[0] & 0xfe) | 0x02;
  return bytes.map((b) => b.toString(16).padStart(2, "0")).join(":");
}
