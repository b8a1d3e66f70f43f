/**
 * What the policy tests ask of nft: whether it accepts a script (`nft -c`, nothing applied).
 *
 * @module
 */
import { assertEquals } from "deno-std/assert/mod.js";

/** Whether the machine has nft. */
export const HAS_NFT = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);

/** Fails, with nft's complaint and the script, unless `nft -c` accepts `script`. */
export async function assertNftAccepts(script: string): Promise<void> {
  const child = new Deno.Command("nft", {
    args: ["-c", "-f", "-"],
    stdin: "piped",
    stderr: "piped",
  })
    .spawn();
  const w = child.stdin.getWriter();
  await w.write(new TextEncoder().encode(script));
  await w.close();
  const out = await child.output();
  assertEquals(out.code, 0, new TextDecoder().decode(out.stderr) + script);
}
