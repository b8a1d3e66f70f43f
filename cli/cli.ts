/**
 * `kubectl ferry`: the command line (kubectl's conventions: `--kubeconfig`, `--context`, `-n`,
 * `KUBECONFIG`, `-o json`) and the dispatch to each command. Results go to `out`, progress and
 * errors to `err`; colours only when `out` is a terminal. Its collaborators (the API connection,
 * exec into pods) are parameters, wired in `main.ts`.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import type { KubeClient } from "../daemon/k8s/client.ts";
import { runIpamCheck } from "../daemon/tools/ipam_check.ts";
import { POLICY_EXPLAIN_USAGE, runPolicyExplain } from "../daemon/tools/policy_explain.ts";
import { FERRY_NAMESPACE } from "./ferry_pods.ts";
import type { KubectlOptions, PodExec } from "./pod_exec.ts";
import { readStatus } from "./status_read.ts";
import { ANSI, PLAIN, statusText } from "./status_render.ts";
import { collectSysdump, sysdumpName } from "./sysdump.ts";
import { tarGz } from "./tar_gz.ts";
import { DEFAULT_IMAGE } from "./connectivity/objects.ts";
import { type TestName, TESTS } from "./connectivity/plan.ts";
import { runConnectivityTest } from "./connectivity/run.ts";
import { summaryJson, summaryText } from "./connectivity/render.ts";

/** The help text. */
export const USAGE = `usage: kubectl ferry COMMAND [flags]

commands:
  status [--node NAME]...   each node's Ferry pod, IPAM, routes, policy table and port
                            security; exit 1 naming unhealthy nodes
  ipam check                addresses held twice, leaked or out of place (exit 1 when any)
  policy explain --pod NS/NAME [--to NS/NAME|IP] [--from NS/NAME|IP] [--port P/PROTO]
                            which NetworkPolicies select a pod, whether a connection is allowed
  sysdump [--file PATH] [--node NAME]...
                            one .tar.gz of every node's logs, stats, config, nft tables, links,
                            routes, records, and Ferry's objects and Events (exit 1 when a part
                            could not be collected; the manifest says which)
  connectivity-test [--test NAME]... [--external IP:PORT]... [--network NS/NAME]
                    [--wait-repair SECONDS] [--image IMAGE] [--json]
                            test pods on every node in a namespace of its own, then pod↔pod,
                            node↔pod, Services, a forged source, NetworkPolicy and outside
                            checks (-n: Ferry's namespace, for port security); exit 1 naming
                            the nodes failures involve. Tests: ${Object.keys(TESTS).join(", ")}

flags:
  --kubeconfig FILE         kubeconfig (default: $KUBECONFIG, else ~/.kube/config)
  --context NAME            the kubeconfig context to use
  -n, --namespace NS        Ferry's namespace (default ${FERRY_NAMESPACE})
  -o, --output json         JSON on stdout instead of text
  -h, --help                this text
`;

/** How the command reaches the cluster. */
export interface CliDeps {
  /** Opens an API client for the operator's kubeconfig and context. */
  connect(options: KubectlOptions): Promise<{ client: KubeClient; close(): void | Promise<void> }>;
  /** Makes the exec into pods for those options. */
  exec(options: KubectlOptions): PodExec;
  /** Writes results. */
  out(text: string): void;
  /** Writes progress and errors. */
  err(text: string): void;
  /** Whether `out` is a terminal (colours). */
  isTerminal: boolean;
  /** Now, in ms. */
  now(): number;
  /** Aborts on Ctrl-C. */
  interrupted: AbortSignal;
  /** Waits `ms` unless `signal` aborts first. */
  wait(ms: number, signal: AbortSignal): Promise<void>;
}

/** The parsed command line. */
export interface CliArgs {
  /** The command's words, e.g. `["ipam", "check"]`. */
  command: string[];
  /** kubectl's connection flags. */
  kube: KubectlOptions;
  /** Ferry's namespace. */
  namespace: string;
  /** JSON output. */
  json: boolean;
  /** `policy explain`'s flags. */
  explain: { pod?: string; to?: string; from?: string; port?: string };
  /** `--node` (status, sysdump): only these nodes. */
  nodes: string[];
  /** `sysdump --file`. */
  file?: string;
  /** `connectivity-test`'s flags. */
  connectivity: {
    tests: TestName[];
    external: string[];
    image: string;
    network?: string;
    waitRepairSeconds: number;
  };
  /** Help asked for. */
  help: boolean;
}

