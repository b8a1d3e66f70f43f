// `deno task setup` installs every external program the suite and the benchmarks start, so that
// `deno task test` passes on a fresh machine: the programs are read from the source of tests/
// (less tests/node/ and tests/cluster/, the real-server suites `deno task test` leaves out),
// bench/, daemon/dev/ and every module they import or run (the daemon itself starts ip, nsenter,
// nft), and each must be one setup checks for, or one of the few below that every Debian machine
// with Node has.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { NEEDS, providedPrograms } from "../../../daemon/dev/setup.ts";
import {
  findHelpers,
  programsIn,
  shellPrograms,
  type Source,
  unresolvedSpawns,
} from "./_programs.ts";

const ROOT = new URL("../../../", import.meta.url).pathname;

/**
 * Programs setup need not install: those of Debian's Essential packages (coreutils, dash, bash,
 * sed, tar, grep, util-linux's own), apt-get (every Debian has it: it is how setup installs),
 * and Deno itself (the tests run under it).
 */
const ALWAYS_PRESENT = new Set([
  "sh", // dash (Essential)
  "bash", // bash (Essential)
  "cat", // coreutils (Essential), as are the rest of this line
  "sleep",
  "true",
  "mkfifo",
  "wc",
  "yes",
  "seq",
  "rm",
  "cp",
  "du",
  "touch",
  "nohup",
  "sed", // sed (Essential)
  "grep", // grep (Essential)
  "tar", // tar (Essential)
  "apt-get", // apt (how setup installs anything)
  "deno", // the tests' own runtime
]);

/**
 * Programs a test or benchmark uses only when present, skipping (and saying so) without them: the
 * real-server tools are built by their own scripts (development.md), never by setup.
 */
const OPTIONAL = new Set([
  "gdb", // main_process_test's stopped-daemon case is ignored without /usr/bin/gdb
  "kubectl", // kube_daemon_test's kubectl case runs only against the real server (test:real)
  "/opt/realk8s/start.sh", // the real kube-apiserver of test:real
  "/opt/realk8s/stop.sh",
  "/opt/cnitest/whereabouts/bin/whereabouts", // bench:multinet's reference whereabouts, when built
]);

/**
 * Each `Deno.Command` whose program the scan cannot read, and what it starts: deno itself, the
 * shim it installed, a CNI plugin from CNI_PATH (containernetworking-plugins, in setup), the
 * libcni driver built with go (in setup), gdb (optional).
 */
const UNRESOLVED_KNOWN = new Map<string, string>([
  ["Deno.Command(Deno.execPath(", "deno"],
  ["Deno.Command(command,{args", "deno, behind an optional prefix such as setpriv"],
  ["Deno.Command(GDB!,{", "gdb"],
  ["Deno.Command(driver,{args", "the libcni driver built by daemon/dev/libcni.ts"],
  ["Deno.Command(cmd[0]", "the shim's command line: deno"],
  ["Deno.Command(binary,{env", "a CNI plugin from CNI_PATH"],
  ["Deno.Command(this.#options.", "kubectl (the CLI, tested with a fake)"],
  ["Deno.Command(shim,{env", "the shim cni/install.ts wrote: deno"],
  ["Deno.Command(shim,{clearEnv", "the shim cni/install.ts wrote: deno"],
  ["Deno.Command(path,{args", "the kubectl plugin cli/install.ts wrote: deno"],
]);

/** Local modules a source names: imports, re-exports, dynamic imports and `new URL(…)` paths. */
function localImports(path: string, text: string): string[] {
  const out: string[] = [];
  const names = /(?:from\s*|import\s*\(?\s*|new URL\(\s*)"(\.{1,2}\/[^"]+\.ts)"/g;
  for (const m of text.matchAll(names)) out.push(new URL(m[1], `file://${path}`).pathname);
  return out;
}

async function tsFilesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(dir)) {
    const p = `${dir}/${e.name}`;
    if (e.isDirectory) out.push(...await tsFilesUnder(p));
    else if (e.name.endsWith(".ts")) out.push(p);
  }
  return out;
}

/** Every source the suite and the benchmarks run: the roots and what they import, transitively. */
async function suiteSources(): Promise<{ sources: Source[]; imports: Map<string, string[]> }> {
  const roots = [
    ...(await tsFilesUnder(`${ROOT}tests`)).filter((p) =>
      !p.startsWith(`${ROOT}tests/node/`) && !p.startsWith(`${ROOT}tests/cluster/`)
    ),
    ...await tsFilesUnder(`${ROOT}bench`),
    ...await tsFilesUnder(`${ROOT}daemon/dev`),
  ];
  const imports = new Map<string, string[]>(), sources: Source[] = [];
  const queue = [...roots];
  while (queue.length > 0) {
    const path = queue.pop()!;
    if (imports.has(path)) continue;
    const text = await Deno.readTextFile(path).catch(() => undefined);
    if (text === undefined) continue;
    const named = localImports(path, text);
    imports.set(path, named);
    sources.push({ path, text });
    queue.push(...named);
  }
  return { sources, imports };
}

