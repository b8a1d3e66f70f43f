/**
 * `deno task build-cni --output FILE [--socket PATH] [--host-path PATH]`: compiles the shim into
 * one executable (`FILE-bin`) with `deno compile` and the same sandbox flags as the installed
 * wrapper, and writes `FILE`, the script the runtime runs: it starts the executable (installed
 * on the host at `--host-path`, default `/opt/cni/bin/ferry-bin`) with a clean environment, as the
 * `deno run` wrapper does. `deno compile` needs to download its runtime,
 * which this workplace cannot. Not used by the image, which installs the bundled shim with Deno
 * itself (`install-cni --copy-deno`, `deploy/image_spec.ts`); kept for single-binary installs.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { DEFAULT_SOCKET } from "../lib/socket_api.ts";
import { SHIM_ENTRYPOINT, shimArgs, shimPermissionFlags } from "./sandbox.ts";
import { cleanEnvScript } from "./install.ts";

/** The script that runs the compiled shim at `hostPath` with a clean environment. */
export function compiledWrapper(hostPath: string): string {
  return cleanEnvScript([hostPath], { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" });
}

/** The `deno compile` arguments for a shim bound to `socket`, written to `output`. */
export function compileArgs(socket: string, output: string): string[] {
  return [
    "compile",
    "--no-config",
    "--no-remote",
    ...shimPermissionFlags(socket),
    "--output",
    output,
    SHIM_ENTRYPOINT.pathname,
    ...shimArgs(socket),
  ];
}

if (import.meta.main) {
  const flags = parseArgs(Deno.args, {
    string: ["output", "socket", "host-path"],
    default: { output: "ferry", socket: DEFAULT_SOCKET, "host-path": "/opt/cni/bin/ferry-bin" },
  });
  await Deno.writeTextFile(flags.output, compiledWrapper(flags["host-path"]), { mode: 0o755 });
  const args = compileArgs(flags.socket, `${flags.output}-bin`);
  console.log(`deno ${args.join(" ")}`);
  const status = await new Deno.Command(Deno.execPath(), {
    args,
    stdout: "inherit",
    stderr: "inherit",
  }).spawn().status;
  Deno.exit(status.code);
}
