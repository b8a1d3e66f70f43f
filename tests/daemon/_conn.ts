/**
 * Raw connections for tests of the daemon's servers (the socket, the TCP port).
 *
 * @module
 */

/** Reads until the server closes the connection (or resets it); the text it sent. */
export async function readToEnd(conn: Deno.Conn): Promise<string> {
  const chunks: string[] = [];
  const buf = new Uint8Array(4096);
  try {
    while (true) {
      const n = await conn.read(buf);
      if (n === null) break;
      chunks.push(new TextDecoder().decode(buf.subarray(0, n)));
    }
  } catch { /* reset */ }
  try {
    conn.close();
  } catch { /* closed */ }
  return chunks.join("");
}
