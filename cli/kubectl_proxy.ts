/**
 * The API through `kubectl proxy` on a unix socket, for kubeconfigs the project's client does not
 * read itself (exec credential plugins and auth providers: EKS, GKE, OIDC): kubectl
 * authenticates, and the socket, in a directory only this user can enter, is reachable by nobody
 * else while the command runs.
 *
 * @module
 */
import type { ConnectionConfig } from "../daemon/k8s/transport.ts";
import { kubectlEnv, type KubectlOptions } from "./pod_exec.ts";

/** A running proxy. */
export interface KubectlProxy {
  /** How to reach the API through it. */
  connection: ConnectionConfig;
  /** Stops it and removes its socket. */
  close(): Promise<void>;
}

/**
 * Starts `kubectl proxy --unix-socket` and waits (up to `timeoutMs`) until it serves.
 *
 * @throws Error naming kubectl's own words when it exits or does not serve in time.
 * @example
 * ```ts
 * const proxy = await startKubectlProxy({ context: "eks-prod" });
 * const transport = new HttpTransport(proxy.connection);
 * ```
 */
export async function startKubectlProxy(
  options: KubectlOptions,
  timeoutMs = 15_000,
): Promise<KubectlProxy> {
  const dir = await Deno.makeTempDir({ prefix: "kubectl-ferry-" });
  await Deno.chmod(dir, 0o700);
  const socket = `${dir}/api.sock`;
  const child = new Deno.Command(options.kubectl ?? "kubectl", {
    args: [
      ...(options.kubeconfig ? [`--kubeconfig=${options.kubeconfig}`] : []),
      ...(options.context ? [`--context=${options.context}`] : []),
      "proxy",
      `--unix-socket=${socket}`,
    ],
    env: kubectlEnv(options),
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  let exited = false;
  const status = child.status.then((s) => (exited = true, s));
  const close = async () => {
    if (!exited) child.kill("SIGTERM");
    await status;
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  };
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exited) {
      await close();
      throw new Error(`kubectl proxy exited: ${(await stderr).trim()}`);
    }
    if (await Deno.stat(socket).then(() => true, () => false)) break;
    if (Date.now() > deadline) {
      await close();
      throw new Error(`kubectl proxy did not serve within ${timeoutMs / 1000} s`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { connection: { server: "http://localhost", unixSocket: socket }, close };
}
