/**
 * IP address arithmetic for IPv4 and IPv6, on bigints. Pure functions: parse, format, and walk
 * the host addresses of a prefix.
 *
 * @module
 */

/** An IP address as a family and a number. */
export interface IpAddr {
  /** 4 or 6. */
  family: 4 | 6;
  /** The address as an unsigned integer. */
  value: bigint;
}

/** A prefix such as `10.244.0.0/24`, normalised to its network address. */
export interface Cidr {
  /** The network address. */
  network: IpAddr;
  /** The prefix length. */
  prefix: number;
}

/**
 * Parses an IPv4 or IPv6 address.
 *
 * @throws Error for anything else.
 * @example
 * ```ts
 * formatIp(parseIp("10.0.0.1")); // "10.0.0.1"
 * ```
 */
export function parseIp(text: string): IpAddr {
  if (text.includes(":")) return { family: 6, value: parseIpv6(text) };
  const parts = text.split(".");
  if (parts.length !== 4 || parts.some((p) => !/^\d{1,3}$/.test(p) || Number(p) > 255)) {
    throw new Error(`invalid IP address ${JSON.stringify(text)}`);
  }
  return { family: 4, value: parts.reduce((v, p) => (v << 8n) | BigInt(p), 0n) };
}

function parseIpv6(text: string): bigint {
  // A dotted IPv4 tail (`::ffff:10.0.0.1`, RFC 4291 2.2.3) stands for the last two groups.
  const dot = text.lastIndexOf(":") + 1;
  if (text.slice(dot).includes(".")) {
    let v4: bigint;
    try {
      v4 = parseIp(text.slice(dot)).value;
    } catch {
      throw new Error(`invalid IPv6 address ${JSON.stringify(text)}`);
    }
    const tail = `${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
    return parseIpv6(text.slice(0, dot) + tail);
  }
  const halves = text.split("::");
  if (halves.length > 2) throw new Error(`invalid IPv6 address ${JSON.stringify(text)}`);
  const groups = (s: string) => (s === "" ? [] : s.split(":"));
  const head = groups(halves[0]);
  const tail = halves.length === 2 ? groups(halves[1]) : [];
  const missing = 8 - head.length - tail.length;
  if (
    (halves.length === 1 && missing !== 0) || missing < 0 || (halves.length === 2 && missing < 1)
  ) {
    throw new Error(`invalid IPv6 address ${JSON.stringify(text)}`);
  }
  const all = [...head, ...Array(halves.length === 2 ? missing : 0).fill("0"), ...tail];
  return all.reduce((v, g) => {
    if (!/^[0-9a-fA-F]{1,4}$/.test(g)) {
      throw new Error(`invalid IPv6 address ${JSON.stringify(text)}`);
    }
    return (v << 16n) | BigInt(parseInt(g, 16));
  }, 0n);
}

/** Formats an address in its canonical text form (RFC 5952 for IPv6). */
export function formatIp(ip: IpAddr): string {
  if (ip.family === 4) {
    return [24n, 16n, 8n, 0n].map((s) => String((ip.value >> s) & 255n)).join(".");
  }
  const groups = Array.from(
    { length: 8 },
    (_, i) => Number((ip.value >> BigInt(112 - 16 * i)) & 0xffffn),
  );
  let best = -1, bestLen = 0;
  for (let i = 0; i < 8;) {
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i > 1) [best, bestLen] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best < 0) return hex.join(":");
  return `${hex.slice(0, best).join(":")}::${hex.slice(best + bestLen).join(":")}`;
}

function bits(family: 4 | 6): number {
  return family === 4 ? 32 : 128;
}

/**
 * Parses a prefix; host bits are cleared.
 *
 * @example
 * ```ts
 * formatCidr(parseCidr("10.244.0.7/24")); // "10.244.0.0/24"
 * ```
 */
export function parseCidr(text: string): Cidr {
  const slash = text.indexOf("/");
  if (slash < 0) throw new Error(`invalid prefix ${JSON.stringify(text)}: no /length`);
  const ip = parseIp(text.slice(0, slash));
  const lenText = text.slice(slash + 1);
  const prefix = Number(lenText);
  if (!/^\d{1,3}$/.test(lenText) || prefix > bits(ip.family)) {
    throw new Error(`invalid prefix length in ${JSON.stringify(text)}`);
  }
  return { network: { family: ip.family, value: ip.value & mask(ip.family, prefix) }, prefix };
}

function mask(family: 4 | 6, prefix: number): bigint {
  const total = BigInt(bits(family));
  return ((1n << total) - 1n) ^ ((1n << (total - BigInt(prefix))) - 1n);
}

/** Formats a prefix as `address/length`. */
export function formatCidr(cidr: Cidr): string {
  return `${formatIp(cidr.network)}/${cidr.prefix}`;
}

/** True when `a` and `b` share an address (same family, one inside the other). */
export function cidrsOverlap(a: Cidr, b: Cidr): boolean {
  return a.network.family === b.network.family &&
    (cidrContains(a, b.network) || cidrContains(b, a.network));
}

/** True when `ip` lies inside `cidr`. */
export function cidrContains(cidr: Cidr, ip: IpAddr): boolean {
  return ip.family === cidr.network.family &&
    (ip.value & mask(ip.family, cidr.prefix)) === cidr.network.value;
}

/** The last address of a prefix (the IPv4 broadcast address). */
export function lastAddress(cidr: Cidr): IpAddr {
  const host = (1n << BigInt(bits(cidr.network.family) - cidr.prefix)) - 1n;
  return { family: cidr.network.family, value: cidr.network.value | host };
}

/** The address `n` after `ip`. */
export function addToIp(ip: IpAddr, n: bigint): IpAddr {
  return { family: ip.family, value: ip.value + n };
}

const DOTTED = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
const HEXTET = /^[0-9a-fA-F]{1,4}$/;

/**
 * `text` in the canonical form of {@link formatIp} when it is an IPv4 or IPv6 address, else
 * undefined; without bigints, for the many addresses a watch of every pod reads.
 *
 * @example
 * ```ts
 * canonicalIp("2001:DB8:0:0::7"); // "2001:db8::7"
 * canonicalIp("10.0.0.1 }"); // undefined
 * ```
 */
export function canonicalIp(text: string): string | undefined {
  if (DOTTED.test(text)) return text;
  if (!text.includes(":") || text.includes(".")) {
    try {
      return formatIp(parseIp(text));
    } catch {
      return undefined;
    }
  }
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const head = halves[0] === "" ? [] : halves[0].split(":");
  const tail = halves.length === 2 && halves[1] !== "" ? halves[1].split(":") : [];
  const missing = 8 - head.length - tail.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return undefined;
  const groups: number[] = [];
  for (const g of [...head, ...Array(halves.length === 2 ? missing : 0).fill("0"), ...tail]) {
    if (!HEXTET.test(g)) return undefined;
    groups.push(parseInt(g, 16));
  }
  let best = -1, bestLen = 0;
  for (let i = 0; i < 8;) {
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i > 1) [best, bestLen] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best < 0) return hex.join(":");
  return `${hex.slice(0, best).join(":")}::${hex.slice(best + bestLen).join(":")}`;
}
