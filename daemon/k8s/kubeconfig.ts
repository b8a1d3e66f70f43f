/**
 * Where the API is and how to authenticate: a kubeconfig file (token, token file, client
 * certificate, CA; `insecure-skip-tls-verify` is refused), or the in-cluster service account
 * (token re-read as the kubelet rotates it, CA beside it, address from the environment).
 *
 * @module
 */
import { parse } from "deno-std/yaml/parse.js";
import type { ConnectionConfig } from "./transport.ts";

/** A kubeconfig that cannot be used. */
export class KubeconfigError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "KubeconfigError";
  }
}

interface Named<T> {
  name: string;
  [key: string]: unknown;
  value?: T;
}

/** A kubeconfig file as YAML gives it. */
export interface RawKubeconfig {
  "current-context"?: string;
  contexts?: Named<unknown>[];
  clusters?: Named<unknown>[];
  users?: Named<unknown>[];
}

function pick(
  list: Named<unknown>[] | undefined,
  name: string | undefined,
  field: string,
  what: string,
) {
  const entry = list?.find((e) => e.name === name);
  if (!entry) throw new KubeconfigError(`kubeconfig has no ${what} named ${JSON.stringify(name)}`);
  return (entry[field] ?? {}) as Record<string, unknown>;
}

function decodeBase64(data: string): string {
  return new TextDecoder().decode(Uint8Array.from(atob(data), (c) => c.charCodeAt(0)));
}

/** A token that is read from `path` again once `ttlMs` has passed (rotated tokens are picked up). */
export function fileToken(
  path: string,
  ttlMs = 60_000,
  now = () => Date.now(),
): () => Promise<string> {
  let cached: { token: string; at: number } | undefined;
  return async () => {
    if (!cached || now() - cached.at >= ttlMs) {
      cached = { token: (await Deno.readTextFile(path)).trim(), at: now() };
    }
    return cached.token;
  };
}

/**
 * Reads a kubeconfig file's current context (or the context `options.context` names) into a
 * connection config.
 *
 * `insecure-skip-tls-verify` is refused unless `allowInsecureTls` is given; even then Deno checks
 * certificates unless the process runs with `--unsafely-ignore-certificate-errors` (Deno has no
 * per-client switch), so an operator must ask for it twice.
 *
 * @throws {KubeconfigError} for a missing piece, an unsupported auth method, or an unallowed
 * `insecure-skip-tls-verify`.
 * @example
 * ```ts
 * const conn = await loadKubeconfig("/etc/kubernetes/kubelet.conf");
 * ```
 */
export async function loadKubeconfig(
  path: string,
  options: { allowInsecureTls?: boolean; context?: string } = {},
): Promise<ConnectionConfig> {
  let raw: RawKubeconfig;
  try {
    raw = await readKubeconfig(path);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
    throw new KubeconfigError(`cannot read kubeconfig ${path}: ${e.message}`);
  }
  return await connectionOf(raw, path, options);
}

/** A kubeconfig's text, parsed; each named entry remembers the file's directory. */
async function readKubeconfig(path: string): Promise<RawKubeconfig> {
  let raw: RawKubeconfig;
  try {
    raw = (parse(await Deno.readTextFile(path)) ?? {}) as RawKubeconfig;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) throw e;
    throw new KubeconfigError(
      `cannot read kubeconfig ${path}: ${e instanceof Error ? e.message : e}`,
    );
  }
  const dir = path.includes("/") ? path.slice(0, path.lastIndexOf("/")) : ".";
  for (const list of [raw.contexts, raw.clusters, raw.users]) {
    for (const e of list ?? []) Object.defineProperty(e, DIR, { value: dir, enumerable: false });
  }
  return raw;
}

const DIR = Symbol("kubeconfig directory");

/**
 * kubectl's merge of the files of `KUBECONFIG` (pure): for each context, cluster and user name
 * the first file that has it wins; `current-context` comes from the first file that sets it.
 *
 * @example
 * ```ts
 * mergeKubeconfigs([{ "current-context": "a", contexts: [...] }, { contexts: [...] }]);
 * ```
 */
export function mergeKubeconfigs(files: RawKubeconfig[]): RawKubeconfig {
  const merged: Required<Pick<RawKubeconfig, "contexts" | "clusters" | "users">> = {
    contexts: [],
    clusters: [],
    users: [],
  };
  for (const f of files) {
    for (const key of ["contexts", "clusters", "users"] as const) {
      for (const e of f[key] ?? []) {
        if (!merged[key].some((x) => x.name === e.name)) merged[key].push(e);
      }
    }
  }
  const current = files.find((f) => f["current-context"])?.["current-context"];
  return { ...merged, ...(current ? { "current-context": current } : {}) };
}

