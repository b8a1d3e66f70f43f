/**
 * A `.tar.gz` of text files, written in memory: POSIX ustar entries (names up to 255 bytes, split
 * into prefix and name), gzip by the platform's `CompressionStream`. Enough for a sysdump that any
 * `tar -xzf` reads; nothing else (no links, no modes beyond 0644).
 *
 * @module
 */

const encoder = new TextEncoder();

function octal(n: number, width: number): string {
  return n.toString(8).padStart(width - 1, "0") + "\0";
}

function header(name: string, size: number, mtime: number): Uint8Array<ArrayBuffer> {
  const h = new Uint8Array(512);
  const bytes = encoder.encode(name);
  let prefix = new Uint8Array(0), base = bytes;
  if (bytes.length > 100) {
    const cut = name.lastIndexOf("/", 155);
    if (cut <= 0 || encoder.encode(name.slice(cut + 1)).length > 100) {
      throw new Error(`tar: name too long: ${name}`);
    }
    prefix = encoder.encode(name.slice(0, cut));
    base = encoder.encode(name.slice(cut + 1));
  }
  const put = (at: number, text: string | Uint8Array) =>
    h.set(typeof text === "string" ? encoder.encode(text) : text, at);
  put(0, base);
  put(100, octal(0o644, 8));
  put(108, octal(0, 8));
  put(116, octal(0, 8));
  put(124, octal(size, 12));
  put(136, octal(Math.floor(mtime / 1000), 12));
  put(148, "        ");
  put(156, "0");
  put(257, "ustar\u000000");
  put(345, prefix);
  const sum = h.reduce((a, b) => a + b, 0);
  put(148, octal(sum, 7) + " ");
  return h;
}

/**
 * The archive of `files` (path → text), in the order given.
 *
 * @example
 * ```ts
 * await Deno.writeFile("dump.tar.gz", await tarGz([["dump/manifest.json", "{}"]], Date.now()));
 * ```
 */
export async function tarGz(files: [string, string][], mtime: number): Promise<Uint8Array> {
  const parts: Uint8Array<ArrayBuffer>[] = [];
  for (const [name, text] of files) {
    const body = encoder.encode(text);
    parts.push(
      header(name, body.length, mtime),
      body,
      new Uint8Array((512 - body.length % 512) % 512),
    );
  }
  parts.push(new Uint8Array(1024));
  const stream = new Blob(parts).stream().pipeThrough(new CompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}
