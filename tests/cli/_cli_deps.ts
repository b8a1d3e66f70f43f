/**
 * `kubectl ferry` run in-process for tests: the real API client on a kubeconfig, the test's exec,
 * output captured, a fixed clock, waits as short timers, and an interrupt the test controls.
 *
 * @module
 */
import { KubeClient } from "../../daemon/k8s/client.ts";
import { loadKubeconfig } from "../../daemon/k8s/kubeconfig.ts";
import { HttpTransport } from "../../daemon/k8s/transport.ts";
import { type CliDeps, runCli } from "../../cli/cli.ts";
import type { PodExec } from "../../cli/pod_exec.ts";

/** What a run printed and returned. */
export interface CliRun {
  /** Exit status. */
  code: number;
  /** Stdout. */
  out: string;
  /** Stderr. */
  err: string;
}

/** Runs `kubectl ferry ARGS` with `exec`; `interrupted` plays Ctrl-C; `err` sees stderr as it comes. */
export async function ferry(
  args: string[],
  exec: PodExec,
  options: { now?: () => number; interrupted?: AbortSignal; onErr?: (t: string) => void } = {},
): Promise<CliRun> {
  let out = "", err = "";
  const deps: CliDeps = {
    async connect(o) {
      const transport = new HttpTransport(await loadKubeconfig(o.kubeconfig!));
      return { client: new KubeClient(transport), close: () => transport.close() };
    },
    exec: () => exec,
    out: (t) => out += t,
    err: (t) => {
      err += t;
      options.onErr?.(t);
    },
    isTerminal: false,
    now: options.now ?? (() => Date.now()),
    interrupted: options.interrupted ?? new AbortController().signal,
    wait: (ms, signal) =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(resolve, Math.min(ms, 50));
        signal.addEventListener("abort", () => {
          clearTimeout(timer);
          reject(signal.reason);
        }, { once: true });
      }),
  };
  const code = await runCli(args, () => undefined, deps);
  return { code, out, err };
}
