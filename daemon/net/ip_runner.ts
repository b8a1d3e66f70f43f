/**
 * Runs iproute2: one `ip -batch` process for many operations, in the host namespace or (through
 * `nsenter --net=PATH`) inside a pod's namespace. The only module of the veth plumbing that
 * spawns processes.
 *
 * @module
 */

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
  /** Address family of every line (`-4`/`-6`); iproute2 cannot switch it per line. */
  family?: 4 | 6;
}

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
  /** Runs `lines` as one batch. */
  async batch(lines: string[], options: IpBatchOptions = {}): Promise<string> {
    const ipArgs = [
      ...(options.family ? [`-${options.family}`] : []),
      ...(options.json ? ["-j"] : []),
      "-batch",
      "-",
    ];
    const [cmd, args] = options.netns
      ? ["nsenter", [`--net=${options.netns}`, "--", "ip", ...ipArgs]]
      : ["ip", ipArgs];
    const child = new Deno.Command(cmd, { args, stdin: "piped", stdout: "piped", stderr: "piped" })
      .spawn();
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(lines.join("\n") + "\n"));
    await writer.close();
    const out = await child.output();
    const stderr = new TextDecoder().decode(out.stderr);
    if (!out.success) {
      throw new IpCommandError(`ip batch${options.netns ? ` in ${options.netns}` : ""}`, stderr);
    }
    return new TextDecoder().decode(out.stdout);
  }
}
