/**
 * The stop watchdog's thread (see `stop_watchdog.ts`): a Worker with an event loop of its own,
 * so its timer fires however blocked the daemon's main thread is (a synchronous call that does
 * not return, a lock, the process's own exit). When it fires it writes the last line it was
 * given to stderr (waiting at most a second for it: a log reader that stopped reading fills the
 * pipe) and ends the whole process with libc `_exit`, which neither waits for the main thread nor
 * runs exit handlers (`Deno.exit` in a Worker ends only the Worker).
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

/** How long the last line may take to write (a full stderr pipe) before the exit goes ahead. */
const WRITE_WAIT_MS = 1000;

async function fire(): Promise<void> {
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
  const libc = Deno.dlopen("libc.so.6", {
    _exit: { parameters: ["i32"], result: "void" },
    // On a thread of its own, and not through Deno's stderr (whose lock a log write blocked on a
    // full pipe holds): the line is written if it can be, and the exit never waits for it long.
    write: { parameters: ["i32", "buffer", "usize"], result: "isize", nonblocking: true },
  });
  await Promise.race([
    libc.symbols.write(2, line, BigInt(line.length)).catch(() => {}),
    new Promise((r) => setTimeout(r, WRITE_WAIT_MS)),
  ]);
  libc.symbols._exit(said.code);
}

(self as unknown as { onmessage: (e: MessageEvent<WatchdogMessage>) => void }).onmessage = (e) => {
  const first = last === undefined;
  last = e.data;
  if (e.data.format) format = e.data.format;
  if (first) setTimeout(() => void fire(), e.data.fireInMs ?? 0);
};
