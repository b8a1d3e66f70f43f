/**
 * The entry point of `kubectl ferry` (installed as `kubectl-ferry`, or `deno task ferry …`): wires
 * the API client on the operator's kubeconfig and `kubectl exec`, then runs the command line.
 *
 * @module
 */
import { KubeClient } from "../daemon/k8s/client.ts";
import { KubeconfigError, loadKubeconfig, loadKubeconfigFiles } from "../daemon/k8s/kubeconfig.ts";
import { HttpTransport } from "../daemon/k8s/transport.ts";
import { type CliDeps, runCli } from "./cli.ts";
import { startKubectlProxy } from "./kubectl_proxy.ts";
import { KubectlExec, type KubectlOptions } from "./pod_exec.ts";

const encoder = new TextEncoder();

/** Writes all of `text` (a pipe may take a large write in parts). */
function writeAll(w: { writeSync(p: Uint8Array): number }, text: string): void {
  let bytes = encoder.encode(text);
  while (bytes.length) bytes = bytes.subarray(w.writeSync(bytes));
}

const interrupt = new AbortController();

/**
 * The API with the operator's kubeconfig: read by the project's client, or, for credentials it
 * does not handle (exec plugins, auth providers), through `kubectl proxy`.
 */
export async function connectTo(
  options: KubectlOptions,
): Promise<{ client: KubeClient; close(): Promise<void> }> {
  if (!options.kubeconfig && !options.kubeconfigs?.length) {
    throw new KubeconfigError("no kubeconfig: give --kubeconfig");
  }
  let connection;
  try {
    connection = options.kubeconfig
      ? await loadKubeconfig(options.kubeconfig, { context: options.context })
      : await loadKubeconfigFiles(options.kubeconfigs!, { context: options.context });
  } catch (e) {
    if (!(e instanceof KubeconfigError && /exec or auth-provider/.test(e.message))) throw e;
    const proxy = await startKubectlProxy(options);
    const transport = new HttpTransport(proxy.connection);
    return {
      client: new KubeClient(transport),
      close: async () => {
        transport.close();
        await proxy.close();
      },
    };
  }
  const transport = new HttpTransport(connection);
  return { client: new KubeClient(transport), close: () => Promise.resolve(transport.close()) };
}

/** The real collaborators. */
export const REAL_DEPS: CliDeps = {
  connect: connectTo,
  exec: (options) => new KubectlExec(options),
  out: (text) => writeAll(Deno.stdout, text),
  err: (text) => writeAll(Deno.stderr, text),
  isTerminal: Deno.stdout.isTerminal(),
  now: () => Date.now(),
  interrupted: interrupt.signal,
  wait: (ms, signal) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, ms);
      signal.addEventListener("abort", () => {
        clearTimeout(timer);
        reject(signal.reason);
      }, { once: true });
    }),
};

if (import.meta.main) {
  // Ctrl-C: the running command stops and cleans up (connectivity-test deletes its namespace);
  // a second Ctrl-C exits at once.
  Deno.addSignalListener("SIGINT", () => {
    if (interrupt.signal.aborted) Deno.exit(130);
    interrupt.abort(new Error("interrupted"));
  });
  Deno.exit(await runCli(Deno.args, (n) => Deno.env.get(n), REAL_DEPS));
}
