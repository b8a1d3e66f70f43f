import { assert, assertEquals, assertStringIncludes } from "deno-std/assert/mod.js";
import { installPlugin } from "../../cli/install.ts";
import { withTempDir } from "../../daemon/dev/netns.ts";

const REPO = new URL("../..", import.meta.url).pathname.replace(/\/$/, "");

Deno.test("the installed kubectl-ferry runs this checkout's CLI from any directory through npx deno@2.9.6", () =>
  withTempDir(async (dir) => {
    const path = await installPlugin(`${dir}/bin`, REPO);
    assertEquals((await Deno.stat(path)).mode! & 0o777, 0o755);
    // npx itself would fetch Deno from the registry: a stand-in checks the pin and runs this Deno.
    await Deno.writeTextFile(
      `${dir}/bin/npx`,
      `#!/bin/sh\n[ "$1 $2" = "--yes deno@2.9.6" ] || { echo "npx $*" >&2; exit 99; }\n` +
        `shift 2\nexec ${Deno.execPath()} "$@"\n`,
      { mode: 0o755 },
    );
    const out = await new Deno.Command(path, {
      args: ["--help"],
      cwd: dir,
      env: { PATH: `${dir}/bin:/usr/bin:/bin`, HOME: dir },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    assertEquals(out.code, 0, text);
    assertStringIncludes(text, "usage: kubectl ferry COMMAND");
    assert(!text.includes("Download"), `no download from a run in another directory:\n${text}`);
  }));
