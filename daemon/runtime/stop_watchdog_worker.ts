/**
 * The stop watchdog's thread (see `stop_watchdog.ts`): a Worker with an event loop of its own,
 * so its timer fires however blocked the daemon's main thread is (a synchronous call that does
 * not return, a lock, the process's own exit). When it fires it writes the last line it was
 * given straight to stderr and ends the whole process with libc `_exit`, which neither waits for
 * the main thread nor runs exit handlers (`Deno.exit` in a Worker ends only the Worker).
 *
 * Messages: {@link WatchdogMessage}.
 *
 * @module
 */
import { jsonLine, type LogFormat, textLine } from "../telemetry/log.ts";
import type { LogRecord } from "@logtape/logtape";

/** What the main thread tells the watchdog: when to fire, and what to say and exit with then. */
export interface WatchdogMessage {
  /** Milliseconds from now to fire (only in the first message). */
  fireInMs?: number;
  /** Format of the line (the daemon's `logFormat`). */
  format?: LogFormat;
  /** The line's message. */
  message: string;
  /** The line's values. */
  properties: Record<string, unknown>;
  /** The process's exit code. */
  code: number;
}

let last: WatchdogMessage | undefined;
let format: LogFormat = "json";

function fire(): void {
  const said = last!;
  const record = {
    category: ["ferry", "daemon"],
    level: "error",
    message: [said.message],
    rawMessage: said.message,
    timestamp: Date.now(),
    properties: said.properties,
  } as unknown as LogRecord;
  const line = new TextEncoder().encode(format === "text" ? textLine(record) : jsonLine(record));
  try {
    for (let at = 0; at < line.length;) at += Deno.stderr.writeSync(line.subarray(at));
  } catch { /* stderr gone: exit all the same */ }
  const libc = Deno.dlopen("libc.so.6", { _exit: { parameters: ["i32"], result: "void" } });
  libc.symbols._exit(said.code);
}

(self as unknown as { onmessage: (e: MessageEvent<WatchdogMessage>) => void }).onmessage = (e) => {
  const first = last === undefined;
  last = e.data;
  if (e.data.format) format = e.data.format;
  if (first) setTimeout(fire, e.data.fireInMs ?? 0);
};
