/**
 * Logging setup: LogTape, JSON (or text) lines on stderr, one category per module under `ferry`. Messages
 * read as sentences: strings are interpolated as they are (no JSON quotes), other values as JSON;
 * the values also stay in `properties` for machines.
 *
 * @module
 */
import { concatBytes } from "../../lib/bytes.ts";
import { configure, type LogLevel, type LogRecord, reset, type Sink } from "@logtape/logtape";

/**
 * The text of a record's message: literal parts and values in turn, strings bare.
 *
 * @example
 * ```ts
 * renderMessage(["released ", "c1", "/", "eth0", " (", ["10.0.0.2"], ")"]); // 'released c1/eth0 (["10.0.0.2"])'
 * ```
 */
export function renderMessage(parts: readonly unknown[]): string {
  return parts.map((part, i) => {
    if (i % 2 === 0 || typeof part === "string") return String(part);
    if (part instanceof Error) return part.message;
    try {
      return JSON.stringify(part, (_, v) => typeof v === "bigint" ? v.toString() : v) ??
        String(part);
    } catch {
      return String(part);
    }
  }).join("");
}

/** One JSON line for a record: time, level, the sentence, the logger, the values. */
export function jsonLine(record: LogRecord): string {
  return JSON.stringify({
    "@timestamp": new Date(record.timestamp).toISOString(),
    level: record.level.toUpperCase(),
    message: renderMessage(record.message),
    logger: record.category.join("."),
    properties: record.properties,
  }, (_, v) => typeof v === "bigint" ? v.toString() : v) + "\n";
}

/**
 * One text line for a record, for people reading `kubectl logs`: time, level, logger, the sentence.
 *
 * @example
 * ```ts
 * textLine(record); // "2026-11-25T13:54:46.250Z INFO  ferry.daemon: serving on /run/ferry/ferry.sock …"
 * ```
 */
export function textLine(record: LogRecord): string {
  const level = record.level.toUpperCase().padEnd(5);
  return `${new Date(record.timestamp).toISOString()} ${level} ${record.category.join(".")}: ${
    renderMessage(record.message)
  }\n`;
}

/** How log lines are written. */
export type LogFormat = "json" | "text";

const encoder = new TextEncoder();
let format: (record: LogRecord) => string = jsonLine;
let queued: Uint8Array[] = [];
let pending: Promise<void> = Promise.resolve();
let writing = false;

/**
 * Writes the lines to stderr in order, without holding a lock on the stream (so logging can be
 * configured again, with another level, while the daemon runs). Lines logged while a write is
 * under way go out together in the next one: one write per burst, not one per line.
 */
const stderrSink: Sink = (record) => {
  queued.push(encoder.encode(format(record)));
  if (writing) return;
  writing = true;
  pending = (async () => {
    while (queued.length > 0) {
      const bytes = concatBytes(queued);
      queued = [];
      for (let at = 0; at < bytes.length;) at += await Deno.stderr.write(bytes.subarray(at));
    }
  })().catch(() => {}).finally(() => (writing = false));
};

/**
 * Configures LogTape for the daemon: lines to stderr at `level` and above, JSON (the default) or
 * text. Called again (SIGHUP re-reads the config), it changes level and format in place.
 *
 * @example
 * ```ts
 * await setupLogging("info");
 * getLogger(["ferry", "server"]).info("listening on {socket}", { socket });
 * ```
 */
export async function setupLogging(level: LogLevel, as: LogFormat = "json"): Promise<void> {
  format = as === "text" ? textLine : jsonLine;
  await configure({
    reset: true,
    sinks: { stderr: stderrSink },
    loggers: [
      { category: ["ferry"], lowestLevel: level, sinks: ["stderr"] },
      { category: ["logtape", "meta"], lowestLevel: "warning", sinks: ["stderr"] },
    ],
  });
}

/** Flushes and removes the logging configuration (at shutdown). */
export async function teardownLogging(): Promise<void> {
  await reset();
  await pending;
}
