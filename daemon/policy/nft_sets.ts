/**
 * The named sets of a policy table, pure: a set per (peer, family) of the peer's pod addresses,
 * and an interval set per combination of ipBlocks, each declared once and named for what it holds
 * (a hash and a readable prefix), so that every rule with the same peer shares it and a change of
 * the peer's pods is element adds and deletes, never a rewrite of rules.
 *
 * @module
 */
import type { PeerSet } from "./compile.ts";
import { isV6, nftAddress } from "./nft_text.ts";

/** A named set or verdict map of the table. */
export interface NamedCollection {
  /** Its type: `ipv4_addr`, or `ipv4_addr : verdict` for a map. */
  type: string;
  /** Its elements as nft writes them (`10.0.0.1`, `10.0.0.1 : jump in-…`, `10.0.0.0-10.0.0.9`). */
  elements: string[];
  /** `interval`: a set of ranges (an ipBlock peer's addresses). */
  flags?: "interval";
}

/** The named sets of one table: a set per (peer, family), declared once, shared by its rules. */
export class NamedSets {
  /** Name → its elements, in the order first declared. */
  readonly elements = new Map<string, string[]>();
  readonly #names = new Map<string, string>();
  readonly #types = new Map<string, string>();
  readonly #intervals = new Set<string>();

  /** The name of `peer`'s set of `family` addresses, declared with them on first use. */
  ref(peer: PeerSet, family: 4 | 6): string {
    const id = `${family} ${peer.key}`;
    let name = this.#names.get(id);
    if (!name) {
      name = `p${fnv1a(id)}`;
      while (this.elements.has(name)) name += "x";
      this.#names.set(id, name);
      this.#types.set(name, family === 6 ? "ipv6_addr" : "ipv4_addr");
      this.elements.set(name, peer.ips.filter((ip) => isV6(ip) === (family === 6)).map(nftAddress));
    }
    return name;
  }

  /**
   * The name of an interval set of `family` addresses holding `ranges` (an ipBlock peer's),
   * named for its content: rules allowing the same blocks share it.
   */
  ranges(ranges: string[], family: 4 | 6): string {
    const id = `${family} ranges ${ranges.join(",")}`;
    let name = this.#names.get(id);
    if (!name) {
      name = `r${fnv1a(id)}`;
      while (this.elements.has(name)) name += "x";
      this.#names.set(id, name);
      this.#types.set(name, family === 6 ? "ipv6_addr" : "ipv4_addr");
      this.#intervals.add(name);
      this.elements.set(name, ranges);
    }
    return name;
  }

  /** The sets as declared, with their elements. */
  collections(): Map<string, NamedCollection> {
    return new Map(
      [...this.elements].map(([name, elements]) => [
        name,
        {
          type: this.#types.get(name)!,
          elements,
          ...(this.#intervals.has(name) ? { flags: "interval" as const } : {}),
        },
      ]),
    );
  }
}

/** FNV-1a of `text`, 8 hex digits. */
export function fnv1a(text: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, "0");
}

/** A set's or map's declaration. */
export function declaration(name: string, c: NamedCollection): string {
  const kind = c.type.includes(":") ? "map" : "set";
  const members = c.elements.length ? ` elements = { ${c.elements.join(", ")} };` : "";
  return `  ${kind} ${name} { ${setSpec(c)}${members} }`;
}

/** A set's type and flags as declared: `type ipv4_addr; flags interval;`. */
export function setSpec(c: NamedCollection): string {
  return `type ${c.type};${c.flags ? ` flags ${c.flags};` : ""}`;
}
