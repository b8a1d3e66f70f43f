/**
 * `deno task install-cli [--dir DIR]`: puts `kubectl-ferry` on the PATH (default `~/.local/bin`),
 * so that `kubectl ferry …` runs this checkout's `cli/main.ts` (kubectl runs any `kubectl-NAME` on
 * the PATH as `kubectl NAME`). The file is a two-line shell script running Deno from the npm
 * registry, pinned to {@link DENO_VERSION} like everything else here, with this checkout's
 * `deno.json` and lock file, from any working directory.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";

/** The Deno the project pins. */
export const DENO_VERSION = "2.9.6";

/** The plugin's file name: kubectl finds `kubectl-ferry` on the PATH as `kubectl ferry`. */
export const PLUGIN_NAME = "kubectl-ferry";

/** Quotes `s` for a POSIX shell. */
function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'"'"'`)}'`;
}

/**
 * The wrapper's text for the checkout at `repo`.
 *
 * @example
 * ```ts
 * wrapperScript("/home/me/ferry"); // "#!/bin/sh\n…exec npx --yes deno@2.9.6 run … \"$@\"\n"
 * ```
 */
export function wrapperScript(repo: string): string {
  return [
    "#!/bin/sh",
    `# kubectl ferry: Ferry's operator commands, from ${repo} (written by deno task install-cli)`,
    `exec npx --yes deno@${DENO_VERSION} run --allow-all --frozen --quiet ` +
    `--config=${shellQuote(`${repo}/deno.json`)} ${shellQuote(`${repo}/cli/main.ts`)} "$@"`,
    "",
  ].join("\n");
}

/** Writes the wrapper into `dir` (created if needed); returns its path. */
export async function installPlugin(dir: string, repo: string): Promise<string> {
  await Deno.mkdir(dir, { recursive: true });
  const path = `${dir}/${PLUGIN_NAME}`;
  const tmp = `${path}.tmp`;
  await Deno.writeTextFile(tmp, wrapperScript(repo), { mode: 0o755 });
  await Deno.chmod(tmp, 0o755);
  await Deno.rename(tmp, path);
  return path;
}

if (import.meta.main) {
  const flags = parseArgs(Deno.args, { string: ["dir"] });
  const dir = flags.dir ?? `${Deno.env.get("HOME")}/.local/bin`;
  const repo = new URL("..", import.meta.url).pathname.replace(/\/$/, "");
  const path = await installPlugin(dir, repo);
  console.log(`installed ${path}: run \`kubectl ferry status\``);
  const onPath = (Deno.env.get("PATH") ?? "").split(":").includes(dir);
  if (!onPath) console.error(`${dir} is not on your PATH: add it, or pass --dir DIR`);
}
