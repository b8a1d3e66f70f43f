/**
 * Deterministic names and MAC addresses for a (container ID, interface) pair, so that a repeated
 * ADD, a CHECK and a DEL after a daemon restart all find the same links. Pure functions.
 *
 * @module
 */

/** The prefix of every host-side link Ferry creates. */
export const HOST_LINK_PREFIX = "fy";

const UTF8 = new TextEncoder();
const TWO_32 = 2 ** 32;

/**
 * FNV-1a, 64 bits, of `text`'s UTF-8 bytes, as its high and low 32-bit halves. The same hash as
 * `BigInt` arithmetic gives (a test holds the two equal: names must not change across versions,
 * or a DEL after an upgrade would not find the links an older daemon made), without allocating a
 * `BigInt` per byte, three times per ADD.
 */
function fnv1a64(text: string): [hi: number, lo: number] {
  let hi = 0xcbf29ce4, lo = 0x84222325;
  for (const byte of UTF8.encode(text)) {
    lo = (lo ^ byte) >>> 0;
    // h × (2^40 + 0x1b3) mod 2^64: lo × 0x1b3 (< 2^41, exact) carries into hi, and h << 40
    // moves lo's low 24 bits to hi's top.
    const low = lo * 0x1b3;
    const carry = Math.floor(low / TWO_32);
    hi = (Math.imul(hi, 0x1b3) + carry + (lo << 8)) >>> 0;
    lo = low >>> 0;
  }
  return [hi, lo];
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
  const [hi, lo] = fnv1a64(`${containerId}/${ifname}`);
  return HOST_LINK_PREFIX + hi.toString(16).padStart(8, "0") +
    lo.toString(16).padStart(8, "0").slice(0, 4);
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
  const [hi, lo] = fnv1a64(`${end}/${containerId}/${ifname}`);
  // The hash's six lowest bytes, lowest first.
  const bytes = [
    lo & 0xff,
    (lo >>> 8) & 0xff,
    (lo >>> 16) & 0xff,
    lo >>> 24,
    hi & 0xff,
    (hi >>> 8) & 0xff,
  ];
  bytes[0] = (bytes[0] & 0xfe) | 0x02;
  return bytes.map((b) => b.toString(16).padStart(2, "0")).join(":");
}
