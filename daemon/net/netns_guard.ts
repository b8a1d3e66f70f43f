/**
 * Which network namespace a request names, decided from `stat` alone (a path is never opened
 * here, so a FIFO or a device cannot block the daemon): a namespace of a pod, gone, something
 * that is not a namespace file at all, or the daemon's own namespace (the node's, since the
 * daemon runs with hostNetwork). Plumbing inside a namespace happens only for the first kind.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { FileIdentity } from "./netlink/libc.ts";

/** What a namespace path is. */
export type NetnsKind = "pod" | "gone" | "not-a-namespace" | "own";

/** Reads a path's identity following symlinks; the default is `Deno.stat`. */
export type StatIdentity = (path: string) => Promise<FileIdentity & { isFile: boolean }>;

const denoStat: StatIdentity = async (path) => {
  const s = await Deno.stat(path);
  return { dev: s.dev, ino: s.ino ?? 0, isFile: s.isFile };
};

/**
 * Where runtimes put namespace files: `/run/netns` (or `/var/run/netns`, its usual symlink) on
 * tmpfs, and `/proc/<pid>/ns/net` (also `self`, `thread-self` and per task) on procfs. Neither
 * file system can keep a `stat` waiting, so these are looked up on the JS thread; anything else
 * goes to a worker thread, where a hung mount cannot stall the daemon.
 */
const NETNS_FILE_SYSTEMS =
  /^\/(?:(?:var\/)?run\/netns\/[^/]+|proc\/(?:\d+|self|thread-self)(?:\/task\/\d+)?\/ns\/net)$/;

/** Whether `path` is in one of {@link NETNS_FILE_SYSTEMS}' places (no `..` can lead out). */
export function onNetnsFileSystem(path: string): boolean {
  return NETNS_FILE_SYSTEMS.test(path) && !path.split("/").includes("..");
}

const denoStatSync = (path: string) => {
  const s = Deno.statSync(path);
  return { dev: s.dev, ino: s.ino ?? 0, isFile: s.isFile };
};

/**
 * The guard. {@link NetnsGuard.forThisProcess} learns the daemon's own namespace (and the one of
 * PID 1, the node's, when it can be read); every namespace file lives on the one `nsfs` device,
 * so a file on any other device is not a namespace.
 *
 * @example
 * ```ts
 * const guard = await NetnsGuard.forThisProcess();
 * await guard.classify("/var/run/netns/cni-1234"); // "pod"
 * await guard.classify("/proc/self/ns/net"); // "own"
 * ```
 */
export class NetnsGuard {
  readonly #own: FileIdentity[];
  readonly #nsfsDev: number;
  readonly #stat: StatIdentity;
  readonly #statSync: (path: string) => FileIdentity & { isFile: boolean };

  /**
   * Creates a guard that treats `own` as the daemon's namespaces (the first one's device is
   * nsfs). A path {@link onNetnsFileSystem} is looked up with `statSync` (a trip to a worker
   * thread costs more than the lookup, and under a burst of ADDs waits for a CPU); any other with
   * `stat`.
   */
  constructor(
    own: FileIdentity[],
    stat: StatIdentity = denoStat,
    statSync: (path: string) => FileIdentity & { isFile: boolean } = denoStatSync,
  ) {
    if (own.length === 0) throw new Error("the netns guard needs the daemon's own namespace");
    this.#own = own;
    this.#nsfsDev = own[0].dev;
    this.#stat = stat;
    this.#statSync = statSync;
  }

  /** A guard for this process: its own network namespace and, when readable, PID 1's. */
  static async forThisProcess(): Promise<NetnsGuard> {
    const own: FileIdentity[] = [await denoStat("/proc/thread-self/ns/net")];
    try {
      own.push(await denoStat("/proc/1/ns/net"));
    } catch { /* not readable in every container; the daemon's own is the one that matters */ }
    return new NetnsGuard(own);
  }

  /** Classifies `path` without opening it. */
  async classify(path: string): Promise<NetnsKind> {
    let id;
    try {
      id = onNetnsFileSystem(path) ? this.#statSync(path) : await this.#stat(path);
    } catch (e) {
      if (e instanceof Deno.errors.NotFound || e instanceof Deno.errors.NotADirectory) {
        return "gone";
      }
      return "not-a-namespace";
    }
    if (!id.isFile || id.dev !== this.#nsfsDev) return "not-a-namespace";
    return this.#own.some((o) => o.dev === id.dev && o.ino === id.ino) ? "own" : "pod";
  }

  /**
   * The namespace ADD and CHECK may plumb in: a pod's. Anything else is code 4, before any
   * plumbing. `allowGone` lets CHECK report a vanished namespace its own way.
   */
  async require(path: string, allowGone = false): Promise<NetnsKind> {
    const kind = await this.classify(path);
    if (kind === "pod" || (kind === "gone" && allowGone)) return kind;
    throw new CniError(CNI_ERROR.INVALID_ENV, `invalid CNI_NETNS: ${path} ${explain(kind)}`);
  }

  /**
   * The namespace DEL may plumb in: the path when it is a pod's, undefined when it is gone or not
   * a namespace (DEL then releases what it can without entering it).
   *
   * @throws {CniError} code 4 for the daemon's own namespace.
   */
  async forDel(path: string | undefined): Promise<string | undefined> {
    if (!path) return undefined;
    const kind = await this.classify(path);
    if (kind === "own") {
      throw new CniError(CNI_ERROR.INVALID_ENV, `invalid CNI_NETNS: ${path} ${explain(kind)}`);
    }
    return kind === "pod" ? path : undefined;
  }
}

function explain(kind: NetnsKind): string {
  switch (kind) {
    case "own":
      return "is the Ferry daemon's own network namespace (the node's); Ferry plugs only pods";
    case "gone":
      return "does not exist";
    default:
      return "is not a network namespace file (nsfs)";
  }
}
