// The stop watchdog keeps its bound when the daemon's event loop cannot run: a process arms it
// and then blocks its main thread for good (in a synchronous system call, or in JavaScript that
// never yields); the watchdog's own thread ends it at the bound, with its last line and code.
import { assert, assertEquals, assertMatch } from "deno-std/assert/mod.js";

const FIXTURE = new URL("../fixtures/blocked_stop_process.ts", import.meta.url).pathname;

async function runBlocked(mode: string, boundMs: number, format: string) {
  const started = Date.now();
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", "--frozen", FIXTURE, mode, String(boundMs), format],
    stdout: "null",
    stderr: "piped",
  }).spawn();
  // A process the watchdog failed to end is ended here, so that the test fails and says so
  // instead of hanging.
  const backstop = setTimeout(() => child.kill("SIGKILL"), 30_000);
  const out = await child.output();
  clearTimeout(backstop);
  return {
    code: out.code,
    signal: out.signal,
    took: Date.now() - started,
    log: new TextDecoder().decode(out.stderr),
  };
}

for (const mode of ["sync", "spin"]) {
  Deno.test(`the stop watchdog ends a process whose main thread is blocked (${mode}) with its last line and code`, async () => {
    const run = await runBlocked(mode, 1500, "json");
    assertEquals(
      [run.code, run.signal],
      [1, null],
      `exit code (a SIGKILL from the test means the watchdog never fired):\n${run.log}`,
    );
    assertMatch(run.log, /blocking/, "the main thread reached its blocking call");
    const line = run.log.split("\n").find((l) => l.includes("stop did not finish"));
    assert(line, `no watchdog line in:\n${run.log}`);
    const parsed = JSON.parse(line!);
    assertEquals(
      [parsed.level, parsed.logger, parsed.message],
      [
        "ERROR",
        "ferry.daemon",
        "stop did not finish within 1 s; exiting with 3 connection(s) still being served",
      ],
      "the line is the daemon's, in its format, with the last verdict it was told",
    );
  });
}

Deno.test("the stop watchdog writes its line in the text format when the daemon logs text", async () => {
  const run = await runBlocked("sync", 1000, "text");
  assertEquals(run.code, 1, run.log);
  assertMatch(
    run.log,
    /^\S+Z ERROR ferry\.daemon: stop did not finish within 1 s; exiting with 3 connection\(s\)/m,
  );
});

Deno.test("a process that exits before the bound is not held up by its watchdog", async () => {
  const run = await runBlocked("exit", 60_000, "json");
  assertEquals(run.code, 0, run.log);
  assert(run.took < 30_000, `took ${run.took} ms`);
  assert(!run.log.includes("stop did not finish"), run.log);
});

Deno.test("the stop watchdog ends a process blocked writing to a stderr pipe nobody reads", async () => {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", "--frozen", FIXTURE, "stderr", "1000", "json"],
    stdout: "null",
    stderr: "piped",
  }).spawn();
  // Its stderr is read only once it has exited: the pipe stays full meanwhile.
  const backstop = setTimeout(() => child.kill("SIGKILL"), 30_000);
  const status = await child.status;
  clearTimeout(backstop);
  await child.stderr.cancel();
  assertEquals(
    [status.code, status.signal],
    [1, null],
    "exit code (a SIGKILL from the test means the watchdog never ended it)",
  );
});
