/**
 * The shim's Deno permission flags, in one place. The installer's wrapper (`deno run`) and the
 * image's `deno compile` step both take them from here, so the sandbox tests prove what ships.
 *
 * @module
 */
import { CNI_ENV_VARS } from "./invocation.ts";

/**
 * The permission flags for a shim bound to `socketPath`: the CNI variables and the one socket,
 * nothing else (no other file, no TCP, no subprocess, no FFI).
 *
 * @example
 * ```ts
 * shimPermissionFlags("/run/ferry/ferry.sock");
 * // ["--allow-env=CNI_COMMAND,…", "--allow-read=/run/ferry/ferry.sock", …]
 * ```
 */
export function shimPermissionFlags(socketPath: string): string[] {
  if (!socketPath.startsWith("/") || /[,\s]/.test(socketPath)) {
    throw new Error(`socket path must be absolute without commas or spaces: ${socketPath}`);
  }
  return [
    `--allow-env=${CNI_ENV_VARS.join(",")}`,
    `--allow-read=${socketPath}`,
    `--allow-write=${socketPath}`,
    `--allow-net=unix:${socketPath}`,
    "--no-prompt",
  ];
}

/** Flags that keep the shim from fetching or discovering anything at run time. */
export const SHIM_RUNTIME_FLAGS = ["--quiet", "--no-config", "--no-remote", "--cached-only"];

/** The shim's entrypoint module. */
export const SHIM_ENTRYPOINT = new URL("./main.ts", import.meta.url);

/** The arguments the shim's entrypoint takes after the module: the socket it is bound to. */
export function shimArgs(socketPath: string): string[] {
  return ["--socket", socketPath];
}