/** A command line that cannot be run (exit 2). */
export class UsageError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/**
 * Parses the command line; `env` gives `KUBECONFIG` (its files, merged as kubectl merges them,
 * unless `--kubeconfig` names one).
 *
 * @throws {UsageError} for an unknown flag or a bad `--output`.
 */
export function parseCli(args: string[], env: (name: string) => string | undefined): CliArgs {
  const unknown: string[] = [];
  const f = parseArgs(args, {
    string: [
      "kubeconfig",
      "context",
      "namespace",
      "output",
      "pod",
      "to",
      "from",
      "port",
      "file",
      "image",
      "test",
      "external",
      "node",
      "network",
      "wait-repair",
    ],
    collect: ["test", "external", "node"],
    boolean: ["json", "help"],
    alias: { n: "namespace", o: "output", h: "help" },
    unknown: (arg: string) => {
      if (arg.startsWith("-")) unknown.push(arg);
      return !arg.startsWith("-");
    },
  });
  if (unknown.length) throw new UsageError(`unknown flag ${unknown[0]}`);
  if (f.output !== undefined && f.output !== "json" && f.output !== "text") {
    throw new UsageError(`--output ${f.output}: json or text`);
  }
  if (f.network !== undefined && !/^[a-z0-9][a-z0-9.-]*\/[a-z0-9][a-z0-9.-]*$/.test(f.network)) {
    throw new UsageError(`--network ${f.network}: a NetworkAttachmentDefinition as NS/NAME`);
  }
  const waitRepairSeconds = Number(f["wait-repair"] ?? 0);
  if (!Number.isFinite(waitRepairSeconds) || waitRepairSeconds < 0) {
    throw new UsageError(`--wait-repair ${f["wait-repair"]}: seconds, 0 or more`);
  }
  const tests = (f.test as string[]).flatMap((t) => t.split(","));
  const unknownTest = tests.find((t) => !(t in TESTS));
  if (unknownTest) {
    throw new UsageError(`--test ${unknownTest}: one of ${Object.keys(TESTS).join(", ")}`);
  }
  const fromEnv = env("KUBECONFIG")?.split(":").filter((p) => p !== "");
  const home = env("HOME");
  return {
    command: f._.map(String),
    kube: f.kubeconfig !== undefined
      ? { kubeconfig: f.kubeconfig, context: f.context }
      : fromEnv?.length
      ? { kubeconfigs: fromEnv, context: f.context }
      : { kubeconfig: home ? `${home}/.kube/config` : undefined, context: f.context },
    namespace: f.namespace ?? FERRY_NAMESPACE,
    json: f.json || f.output === "json",
    explain: { pod: f.pod, to: f.to, from: f.from, port: f.port },
    file: f.file,
    nodes: (f.node as string[]).flatMap((n) => n.split(",")),
    connectivity: {
      tests: tests as TestName[],
      external: f.external as string[],
      image: f.image ?? DEFAULT_IMAGE,
      network: f.network,
      waitRepairSeconds,
    },
    help: f.help,
  };
}

/** `status`: 0 all healthy, 1 naming the unhealthy, 2 when the cluster cannot be read. */
async function status(a: CliArgs, client: KubeClient, d: CliDeps): Promise<number> {
  const s = await readStatus({
    client,
    exec: d.exec(a.kube),
    namespace: a.namespace,
    execTimeoutMs: 20_000,
    now: d.now,
    nodes: a.nodes,
  });
  d.out(a.json ? JSON.stringify(s, null, 2) + "\n" : statusText(s, d.isTerminal ? ANSI : PLAIN));
  if (s.unhealthy.length) d.err(`ferry: unhealthy nodes: ${s.unhealthy.join(", ")}\n`);
  return s.unhealthy.length ? 1 : 0;
}

