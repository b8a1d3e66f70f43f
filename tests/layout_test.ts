// The layout stays true: every import of every module under daemon/, cni/, lib/, bench/ and cli/
// points to a part at or below its own in the order declared here (the same order as the layout
// section of docs/architecture.md), and no modules import each other in a circle.
import { assert, assertEquals } from "deno-std/assert/mod.js";

const ROOT = new URL("../", import.meta.url);

/** The folders whose modules are checked. */
export const CHECKED = ["daemon", "cni", "lib", "bench", "cli"];

/** One part of the project: its name and the paths (folders end in `/`) whose modules it holds. */
export interface Part {
  name: string;
  paths: readonly string[];
}

/**
 * The parts of the project, from the bottom up: a module may import modules of its own part and
 * of the parts before it, never of a part after it. A module belongs to the part with the longest
 * path that is a prefix of its own. The daemon's folders are in the order the layout section of
 * `docs/architecture.md` lists them. Three modules are parts of their own, low down, because every
 * level uses them and they import nothing of the daemon: address arithmetic and libc; the
 * validators' generator reads every schema, so it sits above the daemon.
 */
export const ORDER: readonly Part[] = [
  { name: "lib", paths: ["lib/"] },
  { name: "address arithmetic", paths: ["daemon/ipam/cidr.ts"] },
  { name: "libc through FFI", paths: ["daemon/net/netlink/libc.ts"] },
  { name: "telemetry", paths: ["daemon/telemetry/"] },
  { name: "runtime", paths: ["daemon/runtime/"] },
  { name: "config", paths: ["daemon/config/"] },
  { name: "net", paths: ["daemon/net/"] },
  { name: "records", paths: ["daemon/records/"] },
  { name: "k8s", paths: ["daemon/k8s/"] },
  { name: "ipam", paths: ["daemon/ipam/"] },
  { name: "cluster", paths: ["daemon/cluster/"] },
  { name: "portsec", paths: ["daemon/portsec/"] },
  { name: "drivers", paths: ["daemon/drivers/"] },
  { name: "multivif", paths: ["daemon/multivif/"] },
  { name: "policy", paths: ["daemon/policy/"] },
  { name: "gc", paths: ["daemon/gc/"] },
  { name: "service", paths: ["daemon/service/"] },
  { name: "server", paths: ["daemon/server/"] },
  { name: "install", paths: ["daemon/install/"] },
  { name: "the running daemon", paths: ["daemon/daemon.ts"] },
  { name: "the composition root", paths: ["daemon/wiring/"] },
  { name: "tools", paths: ["daemon/tools/"] },
  {
    name: "the validators' generator",
    paths: ["lib/gen_validators.ts", "lib/validator_source.ts"],
  },
  { name: "cni", paths: ["cni/"] },
  { name: "cli", paths: ["cli/"] },
  { name: "development and benchmarks", paths: ["daemon/dev/", "bench/"] },
];

/** The daemon's folders in the order of {@link ORDER}. */
export const DAEMON_FOLDERS: readonly string[] = ORDER.flatMap((p) => p.paths).filter((p) =>
  /^daemon\/[a-z0-9_]+\/$/.test(p)
);

/** The part a module (path relative to the root) belongs to, or undefined when it is in none. */
export function partOf(path: string): Part | undefined {
  let best: { part: Part; length: number } | undefined;
  for (const part of ORDER) {
    for (const p of part.paths) {
      const match = path === p || (p.endsWith("/") && path.startsWith(p));
      if (match && (!best || p.length > best.length)) best = { part, length: p.length };
    }
  }
  return best?.part;
}

/** Every module specifier a TypeScript source imports or re-exports, static or dynamic. */
export function importsOf(source: string): string[] {
  const code = source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
  const out: string[] = [];
  const patterns = [
    /(?:^|[;\s])(?:import|export)\s+(?:type\s+)?[^;"'`]*?\sfrom\s*["']([^"']+)["']/g,
    /(?:^|[;\s])import\s*["']([^"']+)["']/g,
    /\bimport\s*\(\s*["']([^"']+)["']\s*\)/g,
  ];
  for (const re of patterns) for (const m of code.matchAll(re)) out.push(m[1]);
  return out;
}

/** The relative path a specifier of `from` names, or undefined for a package or URL import. */
export function resolve(from: string, specifier: string): string | undefined {
  if (!specifier.startsWith("./") && !specifier.startsWith("../")) return undefined;
  const parts = from.split("/").slice(0, -1);
  for (const s of specifier.split("/")) {
    if (s === "..") parts.pop();
    else if (s !== ".") parts.push(s);
  }
  return parts.join("/");
}

/** One import: the importing module, the module it names and the specifier as written. */
export interface Edge {
  from: string;
  to: string;
  specifier: string;
}

/** Every .ts module under the checked folders (generated files aside), relative to the root. */
async function modules(): Promise<string[]> {
  const out: string[] = [];
  async function walk(dir: string): Promise<void> {
    for await (const e of Deno.readDir(new URL(dir, ROOT))) {
      const path = `${dir}${e.name}`;
      if (e.isDirectory && e.name !== "_generated" && e.name !== "results") await walk(`${path}/`);
      else if (e.isFile && e.name.endsWith(".ts")) out.push(path);
    }
  }
  for (const d of CHECKED) await walk(`${d}/`);
  return out.sort();
}

