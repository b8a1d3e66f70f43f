/**
 * JSON keys as a Go plugin reads them. Pure. The reference plugins decode their config with Go's
 * `encoding/json`, which matches a key to a field ignoring case (rune by rune, upper of lower:
 * besides ASCII, `ſ` is `s`, the Kelvin sign `K` is `k`, `ı` and `İ` are `i`), and takes the
 * last of several keys that match one field. A check that reads `master` but not `Master` reads
 * less than the plugin does; so the NAD guard reads a copy whose keys are folded
 * ({@link foldKeys}), and refuses a config where two keys of one object fold to the same name
 * (which one a plugin would use depends on its field list and their order). A reader that stands
 * in for a Go plugin (Ferry's native drivers) reads a copy whose keys it knows are spelled as it
 * reads them ({@link respelled}): it then acts on what the guard checked.
 *
 * @module
 */

/**
 * `key` folded as Go's `encoding/json` compares keys: lower case, `ſ` as `s`, `K` as `k`, `ı` and
 * `İ` as `i` (the only non-ASCII runes Go folds onto ASCII letters).
 *
 * @example
 * ```ts
 * foldKey("RangeStart"); // "rangestart"
 * ```
 */
export function foldKey(key: string): string {
  return [...key].map((c) =>
    c === "\u017f" ? "s" : c === "\u212a" ? "k" : c === "\u0130" || c === "\u0131" ? "i" : c
  ).join("").toLowerCase();
}

/** Two keys of one object that a Go plugin reads as one. */
export interface KeyClash {
  /** Where (a path of folded keys, `` for the top). */
  at: string;
  /** The two keys as written. */
  keys: [string, string];
}

/**
 * A deep copy of `value` whose object keys are folded ({@link foldKey}), or the first clash.
 *
 * @example
 * ```ts
 * foldKeys({ IPAM: { Type: "static" } }); // { value: { ipam: { type: "static" } } }
 * ```
 */
export function foldKeys(value: unknown, at = ""): { value: unknown; clash?: KeyClash } {
  if (Array.isArray(value)) {
    const out: unknown[] = [];
    for (const [i, v] of value.entries()) {
      const r = foldKeys(v, `${at}[${i}]`);
      if (r.clash) return r;
      out.push(r.value);
    }
    return { value: out };
  }
  if (typeof value !== "object" || value === null) return { value };
  const out: Record<string, unknown> = {};
  const seen = new Map<string, string>();
  for (const [k, v] of Object.entries(value)) {
    const f = foldKey(k);
    const path = at ? `${at}.${f}` : f;
    const before = seen.get(f);
    if (before !== undefined) return { value, clash: { at: path, keys: [before, k] } };
    seen.set(f, k);
    const r = foldKeys(v, path);
    if (r.clash) return r;
    out[f] = r.value;
  }
  return { value: out };
}

/**
 * The keys a reader reads, spelled as it reads them: each key maps to `null` (a value read as it
 * is) or to the spelling of the keys of the object under it (of each object of a list under it).
 */
export interface Spelling {
  readonly [key: string]: Spelling | null;
}

/**
 * A copy of `value` whose keys that `spelling` knows are spelled as it spells them, as a Go
 * plugin matches them ({@link foldKey}: `Master` and `maſter` are `master`); every other key is
 * left as written. A reader that reads the copy reads what a Go plugin reads of the original.
 * Two keys of one object that become one are a clash (a Go plugin would take the last).
 *
 * @example
 * ```ts
 * respelled({ MASTER: "eth1", IPAM: { Type: "static" } }, { master: null, ipam: { type: null } });
 * // { value: { master: "eth1", ipam: { type: "static" } } }
 * ```
 */
export function respelled(
  value: unknown,
  spelling: Spelling,
  at = "",
): { value: unknown; clash?: KeyClash } {
  if (Array.isArray(value)) {
    const out: unknown[] = [];
    for (const [i, v] of value.entries()) {
      const r = respelled(v, spelling, `${at}[${i}]`);
      if (r.clash) return r;
      out.push(r.value);
    }
    return { value: out };
  }
  if (typeof value !== "object" || value === null) return { value };
  const known = new Map(Object.keys(spelling).map((k) => [foldKey(k), k]));
  const out: Record<string, unknown> = {};
  const seen = new Map<string, string>();
  for (const [k, v] of Object.entries(value)) {
    const name = known.get(foldKey(k)) ?? k;
    const path = at ? `${at}.${name}` : name;
    const before = seen.get(name);
    if (before !== undefined) return { value, clash: { at: path, keys: [before, k] } };
    seen.set(name, k);
    const below = Object.hasOwn(spelling, name) ? spelling[name] : null;
    if (below === null) {
      out[name] = v;
      continue;
    }
    const r = respelled(v, below, path);
    if (r.clash) return r;
    out[name] = r.value;
  }
  return { value: out };
}
