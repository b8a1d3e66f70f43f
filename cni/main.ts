/**
 * The CNI executable's entrypoint: reads the CNI environment and stdin, runs the protocol, prints
 * the outcome and exits. The socket path comes from `--socket`, baked in by the installer.
 *
 * @module
 */
import { CNI_ENV_VARS, type CniEnv } from "./invocation.ts";
import { runShim } from "./shim.ts";
import { daemonSender } from "./daemon_client.ts";
import { DEFAULT_SOCKET } from "../lib/socket_api.ts";
import { concatBytes } from "../lib/bytes.ts";

function socketFromArgs(args: string[]): string {
  const i = args.indexOf("--socket");
  return i >= 0 && args[i + 1] ? args[i + 1] : DEFAULT_SOCKET;
}

async function readStdin(): Promise<string> {
  const chunks: Uint8Array[] = [];
  for await (const chunk of Deno.stdin.readable) chunks.push(chunk);
  return new TextDecoder().decode(concatBytes(chunks));
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
  if (outcome.note) await Deno.stderr.write(new TextEncoder().encode(outcome.note + "\n"));
  Deno.exit(outcome.exitCode);
}
