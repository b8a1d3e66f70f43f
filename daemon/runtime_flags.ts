/**
 * How the daemon's Deno is started, in one place: the image's entrypoint, `deno task daemon` and
 * the daemon processes of the tests and benchmarks use these flags (a test keeps the Dockerfile
 * and deno.json equal to them).
 *
 * `--max-semi-space-size=1` caps V8's young generation at 1 MB per semi-space (the default grows
 * to 16 MB or more): the daemon's garbage is small and short-lived (requests, watch events), so
 * scavenges stay cheap, and the resident set measured by `deno task bench` drops by 10–20 MB,
 * with less CPU per ADD, not more.
 *
 * @module
 */

/** V8 flags of the daemon. */
export const DAEMON_V8_FLAGS = ["--max-semi-space-size=1"];

/** `deno run` flags of the daemon (before the module). */
export const DAEMON_RUN_FLAGS = [
  "--allow-all",
  "--frozen",
  `--v8-flags=${DAEMON_V8_FLAGS.join(",")}`,
];
