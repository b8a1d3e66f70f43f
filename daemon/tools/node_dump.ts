/**
 * What `kubectl ferry sysdump` collects on a node, run inside the node's Ferry pod with
 * `kubectl exec`: `deno run --allow-all --frozen daemon/tools/node_dump.ts [--config=FILE]` prints
 * one JSON object, {@link NodeDump}: files by name (the daemon's `/v1/stats`, its config with
 * anything secret-looking redacted, the nft tables Ferry owns, the links, addresses, neighbour and
 * FDB entries of Ferry's devices, the node's routes, the attachment records and the address
 * allocations, each redacted by key as `redact.ts` says: a record's NAD config may hold a
 * plugin's credentials) and, for each part that could not be read, why. It never fails as a whole: a part
 * that cannot be read is named in `failed`.
 *
 * @module
 */
import { type DaemonConfig, resolveConfig } from "../config/config.ts";
import { NODE_CONFIG_FILE, readNodeReport } from "./node_report.ts";
import { redact, redactText } from "./redact.ts";

/** One node's collection. */
export interface NodeDump {
  /** File name (relative, `/`-separated) → content. */
  files: Record<string, string>;
  /** File name → why it could not be collected. */
  failed: Record<string, string>;
}

/** Runs a command on the node: its exit status and output. */
export type NodeRun = (argv: string[]) => Promise<{ code: number; stdout: string; stderr: string }>;

/** The commands whose output is collected, by file name, for the node's config. */
export function nodeCommands(config: DaemonConfig): Record<string, string[]> {
  const bridge = config.network.bridge;
  const vxlan = config.routing.mode === "vxlan" ? config.routing.vxlan.device : undefined;
  const devices = [bridge, ...(vxlan ? [vxlan] : [])];
  return {
    [`nft-${config.masquerade.table}.txt`]: [
      "nft",
      "list",
      "table",
      "inet",
      config.masquerade.table,
    ],
    [`nft-${config.policy.table}.txt`]: ["nft", "list", "table", "inet", config.policy.table],
    "links.txt": [
      "sh",
      "-c",
      [
        ...devices.map((d) => `ip -d link show dev ${d}`),
        `ip -d link show master ${bridge}`,
      ].join("; "),
    ],
    "addresses.txt": ["sh", "-c", devices.map((d) => `ip addr show dev ${d}`).join("; ")],
    "routes.txt": ["sh", "-c", "ip -4 route show table all; ip -6 route show table all"],
    "neighbours.txt": ["sh", "-c", devices.map((d) => `ip neigh show dev ${d}`).join("; ")],
    "fdb.txt": [
      "sh",
      "-c",
      [
        `bridge fdb show br ${bridge}`,
        ...(vxlan ? [`bridge fdb show dev ${vxlan}`] : []),
      ].join("; "),
    ],
  };
}

/** The files below `dir`, each redacted by key (a record holds its NAD's config, credentials too). */
async function readTree(dir: string, under: string, into: Record<string, string>): Promise<void> {
  for await (const e of Deno.readDir(dir)) {
    if (e.isDirectory) await readTree(`${dir}/${e.name}`, `${under}/${e.name}`, into);
    else if (e.isFile) {
      into[`${under}/${e.name}`] = redactText(await Deno.readTextFile(`${dir}/${e.name}`));
    }
  }
}

/**
 * Collects the node's parts; `configText` is the daemon's config file, `run` runs commands.
 *
 * @example
 * ```ts
 * const dump = await collectNodeDump(await Deno.readTextFile("/etc/ferry/config.json"), run);
 * ```
 */
export async function collectNodeDump(
  configText: string | undefined,
  run: NodeRun,
): Promise<NodeDump> {
  const dump: NodeDump = { files: {}, failed: {} };
  const part = async (name: string, read: () => Promise<void>) => {
    try {
      await read();
    } catch (e) {
      dump.failed[name] = e instanceof Error ? e.message : String(e);
    }
  };
  let file: unknown;
  await part("config.json", () => {
    if (configText === undefined) throw new Error("the config file cannot be read");
    file = JSON.parse(configText);
    dump.files["config.json"] = JSON.stringify(redact(file), null, 2) + "\n";
    return Promise.resolve();
  });
  let config: DaemonConfig;
  try {
    config = resolveConfig(file, { nodeName: "node" });
  } catch (e) {
    dump.failed["config (resolved)"] = e instanceof Error ? e.message : String(e);
    config = resolveConfig(undefined, { nodeName: "node" });
  }
  await part("stats.json", async () => {
    const report = await readNodeReport(config, AbortSignal.timeout(10_000));
    dump.files["stats.json"] = JSON.stringify(report.stats, null, 2) + "\n";
  });
  for (const [name, argv] of Object.entries(nodeCommands(config))) {
    await part(name, async () => {
      const r = await run(argv);
      // A command that ran is collected whatever it answered (a missing table is a finding).
      if (r.code === 127) throw new Error(`${argv[0]}: ${r.stderr.trim()}`);
      dump.files[name] = `# ${argv.join(" ")}\n${r.stdout}` +
        (r.code ? `# exit status ${r.code}\n` : "") + (r.stderr ? `# stderr:\n${r.stderr}` : "");
    });
  }
  await part(
    "attachments/",
    () => readTree(`${config.stateDir}/attachments`, "attachments", dump.files),
  );
  await part("ipam/", () => readTree(`${config.stateDir}/ipam`, "ipam", dump.files));
  return dump;
}

/** Runs a command with `Deno.Command`. */
export const runCommand: NodeRun = async (argv) => {
  try {
    const out = await new Deno.Command(argv[0], {
      args: argv.slice(1),
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = (b: Uint8Array) => new TextDecoder().decode(b);
    return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
  } catch (e) {
    return { code: 127, stdout: "", stderr: e instanceof Error ? e.message : String(e) };
  }
};

if (import.meta.main) {
  const config = Deno.args.find((a) => a.startsWith("--config="))?.slice(9) ?? NODE_CONFIG_FILE;
  const text = await Deno.readTextFile(config).catch(() => undefined);
  console.log(JSON.stringify(await collectNodeDump(text, runCommand)));
}
