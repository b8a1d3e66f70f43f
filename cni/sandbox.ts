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

/**
 * Flags that keep the shim from fetching, discovering or caching anything at run time.
 *
 * `--no-code-cache`: V8's code cache is a SQLite database in `DENO_DIR` that every start would
 * open and query, and a start that misses writes to; compiling the 19 KB bundle anew costs less.
 * Measured with the installed wrapper, runs alternating 150 times each (twice): an empty module
 * 1.7–2.3 ms faster, the shim's ADD against an answering socket 1.2–1.3 ms faster.
 */
export const SHIM_RUNTIME_FLAGS = [
  "--quiet",
  "--no-config",
  "--no-remote",
  "--cached-only",
  "--no-code-cache",
];

/** The shim's entrypoint module. */
export const SHIM_ENTRYPOINT = new URL("./main.ts", import.meta.url);

/** The arguments the shim's entrypoint takes after the module: the socket it is bound to. */
export function shimArgs(socketPath: string): string[] {
  return ["--socket", socketPath];
}
