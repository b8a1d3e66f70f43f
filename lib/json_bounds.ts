/**
 * Bounds on a JSON document's nesting and size, checked on its text before anything walks the
 * parsed value (pure). Every walk of a config (key folding, guards, copies) recurses once per
 * level, so a document nested 20,000 levels deep overflows the stack of whatever walks it first;
 * V8's `JSON.parse` itself does not recurse (5,000,000 levels parse), so a check may come before
 * or after it. The depth is measured here without recursion, and a document past a bound is
 * refused with a reason.
 *
 * @module
 */

/**
 * The deepest nesting a network config may have (objects and arrays, the top one counting 1). A
 * NAD's conflist with static routes and ranges goes about 7 deep; 64 leaves room for any plugin's
 * config and is far below what a recursive walk can take.
 */
export const MAX_CONFIG_DEPTH = 64;

/**
 * The largest NetworkAttachmentDefinition config (and pod network annotation) accepted, in bytes
 * of UTF-8: 256 KiB, Kubernetes' limit on all of an object's annotations together, and far beyond
 * any real plugin list.
 */
export const MAX_NAD_CONFIG_BYTES = 256 * 1024;

/**
 * The deepest nesting of objects and arrays in JSON `text` (0 for a scalar), read without
 * recursion; brackets inside strings do not count. Text that is not JSON gets a number too (the
 * parser refuses it afterwards).
 *
 * @example
 * ```ts
 * jsonDepth('{"a":[{"b":"[["}]}'); // 3
 * ```
 */
export function jsonDepth(text: string): number {
  let depth = 0, max = 0, inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) max = depth;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return max;
}

/** The bounds a document is held to. */
export interface JsonBounds {
  /** Deepest nesting (see {@link jsonDepth}). */
  maxDepth: number;
  /** Largest size in bytes of UTF-8; unbounded when absent. */
  maxBytes?: number;
}

/**
 * Why JSON `text` breaks `bounds` (its size or its depth, with the limit), or undefined when it
 * keeps them. The size is checked first, so a huge text is not scanned.
 *
 * @example
 * ```ts
 * jsonBoundsProblem("[".repeat(100), { maxDepth: 64 }); // "it is nested 100 levels deep (at most 64)"
 * jsonBoundsProblem('{"a":1}', { maxDepth: 64, maxBytes: 1024 }); // undefined
 * ```
 */
export function jsonBoundsProblem(text: string, bounds: JsonBounds): string | undefined {
  if (bounds.maxBytes !== undefined) {
    // Each UTF-16 unit is at least one byte of UTF-8: a text longer than the bound is too big.
    const bytes = text.length > bounds.maxBytes
      ? text.length
      : new TextEncoder().encode(text).length;
    if (bytes > bounds.maxBytes) {
      return `it is ${
        text.length > bounds.maxBytes ? "at least " : ""
      }${bytes} bytes (at most ${bounds.maxBytes})`;
    }
  }
  const depth = jsonDepth(text);
  if (depth > bounds.maxDepth) {
    return `it is nested ${depth} levels deep (at most ${bounds.maxDepth})`;
  }
  return undefined;
}
