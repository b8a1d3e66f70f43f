/**
 * The daemon's command line: `[--config FILE] [--socket PATH] [--node-name NAME] [--kubeconfig
 * FILE] [--state-dir DIR] [--sysctl-dir DIR] [--staged-conflist FILE] [--standalone]`, as the
 * file to load and the values that override it.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { ConfigError, type ConfigOverrides } from "./config.ts";

/**
 * Parses the daemon's command line; an unknown argument is a {@link ConfigError}.
 *
 * @example
 * ```ts
 * parseDaemonArgs(["--config", "/etc/ferry/config.json", "--standalone"]);
 * // { configFile: "/etc/ferry/config.json", overrides: { standalone: true, … } }
 * ```
 */
export function parseDaemonArgs(
  args: string[],
): { configFile?: string; overrides: ConfigOverrides } {
  const flags = parseArgs(args, {
    string: [
      "config",
      "socket",
      "node-name",
      "kubeconfig",
      "state-dir",
      "sysctl-dir",
      "staged-conflist",
    ],
    boolean: ["standalone"],
    unknown: (arg: string) => {
      throw new ConfigError(`unknown argument ${arg}`);
    },
  });
  return {
    configFile: flags.config,
    overrides: {
      socket: flags.socket,
      nodeName: flags["node-name"],
      kubeconfig: flags.kubeconfig,
      stateDir: flags["state-dir"],
      sysctlDir: flags["sysctl-dir"],
      stagedConflist: flags["staged-conflist"],
      standalone: flags.standalone ? true : undefined,
    },
  };
}
