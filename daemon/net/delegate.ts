/**
 * The delegate driver: runs a standard CNI plugin binary (any of the reference set: bridge,
 * macvlan, ipvlan, host-local, static, tuning, …) found in `CNI_PATH`, with the same environment
 * protocol a runtime uses, `prevResult` passing, and DEL with the cached result. Used for
 * attachments whose network config names another plugin type.
 *
 * @module
 */
import { Deadline } from "../runtime/deadline.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { CniResult, NetConf } from "../../lib/cni/schemas.ts";
import { convertResult, upgradeResult } from "../../lib/cni/versions.ts";
import { checkShape } from "../../lib/validate.ts";
import { validateCniResult } from "../../lib/_generated/validateCniResult.js";
import { feedStdin } from "../runtime/child_input.ts";
import { concatBytes } from "../../lib/bytes.ts";

/** One plugin invocation. */
export interface DelegateCall {
  /** ADD, DEL or CHECK. */
  command: "ADD" | "DEL" | "CHECK";
  /** The plugin's network config (its `type` names the binary unless `plugin` does). */
  config: NetConf;
  /** The binary to run, when not `config.type` (an IPAM plugin gets its parent's config). */
  plugin?: string;
  /** The container ID. */
  containerId: string;
  /** The network namespace path (may be absent for DEL). */
  netns?: string;
  /** The interface name in the container. */
  ifname: string;
  /** CNI_ARGS as the runtime sent them. */
  args?: Record<string, string>;
  /** Directories searched for the binary (and passed on as CNI_PATH). */
  path: string[];
  /** The previous result (chained ADD/CHECK, and the cached result for DEL). */
  prevResult?: CniResult;
  /** Aborts the plugin (it is killed). */
  signal?: AbortSignal;
  /**
   * Kills the plugin when it runs longer than this (ms); the timer is cleared as soon as the
   * plugin exits, so nothing of the call outlives it.
   */
  timeoutMs?: number;
  /** The most the plugin may print on each of stdout and stderr ({@link MAX_PLUGIN_OUTPUT_BYTES}). */
  maxOutputBytes?: number;
}

/**
 * The process groups of the plugins this process runs now. A process-level fact (they are this
 * process's children), kept here so that a stopping daemon can end them: a plugin runs in a
 * session of its own, so nothing else would.
 */
const RUNNING = new Set<number>();

/**
 * Kills every plugin still running, with everything each started (a stopping daemon abandons
 * their requests); how many there were.
 */
export function stopRunningPlugins(): number {
  const n = RUNNING.size;
  for (const pid of RUNNING) {
    try {
      Deno.kill(-pid, "SIGKILL");
    } catch { /* gone */ }
  }
  RUNNING.clear();
  return n;
}

/** A plugin type names a file in a CNI_PATH directory: no path separators, no leading dot. */
const PLUGIN_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

/** Finds the binary for `type` in `path`; undefined when none is there. */
export async function findPlugin(type: string, path: string[]): Promise<string | undefined> {
  for (const dir of path) {
    const candidate = `${dir.replace(/\/$/, "")}/${type}`;
    try {
      const info = await Deno.stat(candidate);
      if (info.isFile && (info.mode ?? 0o111) & 0o111) return candidate;
    } catch { /* not here */ }
  }
  return undefined;
}

/**
 * Runs the plugin. ADD resolves to its result in the current spec version; DEL and CHECK to
 * undefined.
 *
 * The plugin runs in a process group of its own; at `timeoutMs` (or when `signal` aborts) the
 * whole group is killed, and the call ends then even if something escaped the group and holds
 * the plugin's pipes.
 *
 * @throws {CniError} the plugin's own error (its code passes through), 7 when the plugin is not in
 * `path`, 5 when it prints something that is not a CNI answer, prints more than
 * `maxOutputBytes`, is aborted, or did not finish within `timeoutMs`.
 * @example
 * ```ts
 * const result = await delegate({ command: "ADD", config, containerId, netns, ifname: "net1", path: ["/usr/lib/cni"] });
 * ```
 */
