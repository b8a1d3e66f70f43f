// Feeding a child its stdin: a child that exits without reading it is judged by its exit status
// and output, not by the broken pipe.
import { assertEquals } from "deno-std/assert/mod.js";
import { feedStdin } from "../../../daemon/runtime/child_input.ts";

/** `cmd args…` with every stream piped. */
const piped = (cmd: string, ...args: string[]) =>
  new Deno.Command(cmd, { args, stdin: "piped", stdout: "piped", stderr: "piped" }).spawn();

// Larger than a pipe holds: the write is still under way when the child closes its stdin.
const BIG = "x".repeat(1024 * 1024);

Deno.test("a child that exits without reading its input keeps its exit status and output", async () => {
  const child = piped("sh", "-c", "exec 0<&-; echo refused >&2; exit 3");
  await feedStdin(child, BIG);
  const out = await child.output();
  assertEquals([out.code, new TextDecoder().decode(out.stderr)], [3, "refused\n"]);
});

Deno.test("a child that reads its input gets all of it", async () => {
  const child = piped("wc", "-c");
  await feedStdin(child, BIG);
  const out = await child.output();
  assertEquals(new TextDecoder().decode(out.stdout).trim(), String(BIG.length));
});
