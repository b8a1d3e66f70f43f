/**
 * Running a command in a Ferry pod: {@link PodExec}, one `exec(pod, argv)`. The project's API
 * client speaks plain HTTP on `fetch`, and `pods/exec` is a connection upgrade (SPDY or a
 * WebSocket with kubectl's subprotocols and client certificates), so {@link KubectlExec} runs
 * `kubectl exec` with the operator's kubeconfig and context: every operator has kubectl, and it
 * already speaks every upgrade and authentication the cluster accepts. Tests hand in their own
 * implementation.
 *
 * @module
 */

/** The pod (and container) a command runs in. */
export interface PodRef {
  /** Namespace. */
  namespace: string;
  /** Pod name. */
  name: string;
  /** Container (Ferry's is `ferry`). */
  container: string;
}

/** What a command left. */
export interface ExecResult {
  /** Its exit status (kubectl's own when it could not run it). */
  code: number;
  /** Its standard output. */
  stdout: string;
  /** Its standard error. */
  stderr: string;
}

/** Runs a command in a pod, and reads a container's log. */
export interface PodExec {
  /** Runs `argv` in `pod` and collects its output; `signal` stops it. */
  exec(pod: PodRef, argv: string[], signal: AbortSignal): Promise<ExecResult>;
  /** The container's log (`previous`: of its last terminated run); exit status as {@link exec}. */
  logs(pod: PodRef, previous: boolean, signal: AbortSignal): Promise<ExecResult>;
}

/** How kubectl reaches the cluster: the operator's flags, passed on as given. */
export interface KubectlOptions {
  /** `--kubeconfig` (or `~/.kube/config` when neither it nor `KUBECONFIG` is given). */
  kubeconfig?: string;
  /**
   * The files of `KUBECONFIG` (without `--kubeconfig`), merged as kubectl merges them; kubectl
   * itself is given them as its `KUBECONFIG`.
   */
  kubeconfigs?: string[];
  /** `--context`. */
  context?: string;
  /** The kubectl binary (default `kubectl` on the PATH). */
  kubectl?: string;
}

/**
 * The kubectl command line of `verb` (`exec` or `logs`) on `pod`'s container, with the operator's
 * connection flags; `tail` follows (for exec, `--` and the command).
 */
export function kubectlArgs(
  options: KubectlOptions,
  verb: "exec" | "logs",
  pod: PodRef,
  tail: string[],
): string[] {
  return [
    ...(options.kubeconfig ? [`--kubeconfig=${options.kubeconfig}`] : []),
    ...(options.context ? [`--context=${options.context}`] : []),
    verb,
    `--namespace=${pod.namespace}`,
    pod.name,
    `--container=${pod.container}`,
    ...tail,
  ];
}

/** kubectl's environment for `options`: `KUBECONFIG` set to the list it was given, if any. */
export function kubectlEnv(options: KubectlOptions): Record<string, string> {
  return options.kubeconfigs && !options.kubeconfig
    ? { KUBECONFIG: options.kubeconfigs.join(":") }
    : {};
}

/**
 * {@link PodExec} through `kubectl exec`.
 *
 * @example
 * ```ts
 * const exec = new KubectlExec({ context: "prod" });
 * const r = await exec.exec({ namespace: "kube-system", name: "ferry-x7k2p", container: "ferry" }, ["true"], AbortSignal.timeout(10_000));
 * ```
 */
export class KubectlExec implements PodExec {
  readonly #options: KubectlOptions;

  /** Creates it with the operator's kubectl options. */
  constructor(options: KubectlOptions) {
    this.#options = options;
  }

  /** Runs `kubectl exec`; a kubectl that is not installed is exit status 127. */
  exec(pod: PodRef, argv: string[], signal: AbortSignal): Promise<ExecResult> {
    return this.#kubectl(kubectlArgs(this.#options, "exec", pod, ["--", ...argv]), signal);
  }

  /** Runs `kubectl logs` (with timestamps). */
  logs(pod: PodRef, previous: boolean, signal: AbortSignal): Promise<ExecResult> {
    const tail = ["--timestamps", ...(previous ? ["--previous"] : [])];
    return this.#kubectl(kubectlArgs(this.#options, "logs", pod, tail), signal);
  }

  async #kubectl(args: string[], signal: AbortSignal): Promise<ExecResult> {
    try {
      const out = await new Deno.Command(this.#options.kubectl ?? "kubectl", {
        args,
        env: kubectlEnv(this.#options),
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        signal,
      }).output();
      const text = (b: Uint8Array) => new TextDecoder().decode(b);
      return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
    } catch (e) {
      if (e instanceof Deno.errors.NotFound) {
        return { code: 127, stdout: "", stderr: "kubectl is not installed (or not on the PATH)" };
      }
      throw e;
    }
  }
}
