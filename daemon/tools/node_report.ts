/**
 * What `kubectl ferry` reads of a node, run inside the node's Ferry pod with `kubectl exec`:
 * `deno run --allow-all --frozen daemon/tools/node_report.ts stats [--config FILE]` prints one JSON
 * object, `{ stats, attachments }`: the daemon's `GET /v1/stats` (read on its unix socket, which
 * only the node and this container can reach) and how many attachment records its state directory
 * holds. The socket and state directory come from the daemon's config file (default
 * `/etc/ferry/config.json`, as the DaemonSet mounts it); `--socket` and `--state-dir` override them.
 * Exits 0 with the report, 1 when the daemon does not answer (the reason on stderr), 2 on bad
 * arguments. It imports nothing beyond `lib/`, so it starts in a fraction of a second and needs no
 * package.
 *
 * @module
 */
import { DEFAULT_SOCKET, STATS_PATH } from "../../lib/socket_api.ts";
import { unixRequest } from "../../lib/unix_http.ts";

/** The config file the DaemonSet mounts. */
export const NODE_CONFIG_FILE = "/etc/ferry/config.json";

/** What one node reports. */
export interface NodeReport {
  /** `GET /v1/stats`, as the daemon answered it. */
  stats: Record<string, unknown>;
  /** Attachment records in `stateDir/attachments/` (interfaces the node has plugged). */
  attachments: number;
}

/** Where the daemon's socket and state are. */
export interface NodePaths {
  /** The daemon's unix socket. */
  socket: string;
  /** The daemon's state directory. */
  stateDir: string;
}

/**
 * The socket and state directory a config file names (the daemon's defaults where it names none).
 *
 * @example
 * ```ts
 * const { socket } = pathsFromConfig('{"socket":"/run/ferry/ferry.sock"}');
 * ```
 */
export function pathsFromConfig(text: string): NodePaths {
  const config = JSON.parse(text) as { socket?: unknown; stateDir?: unknown };
  return {
    socket: typeof config.socket === "string" ? config.socket : DEFAULT_SOCKET,
    stateDir: typeof config.stateDir === "string" ? config.stateDir : "/var/lib/ferry",
  };
}

/** Counts the attachment records (`*.json`, not the temporary files of plugs in progress). */
async function countAttachments(stateDir: string): Promise<number> {
  let n = 0;
  try {
    for await (const e of Deno.readDir(`${stateDir}/attachments`)) {
      if (e.isFile && e.name.endsWith(".json") && !e.name.startsWith(".")) n++;
    }
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  return n;
}

/**
 * Reads the node's report.
 *
 * @throws when the daemon does not answer on its socket, or answers with an error.
 */
export async function readNodeReport(paths: NodePaths, signal: AbortSignal): Promise<NodeReport> {
  const res = await unixRequest(paths.socket, "GET", STATS_PATH, undefined, signal);
  if (res.status !== 200) {
    throw new Error(`${STATS_PATH} answered ${res.status}: ${res.body.slice(0, 200)}`);
  }
  return { stats: JSON.parse(res.body), attachments: await countAttachments(paths.stateDir) };
}

/** Runs the command line; returns the exit status. */
export async function main(args: string[]): Promise<number> {
  const [command, ...rest] = args;
  const flag = (name: string) =>
    rest.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  if (command !== "stats" || rest.some((a) => !/^--(config|socket|state-dir)=/.test(a))) {
    console.error("usage: node_report.ts stats [--config=FILE] [--socket=PATH] [--state-dir=DIR]");
    return 2;
  }
  try {
    const fromConfig = pathsFromConfig(await Deno.readTextFile(flag("config") ?? NODE_CONFIG_FILE));
    const paths = {
      socket: flag("socket") ?? fromConfig.socket,
      stateDir: flag("state-dir") ?? fromConfig.stateDir,
    };
    const report = await readNodeReport(paths, AbortSignal.timeout(10_000));
    console.log(JSON.stringify(report));
    return 0;
  } catch (e) {
    console.error(`node_report: ${e instanceof Error ? e.message : e}`);
    return 1;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