/**
 * Reads the kubeconfig files of a `KUBECONFIG` list (`a:b:c`, as given split) merged as kubectl
 * merges them ({@link mergeKubeconfigs}; files that do not exist are skipped, as kubectl skips
 * them), into the connection of the current context or `options.context`. A file named relative
 * to a kubeconfig is found beside the kubeconfig that names it.
 *
 * @throws {KubeconfigError} when no file exists, or as {@link loadKubeconfig}.
 * @example
 * ```ts
 * const conn = await loadKubeconfigFiles(Deno.env.get("KUBECONFIG")!.split(":"));
 * ```
 */
export async function loadKubeconfigFiles(
  paths: string[],
  options: { allowInsecureTls?: boolean; context?: string } = {},
): Promise<ConnectionConfig> {
  const files: RawKubeconfig[] = [];
  for (const p of paths.filter((p) => p !== "")) {
    try {
      files.push(await readKubeconfig(p));
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    }
  }
  if (!files.length) {
    throw new KubeconfigError(`none of the kubeconfig files exists: ${paths.join(":")}`);
  }
  return await connectionOf(mergeKubeconfigs(files), paths.join(":"), options);
}

/** The connection of `raw`'s context; `path` names the file(s) in errors. */
async function connectionOf(
  raw: RawKubeconfig,
  path: string,
  options: { allowInsecureTls?: boolean; context?: string },
): Promise<ConnectionConfig> {
  const context = pick(
    raw.contexts,
    options.context ?? raw["current-context"],
    "context",
    "context",
  );
  const cluster = pick(raw.clusters, context.cluster as string, "cluster", "cluster");
  const user = pick(raw.users, context.user as string, "user", "user");
  const dirOf = (list: Named<unknown>[] | undefined, name: unknown) =>
    (list?.find((e) => e.name === name) as Record<symbol, string> | undefined)?.[DIR] ?? ".";
  const resolveIn = (dir: string) => (p: string) => (p.startsWith("/") ? p : `${dir}/${p}`);
  const clusterPath = resolveIn(dirOf(raw.clusters, context.cluster));
  const userPath = resolveIn(dirOf(raw.users, context.user));
  const readPem = async (inline: unknown, file: unknown, resolve: (p: string) => string) =>
    typeof inline === "string"
      ? decodeBase64(inline)
      : typeof file === "string"
      ? await Deno.readTextFile(resolve(file))
      : undefined;
  if (cluster["insecure-skip-tls-verify"] && !options.allowInsecureTls) {
    throw new KubeconfigError(
      `kubeconfig ${path} asks for insecure-skip-tls-verify; Ferry refuses to talk to an unverified API server ` +
        `unless the daemon config sets allowInsecureTls (and Deno runs with --unsafely-ignore-certificate-errors)`,
    );
  }
  if (user.exec || user["auth-provider"]) {
    throw new KubeconfigError(
      `kubeconfig ${path} uses exec or auth-provider credentials, which Ferry does not run`,
    );
  }
  if (typeof cluster.server !== "string") {
    throw new KubeconfigError(`kubeconfig ${path} names no server`);
  }
  const config: ConnectionConfig = { server: cluster.server };
  config.caCert = await readPem(
    cluster["certificate-authority-data"],
    cluster["certificate-authority"],
    clusterPath,
  );
  config.clientCert = await readPem(
    user["client-certificate-data"],
    user["client-certificate"],
    userPath,
  );
  config.clientKey = await readPem(user["client-key-data"], user["client-key"], userPath);
  if (typeof user.token === "string") {
    const token = user.token;
    config.token = () => Promise.resolve(token);
  } else if (typeof user.tokenFile === "string") {
    config.token = fileToken(userPath(user.tokenFile));
  }
  return config;
}

/** Where a pod's service account credentials are mounted. */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/**
 * The in-cluster connection: `KUBERNETES_SERVICE_HOST`/`_PORT`, the mounted CA, and the mounted
 * token re-read as it rotates.
 *
 * @throws {KubeconfigError} outside a pod.
 */
export async function inClusterConfig(
  env: (name: string) => string | undefined = (n) => Deno.env.get(n),
  dir = SERVICE_ACCOUNT_DIR,
): Promise<ConnectionConfig> {
  const host = env("KUBERNETES_SERVICE_HOST");
  const port = env("KUBERNETES_SERVICE_PORT");
  if (!host || !port) {
    throw new KubeconfigError(
      "not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset) and no kubeconfig given",
    );
  }
  const server = `https://${host.includes(":") ? `[${host}]` : host}:${port}`;
  let caCert: string;
  try {
    caCert = await Deno.readTextFile(`${dir}/ca.crt`);
  } catch (e) {
    throw new KubeconfigError(
      `cannot read the service account CA: ${e instanceof Error ? e.message : e}`,
    );
  }
  return { server, caCert, token: fileToken(`${dir}/token`) };
}
