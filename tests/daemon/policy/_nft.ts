/**
 * What the policy tests ask of nft: whether it accepts a script (`nft -c`, nothing applied).
 *
 * @module
 */
import { assertEquals } from "deno-std/assert/mod.js";
import { runWithInput } from "../../../daemon/dev/harness.ts";

/** Whether the machine has nft. */
export const HAS_NFT = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);

/** Fails, with nft's complaint and the script, unless `nft -c` accepts `script`. */
export async function assertNftAccepts(script: string): Promise<void> {
  const out = await runWithInput("nft", ["-c", "-f", "-"], {}, script);
  assertEquals(out.code, 0, new TextDecoder().decode(out.stderr) + script);
}
