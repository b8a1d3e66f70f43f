/**
 * The CNI executable's entrypoint: reads the CNI environment and stdin, runs the protocol, prints
 * the outcome and exits. The socket path comes from `--socket`, baked in by the installer.
 *
 * @module
 */
import { CNI_ENV_VARS, type CniEnv } from "./invocation.ts";
import { runShim } from "./shim.ts";
import { daemonSender } from "./daemon_client.ts";

/** The socket the shim uses when `--socket` is not given. */
export const DEFAULT_SOCKET = "/run/ferry/ferry.sock";

function socketFromArgs(args: string[]): string {
  const i = args.indexOf("--socket");
  return i >= 0 && args[i + 1] ? args[i + 1] : DEFAULT_SOCKET;
}

async function readStdin(): Promise<string> {
  const chunks: Uint8Array[] = [];
  for await (const chunk of Deno.stdin.readable) chunks.push(chunk);
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let off = 0;
  for (const c of chunks) {
    all.set(c, off);
    off += c.length;
  }
  return new TextDecoder().decode(all);
}

if (import.meta.main) {
  const env: CniEnv = {};
  for (const name of CNI_ENV_VARS) {
    const value = Deno.env.get(name);
    if (value !== undefined) env[name] = value;
  }
  const stdin = await readStdin();
  const outcome = await runShim(env, stdin, daemonSender(socketFromArgs(Deno.args)));
  if (outcome.stdout) await Deno.stdout.write(new TextEncoder().encode(outcome.stdout + "\n"));
  Deno.exit(outcome.exitCode);
}