/** Where each program is started: program → the files (relative to the checkout). */
async function startedPrograms(): Promise<Map<string, Set<string>>> {
  const { sources, imports } = await suiteSources();
  const helpers = findHelpers(sources);
  const where = new Map<string, Set<string>>();
  for (const s of sources) {
    for (const p of programsIn(s, helpers, imports.get(s.path) ?? [])) {
      where.set(p, (where.get(p) ?? new Set()).add(s.path.slice(ROOT.length)));
    }
  }
  return where;
}

Deno.test("setup installs every program the tests and benchmarks start", async () => {
  const where = await startedPrograms();
  const provided = providedPrograms(NEEDS);
  const covered = (p: string): boolean =>
    provided.has(p) || ALWAYS_PRESENT.has(p) || OPTIONAL.has(p) ||
    (p.startsWith("/") && (NEEDS.some((n) => n.path === p) ||
      covered(p.slice(p.lastIndexOf("/") + 1))));
  const missing = [...where].filter(([p]) => !covered(p)).map(([p, files]) =>
    `${p} (started by ${[...files].slice(0, 3).join(", ")}${files.size > 3 ? ", …" : ""})`
  );
  assertEquals(missing, [], `deno task setup does not install: ${missing.join("; ")}`);
  // The scan is not vacuous: it finds the programs the suite is known to start.
  for (const p of ["ip", "nft", "nsenter", "ping", "python3", "nc", "curl", "iperf3"]) {
    assert(where.has(p), `the scan did not find ${p}: it misreads the sources`);
  }
});

Deno.test("every program a test starts by a variable is accounted for", async () => {
  const { sources } = await suiteSources();
  const unknown = sources.flatMap((s) =>
    unresolvedSpawns(s.text).filter((u) => !UNRESOLVED_KNOWN.has(u)).map((u) =>
      `${s.path.slice(ROOT.length)}: ${u}`
    )
  );
  assertEquals(unknown, [], "spawns whose program the scan cannot read: name them above");
});

Deno.test("the scan reads programs from commands, helpers, namespaces and shell scripts", () => {
  const lib: Source = {
    path: "/x/lib.ts",
    text: `export async function run(cmd: string, ...args: string[]) {
      return await new Deno.Command(cmd, { args }).output();
    }
    export const sh = (argv: string[]) => new Deno.Command(argv[0], { args: argv.slice(1) });
    export function inNs(ns: string, argv: string[]) { return sh(["ip", "netns", "exec", ns, ...argv]); }`,
  };
  const user: Source = {
    path: "/x/user.ts",
    text: `import { run, sh, inNs } from "./lib.ts";
    // run("commented") is not a call
    await new Deno.Command("alpha", { args: [] }).output();
    await run("beta", "-x");
    await sh(["gamma", "-y"]);
    await inNs(pod.ns.name, ["delta"]);
    await new Deno.Command("ip", { args: ["netns", "exec", p.ns.name, "epsilon", "-z"] });
    await run("ip", "netns", "exec", \`\${ns}\`, "sh", "-c", \`x=1; zeta -a | eta \${y} && exec theta\`);
    const script = ["iota --a", \`for i in $(seq 3); do kappa; done\`].join("\\n");
    const argv = ["sh", "-c", script];
    const [cmd, args] = wide ? ["lambda", ["--", "x"]] : ["ip", []];
    const nft = options.mu ?? "mu";
    await Deno.writeTextFile(f, "#!/bin/sh\\nnu >/dev/null\\n");`,
  };
  const other: Source = { path: "/x/other.ts", text: `await locks.run("not-a-program", f);` };
  const helpers = findHelpers([lib, user, other]);
  const found = new Set(programsIn(user, helpers, ["/x/lib.ts"]));
  const want = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "seq",
    "kappa",
    "lambda",
    "mu",
    "nu",
  ];
  for (const p of want) assert(found.has(p), `${p} not found in ${[...found].join(" ")}`);
  assert(!found.has("commented"), "a comment is not code");
  assertEquals(programsIn(other, helpers, []), [], "a helper counts only where it is imported");
  assertEquals(shellPrograms("if [ -n x ]; then echo y; fi"), [], "keywords and builtins");
});
