// The children of one owner end with it: a child still running when its owner closes, or when
// its run's signal aborts (a timeout), is killed and reaped, and its run says why.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { ChildKilledError, ChildSet } from "../../../daemon/runtime/child_set.ts";

/** Runs a shell that writes its pid to a file then becomes `sleep 60`; resolves to the pid. */
async function sleeper(children: ChildSet, signal?: AbortSignal) {
  const dir = await Deno.makeTempDir();
  const run = children.run("sh", ["-c", `echo $$ > ${dir}/pid; exec sleep 60`], { signal });
  let pid = "";
  for (let i = 0; i < 500 && !pid; i++) {
    pid = await Deno.readTextFile(`${dir}/pid`).then((t) => t.trim(), () => "");
    if (!pid) await new Promise((r) => setTimeout(r, 10));
  }
  await Deno.remove(dir, { recursive: true });
  assert(pid, "the sleeping child never wrote its pid");
  return { run, pid };
}

const alive = (pid: string) => Deno.stat(`/proc/${pid}`).then(() => true, () => false);

Deno.test("a child that sleeps is gone after its owner closes, and its run says it was killed", async () => {
  const children = new ChildSet();
  const { run, pid } = await sleeper(children);
  assert(await alive(pid), "the child should run before the owner closes");
  assertEquals(children.size, 1);
  children.close();
  await assertRejects(() => run, ChildKilledError, "owner is closed");
  assertEquals(await alive(pid), false, `process ${pid} still exists after close()`);
  assertEquals(children.size, 0);
  await assertRejects(() => children.run("true", []), ChildKilledError, "owner is closed");
});

Deno.test("a child whose signal aborts (a timeout) is killed, and its run says it timed out", async () => {
  const children = new ChildSet();
  const controller = new AbortController();
  const { run, pid } = await sleeper(children, controller.signal);
  controller.abort(new DOMException("Signal timed out.", "TimeoutError"));
  await assertRejects(() => run, ChildKilledError, "timed out");
  assertEquals(await alive(pid), false, `process ${pid} still exists after its timeout`);
});

Deno.test("a child that ends by itself gives its status, output and input read", async () => {
  const children = new ChildSet();
  const out = await children.run("sh", ["-c", "cat; echo oops >&2; exit 2"], {
    stdin: "hello",
    stdout: true,
  });
  assertEquals(
    [out.success, new TextDecoder().decode(out.stdout), new TextDecoder().decode(out.stderr)],
    [false, "hello", "oops\n"],
  );
  assertEquals(children.size, 0);
});

Deno.test("a child whose stdout is not asked for still gives its status and stderr", async () => {
  const out = await new ChildSet().run("sh", ["-c", "echo ignored; echo said >&2"]);
  assertEquals(
    [out.success, out.stdout.length, new TextDecoder().decode(out.stderr)],
    [true, 0, "said\n"],
  );
});
