/**
 * Byte helpers small enough for the shim to import.
 *
 * @module
 */

/**
 * Joins byte chunks into one array.
 *
 * @example
 * ```ts
 * concatBytes([new Uint8Array([1]), new Uint8Array([2, 3])]); // Uint8Array [1, 2, 3]
 * ```
 */
export function concatBytes(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/**
 * The index of the first occurrence of `needle` in `hay` at or after `from`, or -1.
 *
 * @example
 * ```ts
 * indexOfBytes(new TextEncoder().encode("a\r\n\r\nb"), [13, 10, 13, 10]); // 1
 * ```
 */
export function indexOfBytes(hay: Uint8Array, needle: number[], from = 0): number {
  outer: for (let i = from; i <= hay.length - needle.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}
