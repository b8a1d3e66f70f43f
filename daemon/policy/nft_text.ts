/**
 * What reaches an nft script where an address, a string, an interface name, a port or a protocol
 * goes: each written canonically, or refused (thrown) when it is none, so that nothing an object
 * or an annotation said can change a script's meaning. Pure.
 *
 * @module
 */
import { formatIp, parseIp } from "../ipam/cidr.ts";

/** Whether `ip` (an address as text) is IPv6. */
export const isV6 = (ip: string): boolean => ip.includes(":");

/**
 * `ip` as the script writes it: parsed and written canonically, or refused (thrown). Nothing but
 * an address reaches a script where an address goes, whatever an annotation or object said.
 */
export function nftAddress(ip: string): string {
  try {
    return formatIp(parseIp(ip));
  } catch {
    throw new Error(`refusing to write ${JSON.stringify(ip.slice(0, 80))} as an address`);
  }
}

/**
 * `text` for a quoted string of a script (a comment, a log prefix): what is not a letter, digit or
 * one of `_ . / : @ [ ] -` and space becomes `_`, at most 127 characters, so it can never close
 * the quotes.
 */
export function nftText(text: string): string {
  return text.replace(/[^A-Za-z0-9_./:@\[\] -]/g, "_").slice(0, 127);
}

/** An interface name as a script matches it, or refused (thrown) when it is no safe name. */
export function nftIfname(name: string): string {
  if (!/^[A-Za-z0-9_.@-]{1,15}$/.test(name)) {
    throw new Error(`refusing to write interface name ${JSON.stringify(name.slice(0, 20))}`);
  }
  return name;
}

/** A port number as the script writes it, or refused (thrown). */
export function nftPort(port: number): string {
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`refusing to write ${JSON.stringify(port)} as a port`);
  }
  return String(port);
}

/** A protocol as the script writes it, or refused (thrown). */
export function nftProto(protocol: string): string {
  const p = protocol.toLowerCase();
  if (p !== "tcp" && p !== "udp" && p !== "sctp") {
    throw new Error(`refusing to write ${JSON.stringify(protocol)} as a protocol`);
  }
  return p;
}

/** `{ a, b }` or undefined when empty (nft has no empty anonymous set). */
export function anonymousSet(items: string[]): string | undefined {
  return items.length ? `{ ${items.join(", ")} }` : undefined;
}