/** Every relative import of the given modules. */
export async function edgesOf(paths: string[]): Promise<Edge[]> {
  const edges: Edge[] = [];
  for (const from of paths) {
    for (const specifier of importsOf(await Deno.readTextFile(new URL(from, ROOT)))) {
      const to = resolve(from, specifier);
      if (to !== undefined) edges.push({ from, to, specifier });
    }
  }
  return edges;
}

/** The imports that point from a part to a part above it, as readable lines. */
export function upward(edges: Edge[]): string[] {
  const out: string[] = [];
  for (const e of edges) {
    const a = partOf(e.from), b = partOf(e.to);
    if (a === undefined || b === undefined) continue;
    if (ORDER.indexOf(b) > ORDER.indexOf(a)) {
      out.push(`${e.from} (${a.name}) imports "${e.specifier}" (${b.name}), which is above it`);
    }
  }
  return out;
}

/** The circles among modules (strongly connected components of two or more, or a self-import). */
export function circles(edges: Edge[]): string[][] {
  const next = new Map<string, Set<string>>();
  for (const e of edges) {
    if (!next.has(e.from)) next.set(e.from, new Set());
    next.get(e.from)!.add(e.to);
  }
  // Tarjan's algorithm, iterative enough for this tree's depth.
  let index = 0;
  const idx = new Map<string, number>(), low = new Map<string, number>();
  const stack: string[] = [], onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || next.get(v)?.has(v)) out.push(scc.sort());
    }
  };
  for (const v of [...next.keys()].sort()) if (!idx.has(v)) visit(v);
  return out;
}

Deno.test("every checked module belongs to a declared part", async () => {
  const orphans = (await modules()).filter((p) => partOf(p) === undefined);
  assertEquals(orphans, [], `modules in no part of ORDER: ${orphans.join(", ")}`);
});

Deno.test("no import points from a lower part of the project to a higher one", async () => {
  const bad = upward(await edgesOf(await modules()));
  assertEquals(bad.length, 0, `upward imports:\n${bad.join("\n")}`);
});

/**
 * The imports of the daemon's config by modules of the folders below the composition root (the
 * builders of `daemon/wiring/` choose from the config; the folders take parameters), as readable
 * lines.
 */
export function configReaders(edges: Edge[]): string[] {
  const root = ORDER.findIndex((p) => p.name === "the composition root");
  return edges.filter((e) => {
    const part = partOf(e.from);
    return part !== undefined && part.name !== "config" && ORDER.indexOf(part) < root &&
      part.paths.some((p) => DAEMON_FOLDERS.includes(p)) && e.to.startsWith("daemon/config/");
  }).map((e) => `${e.from} imports "${e.specifier}"`);
}

Deno.test("the daemon's folders below the composition root import nothing of its config", async () => {
  const bad = configReaders(await edgesOf(await modules()));
  assertEquals(bad, [], `config read below the composition root:\n${bad.join("\n")}`);
});

Deno.test("no modules import each other in a circle, benchmarks included", async () => {
  const found = circles(await edgesOf(await modules()));
  assertEquals(
    found.length,
    0,
    `import circles:\n${found.map((c) => c.join(" ↔ ")).join("\n")}`,
  );
});

Deno.test("the checker sees an upward import and a circle when there is one", () => {
  const edges: Edge[] = [
    { from: "daemon/records/a.ts", to: "daemon/service/b.ts", specifier: "../service/b.ts" },
    { from: "daemon/service/b.ts", to: "daemon/records/a.ts", specifier: "../records/a.ts" },
  ];
  const up = upward(edges);
  assertEquals(up.length, 1);
  assert(up[0].includes("daemon/records/a.ts") && up[0].includes("../service/b.ts"), up[0]);
  assertEquals(circles(edges), [["daemon/records/a.ts", "daemon/service/b.ts"]]);
  assertEquals(partOf("daemon/wiring/kube_side.ts")?.name, "the composition root");
  assertEquals(
    configReaders([
      { from: "daemon/net/a.ts", to: "daemon/config/config.ts", specifier: "../config/config.ts" },
      {
        from: "daemon/wiring/b.ts",
        to: "daemon/config/config.ts",
        specifier: "../config/config.ts",
      },
    ]),
    ['daemon/net/a.ts imports "../config/config.ts"'],
  );
  assertEquals(partOf("daemon/ipam/local_pool.ts")?.name, "ipam");
  assertEquals(partOf("daemon/ipam/cidr.ts")?.name, "address arithmetic");
  assertEquals(
    importsOf(
      `import type { A } from "./a.ts";\nexport { b } from "../b.ts";\nawait import("./c.ts");`,
    ),
    ["./a.ts", "../b.ts", "./c.ts"],
  );
});

Deno.test("docs/architecture.md's layout section lists the daemon's folders in the declared order", async () => {
  const text = await Deno.readTextFile(new URL("docs/architecture.md", ROOT));
  const section = text.slice(text.indexOf("## Layout"));
  const block = section.slice(
    section.indexOf("```"),
    section.indexOf("```", section.indexOf("```") + 3),
  );
  const listed = [...block.matchAll(/^ {2}([a-z0-9_]+\/)/gm)].map((m) => `daemon/${m[1]}`);
  assertEquals(listed, DAEMON_FOLDERS, "the folders under daemon/ in the layout section, in order");
});
