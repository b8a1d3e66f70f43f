/**
 * Logging setup: LogTape, JSON lines on stderr, one category per module under `ferry`.
 *
 * @module
 */
import {
  configure,
  getJsonLinesFormatter,
  getStreamSink,
  type LogLevel,
  reset,
} from "@logtape/logtape";

/**
 * Configures LogTape for the daemon: JSON lines to stderr at `level` and above.
 *
 * @example
 * ```ts
 * await setupLogging("info");
 * getLogger(["ferry", "server"]).info("listening on {socket}", { socket });
 * ```
 */
export async function setupLogging(level: LogLevel): Promise<void> {
  await configure({
    reset: true,
    sinks: { stderr: getStreamSink(Deno.stderr.writable, { formatter: getJsonLinesFormatter() }) },
    loggers: [
      { category: ["ferry"], lowestLevel: level, sinks: ["stderr"] },
      { category: ["logtape", "meta"], lowestLevel: "warning", sinks: ["stderr"] },
    ],
  });
}

/** Flushes and removes the logging configuration (at shutdown). */
export async function teardownLogging(): Promise<void> {
  await reset();
}
