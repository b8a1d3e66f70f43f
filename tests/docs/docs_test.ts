// The docs hold only what is true of the code: the generated pages are what `deno task docs`
// renders now, every relative link reaches a file (and a heading, when it names one), every task a
// page names exists, and every daemon config shown in a JSON block uses keys the daemon has.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { configKeys, generatedPages } from "../../daemon/dev/docs.ts";

const ROOT = new URL("../../", import.meta.url);

/** README.md and every page of docs/, as path → text. */
async function pages(): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  out.set("README.md", await Deno.readTextFile(new URL("README.md", ROOT)));
  for await (const e of Deno.readDir(new URL("docs/", ROOT))) {
    if (e.isFile && e.name.endsWith(".md")) {
      out.set(`docs/${e.name}`, await Deno.readTextFile(new URL(`docs/${e.name}`, ROOT)));
    }
  }
  return out;
}

/** A page's text without its code: fenced blocks and inline spans. */
function prose(text: string): string {
  return text.replace(/^```[^\n]*\n[\s\S]*?^```$/gm, "").replace(/`[^`\n]*`/g, "``");
}

/** The fenced code blocks of a page: info string and body. */
function codeBlocks(text: string): { info: string; body: string }[] {
  return [...text.matchAll(/^```([^\n]*)\n([\s\S]*?)^```$/gm)].map((m) => ({
    info: m[1].trim(),
    body: m[2],
  }));
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading.trim().toLowerCase().replace(/[`*_]/g, "").replace(/[^\p{L}\p{N}\s-]/gu, "")
    .replace(/\s/g, "-");
}

function anchors(text: string): Set<string> {
  const withoutBlocks = text.replace(/^```[^\n]*\n[\s\S]*?^```$/gm, "");
  return new Set([...withoutBlocks.matchAll(/^#{1,6} (.+)$/gm)].map((m) => slug(m[1])));
}

Deno.test("the generated pages are what `deno task docs` renders from the code now", async () => {
  for (const [path, text] of await generatedPages(ROOT)) {
    const committed = await Deno.readTextFile(new URL(path, ROOT)).catch(() => "");
    assertEquals(committed, text, `${path} is stale: run \`deno task docs\``);
  }
});

Deno.test("every config key has a meaning in the schema, so the configuration page explains it", () => {
  const silent = configKeys().filter((k) => !k.meaning).map((k) => k.key);
  assertEquals(silent, [], "keys without a description in daemon/config/schema.ts");
});

Deno.test("every relative link of the README and the docs reaches a file and its heading", async () => {
  const all = await pages();
  const broken: string[] = [];
  for (const [path, text] of all) {
    const dir = new URL(path.includes("/") ? path.slice(0, path.lastIndexOf("/") + 1) : "", ROOT);
    for (const [, target] of prose(text).matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target)) continue; // http:, https:, mailto:
      const [file, anchor] = target.split("#");
      const url = file ? new URL(file, dir) : new URL(path, ROOT);
      const found = await Deno.stat(url).then(() => true, () => false);
      if (!found) {
        broken.push(`${path}: ${target} (no such file)`);
        continue;
      }
      if (anchor && url.pathname.endsWith(".md")) {
        const rel = url.pathname.slice(ROOT.pathname.length);
        const targetText = all.get(rel) ?? await Deno.readTextFile(url);
        if (!anchors(targetText).has(anchor)) broken.push(`${path}: ${target} (no such heading)`);
      }
    }
  }
  assertEquals(broken, []);
});

Deno.test("every task the README and the docs name exists in deno.json", async () => {
  const tasks = Object.keys(
    (JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT))) as {
      tasks: Record<string, unknown>;
    }).tasks,
  );
  const unknown: string[] = [];
  for (const [path, text] of await pages()) {
    for (const [, name] of text.matchAll(/deno(?:@[\d.]+)? task ([a-z][a-z0-9:-]*)/g)) {
      if (!tasks.includes(name)) unknown.push(`${path}: deno task ${name}`);
    }
  }
  assertEquals(unknown, []);
});

Deno.test("every daemon config shown in a JSON block of the docs uses keys the daemon has", async () => {
  const keys = new Set(configKeys().map((k) => k.key));
  const sections = new Set([...keys].map((k) => k.split(".")[0]));
  const unknown: string[] = [];
  let checked = 0;
  for (const [path, text] of await pages()) {
    for (const block of codeBlocks(text)) {
      if (block.info !== "json") continue;
      let obj: unknown;
      try {
        obj = JSON.parse(block.body);
      } catch {
        continue;
      }
      if (!obj || typeof obj !== "object" || Array.isArray(obj)) continue;
      const top = Object.keys(obj);
      // A CNI network config (it has cniVersion or type) is not the daemon's.
      if ("cniVersion" in obj || "type" in obj || !top.some((k) => sections.has(k))) continue;
      checked++;
      const walk = (o: Record<string, unknown>, prefix: string) => {
        for (const [k, v] of Object.entries(o)) {
          const key = prefix ? `${prefix}.${k}` : k;
          if (keys.has(key)) continue;
          if (v && typeof v === "object" && !Array.isArray(v) && sections.has(key.split(".")[0])) {
            walk(v as Record<string, unknown>, key);
          } else unknown.push(`${path}: ${key}`);
        }
      };
      walk(obj as Record<string, unknown>, "");
    }
  }
  assertEquals(unknown, []);
  assert(checked > 0, "the docs show at least one daemon config");
});

Deno.test("the README stays a front page: at most 200 lines, nothing dated on it", async () => {
  const readme = await Deno.readTextFile(new URL("README.md", ROOT));
  assert(readme.split("\n").length <= 200, `README.md has ${readme.split("\n").length} lines`);
  assertEquals(readme.match(/\b20\d\d-\d\d-\d\d\b|\b1[0-2]-[0-3]\d\b/g) ?? [], []);
});
