/**
 * The daemon's log lines in tests of an in-process daemon: LogTape configured to keep the
 * `ferry` records in memory while a test body runs, and a bounded wait for a line.
 *
 * @module
 */
import { assert } from "deno-std/assert/mod.js";
import { configure, type LogRecord, reset } from "@logtape/logtape";
import { renderMessage } from "../../daemon/telemetry/log.ts";

/** The `ferry` log records written while `fn` runs (LogTape configured for the test). */
export async function withCapturedLogs<T>(fn: (records: LogRecord[]) => Promise<T>): Promise<T> {
  const records: LogRecord[] = [];
  await configure({
    reset: true,
    sinks: { memory: (r) => void records.push(r) },
    loggers: [
      { category: ["ferry"], lowestLevel: "info", sinks: ["memory"] },
      { category: ["logtape", "meta"], lowestLevel: "warning", sinks: [] },
    ],
  });
  try {
    return await fn(records);
  } finally {
    await reset();
  }
}

/** Each record as `LEVEL message`. */
export function lines(records: LogRecord[]): string[] {
  return records.map((r) => `${r.level} ${renderMessage(r.message)}`);
}

/** Waits (bounded) until a record says `text`; fails naming it and quoting what was logged. */
export async function waitForLine(records: LogRecord[], text: string): Promise<string> {
  const deadline = Date.now() + 10_000;
  while (true) {
    const found = lines(records).find((l) => l.includes(text));
    if (found) return found;
    assert(
      Date.now() < deadline,
      `no log line says "${text}"; logged:\n${lines(records).join("\n")}`,
    );
    await new Promise((r) => setTimeout(r, 20));
  }
}
