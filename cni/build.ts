/**
 * `deno task build-cni --output FILE [--socket PATH]`: compiles the shim into one executable with
 * `deno compile` and the same sandbox flags as the installed wrapper (used by the image build;
 * `deno compile` needs to download its runtime, which this workplace cannot).
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { DEFAULT_SOCKET } from "../lib/socket_api.ts";
import { SHIM_ENTRYPOINT, shimArgs, shimPermissionFlags } from "./sandbox.ts";

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
    string: ["output", "socket"],
    default: { output: "ferry", socket: DEFAULT_SOCKET },
  });
  const args = compileArgs(flags.socket, flags.output);
  console.log(`deno ${args.join(" ")}`);
  const status = await new Deno.Command(Deno.execPath(), {
    args,
    stdout: "inherit",
    stderr: "inherit",
  }).spawn().status;
  Deno.exit(status.code);
}
