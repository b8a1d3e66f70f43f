/**
 * The delegate driver: runs a standard CNI plugin binary (any of the reference set: bridge,
 * macvlan, ipvlan, host-local, static, tuning, …) found in `CNI_PATH`, with the same environment
 * protocol a runtime uses, `prevResult` passing, and DEL with the cached result. Used for
 * attachments whose network config names another plugin type.
 *
 * @module
 */
import { Deadline } from "../deadline.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { CniResult, NetConf } from "../../lib/cni/schemas.ts";
import { convertResult, upgradeResult } from "../../lib/cni/versions.ts";
import { checkShape } from "../../lib/validate.ts";
import { validateCniResult } from "../../lib/_generated/validateCniResult.js";
import { feedStdin } from "../child_input.ts";

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
 * @throws {CniError} the plugin's own error (its code passes through), 7 when the plugin is not in
 * `path`, 5 when it prints something that is not a CNI answer or is aborted.
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
  const child = new Deno.Command(binary, {
    env,
    clearEnv: true,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  })
    .spawn();
  const kill = () => {
    try {
      child.kill("SIGKILL");
    } catch { /* exited */ }
  };
  using deadline = call.timeoutMs === undefined ? undefined : new Deadline(call.timeoutMs);
  const signals = [call.signal, deadline?.signal].filter((s) => s !== undefined);
  const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
  signal?.addEventListener("abort", kill, { once: true });
  try {
    await feedStdin(child, stdin);
    const out = await child.output();
    if (signal?.aborted) {
      throw new CniError(
        CNI_ERROR.IO_FAILURE,
        `plugin ${type} was stopped: ${signal.reason}`,
      );
    }
    const text = new TextDecoder().decode(out.stdout).trim();
    if (!out.success) {
      throw pluginError(type, text, new TextDecoder().decode(out.stderr));
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
  } finally {
    signal?.removeEventListener("abort", kill);
  }
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