export async function delegate(call: DelegateCall): Promise<CniResult | undefined> {
  const type = call.plugin ?? call.config.type;
  if (!PLUGIN_NAME.test(type)) {
    throw new CniError(CNI_ERROR.INVALID_CONFIG, `invalid plugin type ${JSON.stringify(type)}`);
  }
  const binary = await findPlugin(type, call.path);
  if (!binary) {
    throw new CniError(
      CNI_ERROR.INVALID_CONFIG,
      `failed to find plugin ${JSON.stringify(type)} in path [${call.path.join(" ")}]`,
    );
  }
  // The plugin reads prevResult in its config's version.
  const stdin = JSON.stringify(
    call.prevResult
      ? { ...call.config, prevResult: convertResult(call.prevResult, call.config.cniVersion) }
      : call.config,
  );
  const env: Record<string, string> = {
    CNI_COMMAND: call.command,
    CNI_CONTAINERID: call.containerId,
    CNI_IFNAME: call.ifname,
    CNI_PATH: call.path.join(":"),
    CNI_ARGS: Object.entries(call.args ?? {}).map(([k, v]) => `${k}=${v}`).join(";"),
  };
  if (call.netns) env.CNI_NETNS = call.netns;
  // Its own session and process group: at the deadline the whole group is killed, so a child
  // the plugin started (and that holds its stdout open) cannot outlive the call.
  const child = new Deno.Command(binary, {
    env,
    clearEnv: true,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
    detached: true,
  })
    .spawn();
  RUNNING.add(child.pid);
  const killGroup = () => {
    try {
      Deno.kill(-child.pid, "SIGKILL");
    } catch {
      try {
        child.kill("SIGKILL");
      } catch { /* exited */ }
    }
  };
  using deadline = call.timeoutMs === undefined ? undefined : new Deadline(call.timeoutMs);
  const signals = [call.signal, deadline?.signal].filter((s) => s !== undefined);
  const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
  const stopped = Promise.withResolvers<never>();
  stopped.promise.catch(() => {});
  const stop = () => {
    killGroup();
    const timedOut = deadline?.signal.aborted && !call.signal?.aborted;
    stopped.reject(
      timedOut
        ? new CniError(
          CNI_ERROR.IO_FAILURE,
          `plugin ${type} did not finish ${call.command} within ${call.timeoutMs} ms; it was ` +
            "killed with every process it started",
        )
        : new CniError(CNI_ERROR.IO_FAILURE, `plugin ${type} was stopped: ${signal?.reason}`),
    );
  };
  if (signal?.aborted) stop();
  else signal?.addEventListener("abort", stop, { once: true });
  const limit = call.maxOutputBytes ?? MAX_PLUGIN_OUTPUT_BYTES;
  const tooMuch = (stream: string) => {
    killGroup();
    return new CniError(
      CNI_ERROR.IO_FAILURE,
      `plugin ${type} printed more than ${limit} bytes on ${stream}; it was killed`,
    );
  };
  const stdout = readCapped(child.stdout, limit, () => tooMuch("stdout"));
  const stderr = readCapped(child.stderr, limit, () => tooMuch("stderr"));
  try {
    await Promise.race([feedStdin(child, stdin), stopped.promise]);
    const [out, err, status] = await Promise.race([
      Promise.all([stdout, stderr, child.status]),
      stopped.promise,
    ]);
    if (signal?.aborted) await stopped.promise;
    const text = new TextDecoder().decode(out).trim();
    if (!status.success) {
      throw pluginError(type, text, new TextDecoder().decode(err));
    }
    if (call.command !== "ADD") return undefined;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new CniError(
        CNI_ERROR.IO_FAILURE,
        `plugin ${type} printed no JSON result`,
        text.slice(0, 300),
      );
    }
    return upgradeResult(
      checkShape<CniResult>(
        validateCniResult,
        parsed,
        CNI_ERROR.IO_FAILURE,
        `result of plugin ${type}`,
      ),
    );
  } catch (e) {
    killGroup();
    throw e;
  } finally {
    RUNNING.delete(child.pid);
    signal?.removeEventListener("abort", stop);
    // Whatever is left of the group is gone; its pipes are not read any further.
    void stdout.catch(() => {});
    void stderr.catch(() => {});
    child.status.catch(() => {});
  }
}

/** The most a plugin may print on stdout, and on stderr (a CNI result is a few KiB). */
export const MAX_PLUGIN_OUTPUT_BYTES = 1024 * 1024;

/**
 * Reads `stream` to its end, at most `limit` bytes; past that the read is cancelled and
 * `exceeded()`'s error thrown.
 */
async function readCapped(
  stream: ReadableStream<Uint8Array>,
  limit: number,
  exceeded: () => Error,
): Promise<Uint8Array> {
  const reader = stream.getReader();
  const parts: Uint8Array[] = [];
  let total = 0;
  try {
    while (true) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.length;
      if (total > limit) {
        await reader.cancel().catch(() => {});
        throw exceeded();
      }
      parts.push(value);
    }
  } finally {
    reader.releaseLock();
  }
  return concatBytes(parts);
}

function pluginError(type: string, stdout: string, stderr: string): CniError {
  try {
    const e = JSON.parse(stdout) as { code?: unknown; msg?: unknown; details?: unknown };
    if (typeof e.code === "number") {
      return new CniError(
        e.code,
        `plugin ${type}: ${String(e.msg ?? "failed")}`,
        String(e.details ?? ""),
      );
    }
  } catch { /* not a CNI error object */ }
  return new CniError(
    CNI_ERROR.IO_FAILURE,
    `plugin ${type} failed`,
    (stdout || stderr).slice(0, 500),
  );
}