/** `sysdump`: the archive's path on stdout; 0 when whole, 1 when a part failed. */
async function sysdump(a: CliArgs, client: KubeClient, d: CliDeps): Promise<number> {
  const dump = await collectSysdump({
    client,
    exec: d.exec(a.kube),
    namespace: a.namespace,
    execTimeoutMs: 60_000,
    progress: (line) => d.err(`${line}\n`),
    nodes: a.nodes,
  });
  const now = d.now();
  const top = sysdumpName(now);
  const manifest = {
    createdAt: new Date(now).toISOString(),
    namespace: a.namespace,
    ...dump.manifest,
  };
  const files: [string, string][] = [
    [`${top}/manifest.json`, JSON.stringify(manifest, null, 2) + "\n"],
    ...[...dump.files].sort(([x], [y]) => x.localeCompare(y)).map(([p, t]): [string, string] => [
      `${top}/${p}`,
      t,
    ]),
  ];
  const path = a.file ?? `${top}.tar.gz`;
  await Deno.writeFile(path, await tarGz(files, now), { mode: 0o600 });
  for (const f of dump.manifest.failed) d.err(`sysdump: not collected: ${f.part}: ${f.why}\n`);
  d.out(`${path}\n`);
  return dump.manifest.failed.length ? 1 : 0;
}

/**
 * `connectivity-test`: 0 all passed, 1 a check failed, 2 the test pods could not be set up, 130
 * interrupted (the namespace is deleted in every case).
 */
async function connectivityTest(a: CliArgs, client: KubeClient, d: CliDeps): Promise<number> {
  const suffix = crypto.randomUUID().slice(0, 5);
  const run = await runConnectivityTest({
    client,
    exec: d.exec(a.kube),
    progress: (line) => d.err(`${line}\n`),
    signal: d.interrupted,
    now: d.now,
    wait: d.wait,
    image: a.connectivity.image,
    namespace: `ferry-connectivity-${suffix}`,
    readyTimeoutMs: 180_000,
    connectTimeoutSeconds: 3,
    policyWaitMs: 10_000,
    serviceWaitMs: 15_000,
    repairWaitMs: a.connectivity.waitRepairSeconds * 1000,
    ferryNamespace: a.namespace,
    spoofCountWaitMs: 30_000,
  }, a.connectivity);
  d.out(a.json ? summaryJson(run) : summaryText(run));
  if (run.error === "interrupted") return 130;
  if (run.error && !run.results.length) return 2;
  return run.error || run.results.some((r) => !r.ok) ? 1 : 0;
}

/**
 * Runs one command line; returns its exit status.
 *
 * @example
 * ```ts
 * Deno.exit(await runCli(Deno.args, (n) => Deno.env.get(n), deps));
 * ```
 */
export async function runCli(
  args: string[],
  env: (name: string) => string | undefined,
  d: CliDeps,
): Promise<number> {
  let a: CliArgs;
  try {
    a = parseCli(args, env);
  } catch (e) {
    d.err(`ferry: ${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  const which = a.command.join(" ");
  if (a.help || which === "help") {
    d.out(USAGE);
    return 0;
  }
  if (!which) {
    d.err(USAGE);
    return 2;
  }
  const commands = ["status", "ipam check", "policy explain", "sysdump", "connectivity-test"];
  if (!commands.includes(which)) {
    d.err(`ferry: unknown command ${JSON.stringify(which)}\n${USAGE}`);
    return 2;
  }
  if (which === "policy explain" && !a.explain.pod) {
    d.err(`${POLICY_EXPLAIN_USAGE}\n`);
    return 2;
  }
  let conn: { client: KubeClient; close(): void | Promise<void> };
  try {
    conn = await d.connect(a.kube);
  } catch (e) {
    d.err(`ferry: cannot reach the cluster: ${e instanceof Error ? e.message : e}\n`);
    return 2;
  }
  try {
    if (which === "ipam check") return await runIpamCheck(conn.client, a.json);
    if (which === "policy explain") return await runPolicyExplain(conn.client, a.explain);
    if (which === "sysdump") return await sysdump(a, conn.client, d);
    if (which === "connectivity-test") return await connectivityTest(a, conn.client, d);
    return await status(a, conn.client, d);
  } catch (e) {
    d.err(`ferry: ${which}: ${e instanceof Error ? e.message : e}\n`);
    return 2;
  } finally {
    await conn.close();
  }
}
