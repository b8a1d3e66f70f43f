// The README's configuration table and the config schema say the same: every key of the schema
// has a row, every row names a key of the schema, and a row's default is the default the daemon
// uses (where the README gives it as a literal).
import { assertEquals } from "deno-std/assert/mod.js";
import { DEFAULT_CONFIG } from "../../daemon/config.ts";
import { DaemonConfigSchema } from "../../daemon/config_schema.ts";

const README = new URL("../../README.md", import.meta.url);

interface SchemaNode {
  type?: string;
  properties?: Record<string, SchemaNode>;
}

function leafKeys(node: SchemaNode, prefix = ""): string[] {
  if (node.type !== "object" || !node.properties) return [prefix];
  return Object.entries(node.properties).flatMap(([k, v]) =>
    leafKeys(v, prefix ? `${prefix}.${k}` : k)
  );
}

/** The table's rows: the keys of the first column (`.leaf` continues the previous key's parent), and the default cell. */
async function tableRows(): Promise<{ keys: string[]; defaults: string }[]> {
  const text = await Deno.readTextFile(README);
  const section = text.slice(
    text.indexOf("## Daemon configuration"),
    text.indexOf("\n## ", text.indexOf("## Daemon configuration") + 5),
  );
  const rows: { keys: string[]; defaults: string }[] = [];
  for (const line of section.split("\n")) {
    const m = /^\| ([^|]+) \| ([^|]*) \|/.exec(line);
    if (!m || !m[1].includes("`")) continue;
    const keys: string[] = [];
    for (const [, key] of m[1].matchAll(/`([^`]+)`/g)) {
      if (key.startsWith(".")) {
        const parent = keys[keys.length - 1].split(".").slice(0, -1).join(".");
        keys.push(`${parent}${key}`);
      } else keys.push(key);
    }
    rows.push({ keys, defaults: m[2].trim() });
  }
  return rows;
}

function defaultOf(key: string): unknown {
  return key.split(".").reduce<unknown>(
    (v, k) => (v as Record<string, unknown> | undefined)?.[k],
    DEFAULT_CONFIG,
  );
}

Deno.test("every config key has a README row, and every row is a config key", async () => {
  const schema = leafKeys(DaemonConfigSchema as unknown as SchemaNode).sort();
  const documented = (await tableRows()).flatMap((r) => r.keys).sort();
  assertEquals(documented.filter((k) => !schema.includes(k)), [], "rows naming no config key");
  assertEquals(schema.filter((k) => !documented.includes(k)), [], "config keys without a row");
});

Deno.test("the README's literal defaults are the daemon's defaults", async () => {
  const wrong: string[] = [];
  let checked = 0;
  for (const { keys, defaults } of await tableRows()) {
    const cells = [...defaults.matchAll(/`([^`]*)`/g)].map((m) => m[1]);
    // Only rows whose defaults are all literals, one per key.
    if (cells.length !== keys.length || defaults.replace(/`[^`]*`|,|\s/g, "") !== "") continue;
    keys.forEach((key, i) => {
      const value = defaultOf(key);
      const text = typeof value === "string" ? value : JSON.stringify(value);
      if (text !== cells[i]) wrong.push(`${key}: README ${cells[i]}, daemon ${text}`);
      checked++;
    });
  }
  assertEquals(wrong, []);
  // Most rows give a literal default; a parsing change that skipped them all would prove nothing.
  assertEquals(checked >= 35, true, `only ${checked} defaults checked`);
});
