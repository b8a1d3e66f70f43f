// The daemon's Deno flags live in daemon/runtime/runtime_flags.ts; the image's entrypoint and
// `deno task daemon` must start it with exactly those.
import { assertEquals } from "deno-std/assert/mod.js";
import { DAEMON_RUN_FLAGS } from "../../../daemon/runtime/runtime_flags.ts";

const ROOT = new URL("../../../", import.meta.url);

Deno.test("the Dockerfile's entrypoint starts the daemon with the flags of runtime_flags.ts", async () => {
  const dockerfile = await Deno.readTextFile(new URL("deploy/Dockerfile", ROOT));
  const line = dockerfile.split("\n").find((l) => l.startsWith("ENTRYPOINT "));
  const argv: string[] = JSON.parse(line!.slice("ENTRYPOINT ".length));
  assertEquals(argv.slice(0, 2), ["deno", "run"]);
  assertEquals(argv.at(-1), "daemon/wiring/main.ts");
  // The image adds --cached-only (it fetches nothing); every other flag is the shared list.
  assertEquals(argv.slice(2, -1).filter((f) => f !== "--cached-only"), DAEMON_RUN_FLAGS);
});

Deno.test("deno task daemon starts the daemon with the flags of runtime_flags.ts", async () => {
  const tasks = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT))).tasks;
  assertEquals(tasks.daemon, `deno run ${DAEMON_RUN_FLAGS.join(" ")} daemon/wiring/main.ts`);
});
