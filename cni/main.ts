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

/**
 * Reads stdin whole with synchronous reads: `Deno.stdin.readable` would load the web streams
 * machinery at every start (about 8 ms here, a quarter of the shim's cold start).
 */
function readStdin(): string {
  const chunks: Uint8Array[] = [];
  for (;;) {
    const buf = new Uint8Array(65536);
    const n = Deno.stdin.readSync(buf);
    if (n === null) break;
    if (n > 0) chunks.push(buf.subarray(0, n));
  }
  return new TextDecoder().decode(concatBytes(chunks));
}

function writeAll(file: { writeSync(p: Uint8Array): number }, text: string): void {
  let bytes = new TextEncoder().encode(text);
  while (bytes.length > 0) bytes = bytes.subarray(file.writeSync(bytes));
}

if (import.meta.main) {
  const env: CniEnv = {};
  for (const name of CNI_ENV_VARS) {
    const value = Deno.env.get(name);
    if (value !== undefined) env[name] = value;
  }
  const stdin = readStdin();
  const outcome = await runShim(env, stdin, daemonSender(socketFromArgs(Deno.args)));
  if (outcome.stdout) writeAll(Deno.stdout, outcome.stdout + "\n");
  if (outcome.note) writeAll(Deno.stderr, outcome.note + "\n");
  Deno.exit(outcome.exitCode);
}
