/**
 * `deno task gen`: writes the ahead-of-time validators to `lib/_generated/`.
 *
 * @module
 */
import { GENERATED_DIR, renderValidators } from "./validator_source.ts";

if (import.meta.main) {
  await Deno.remove(GENERATED_DIR, { recursive: true }).catch(() => {});
  await Deno.mkdir(GENERATED_DIR, { recursive: true });
  for (const [name, text] of renderValidators()) {
    await Deno.writeTextFile(new URL(name, GENERATED_DIR), text);
  }
  console.log(`wrote ${GENERATED_DIR.pathname}`);
}
