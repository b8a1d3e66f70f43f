/**
 * Runs iproute2: one `ip -batch` process for many operations, in the host namespace or (through
 * `nsenter --net=PATH`) inside a pod's namespace. The only module of the veth plumbing that
 * spawns processes; they end with the runner ({@link SpawningIpRunner.close}).
 *
 * @module
 */
import { ChildSet } from "../runtime/child_set.ts";

/** An `ip` run that failed. */
export class IpCommandError extends Error {
  /** What `ip` printed on stderr. */
  readonly stderr: string;
  /** Creates the error. */
  constructor(what: string, stderr: string) {
    super(`${what}: ${stderr.trim() || "failed"}`);
    this.name = "IpCommandError";
    this.stderr = stderr;
  }
}

/** Options of one batch. */
export interface IpBatchOptions {
  /** Run inside this network namespace (a path). */
  netns?: string;
  /** Ask for JSON output (`-j`). */
  json?: boolean;
  /** Ask for details (`-d`), e.g. a link's kind-specific data. */
  details?: boolean;
  /** Address family of every line (`-4`/`-6`); iproute2 cannot switch it per line. */
  family?: 4 | 6;
  /** Sysctls written (paths under the runner's sysctl directory) in the same namespace first. */
  sysctls?: [path: string, value: string][];
  /** Run iproute2's `bridge` (forwarding-database lines) instead of `ip`. */
  bridge?: boolean;
}

/**
 * A shell script writing the sysctls given as `path=value` arguments below the directory given as
 * the first argument, then exec'ing ip with `ipArgs` (fixed flags only): one process chain per
 * namespace; the directory, paths and values never become code.
 */
function sysctlsThenIp(ipArgs: string[], tool: "ip" | "bridge"): string {
  return `dir=$1; shift; for kv do printf %s "\${kv##*=}" > "$dir/\${kv%=*}" || exit 1; done; exec ${tool} ${
    ipArgs.join(" ")
  }`;
}

/** Where sysctls are written unless a mount of the host's is given (see {@link SpawningIpRunner}). */
export const PROC_SYS = "/proc/sys";

/** Runs iproute2 batches. */
export interface IpRunner {
  /** Runs `lines` as one batch (in `netns` when given); resolves to stdout; throws {@link IpCommandError}. */
  batch(lines: string[], options?: IpBatchOptions): Promise<string>;
}

/**
 * The real runner, using the `ip` and `nsenter` binaries on PATH.
 *
 * @example
 * ```ts
 * await new SpawningIpRunner().batch(["link set lo up"], { netns: "/var/run/netns/p1" });
 * ```
 */
export class SpawningIpRunner implements IpRunner {
  readonly #sysctlDir: string;
  /** Every `ip`/`nsenter` it started that still runs: none outlives the daemon. */
  readonly #children = new ChildSet();

  /**
   * `sysctlDir` is where sysctls are written: `/proc/sys`, or (in a container without privilege,
   * whose `/proc/sys` is read-only) a bind mount of the host's `/proc/sys/net` at `DIR/net`,
   * which shows each namespace its own entries as `/proc/sys/net` does.
   */
  constructor(sysctlDir = PROC_SYS) {
    this.#sysctlDir = sysctlDir;
  }

  /** Runs `lines` as one batch. */
  async batch(lines: string[], options: IpBatchOptions = {}): Promise<string> {
    const flags = [
      ...(options.family ? [`-${options.family}`] : []),
      ...(options.json ? ["-j"] : []),
      ...(options.details ? ["-d"] : []),
    ];
    const sysctls = options.sysctls ?? [];
    if (!options.netns) {
      for (const [path, value] of sysctls) await writeSysctl(path, value, this.#sysctlDir);
    }
    const ipArgs = [...flags, "-batch", "-"];
    const tool = options.bridge ? "bridge" : "ip";
    const inNs = sysctls.length > 0
      ? [
        "sh",
        "-c",
        sysctlsThenIp(ipArgs, tool),
        "sh",
        this.#sysctlDir,
        ...sysctls.map(([p, v]) => `${p}=${v}`),
      ]
      : [tool, ...ipArgs];
    const [cmd, args] = options.netns
      ? ["nsenter", [`--net=${options.netns}`, "--", ...inNs]]
      : [tool, ipArgs];
    const out = await this.#children.run(cmd, args, {
      stdin: lines.join("\n") + "\n",
      stdout: true,
    });
    const stderr = new TextDecoder().decode(out.stderr);
    if (!out.success) {
      throw new IpCommandError(
        `${tool} batch${options.netns ? ` in ${options.netns}` : ""}`,
        stderr,
      );
    }
    return new TextDecoder().decode(out.stdout);
  }

  /** Kills every `ip` or `nsenter` still running (the daemon stops) and refuses new batches. */
  close(): void {
    this.#children.close();
  }
}

/** Writes one sysctl (`path` below `dir`) of the daemon's own (host) namespace. */
export async function writeSysctl(path: string, value: string, dir = PROC_SYS): Promise<void> {
  try {
    await Deno.writeTextFile(`${dir}/${path}`, value);
  } catch (e) {
    throw new IpCommandError(`sysctl ${path}=${value}`, e instanceof Error ? e.message : String(e));
  }
}
