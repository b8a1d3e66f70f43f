/**
 * How the daemon's Deno is started, in one place: the image's entrypoint, `deno task daemon` and
 * the daemon processes of the tests and benchmarks use these flags (a test keeps the Dockerfile
 * and deno.json equal to them).
 *
 * `--max-semi-space-size=1` caps V8's young generation at 1 MB per semi-space (the default grows
 * to 16 MB or more): the daemon's garbage is small and short-lived (requests, watch events), so
 * scavenges stay cheap. `--optimize-for-size` makes V8 grow its heap less eagerly and keep it
 * compact. Measured (`deno task bench`, a churn of ADD/DEL pairs 25 at a time): resident memory
 * 122 → 89 MB after 1,500 pairs, and no more CPU per ADD.
 *
 * `--no-code-cache`: V8's code cache is a SQLite database in `DENO_DIR` that Deno maps into the
 * process (2.3 MB of it resident in the daemon) and that a start which misses writes to; the
 * image's container starts with a fresh writable layer, so every daemon start there missed
 * anyway. Measured (the daemon as a process of its own, 250 pods plugged on its socket, runs
 * alternating): resident memory at start 62.6 → 58.5 MB, with 250 pods 77–81 → 72–74 MB; the
 * time to ready and the CPU to get there unchanged within the noise (320–460 ms either way).
 *
 * @module
 */

/** V8 flags of the daemon. */
export const DAEMON_V8_FLAGS = ["--max-semi-space-size=1", "--optimize-for-size"];

/** `deno run` flags of the daemon (before the module). */
export const DAEMON_RUN_FLAGS = [
  "--allow-all",
  "--frozen",
  "--no-code-cache",
  `--v8-flags=${DAEMON_V8_FLAGS.join(",")}`,
];
