/**
 * `deno task install-cni --bin-dir DIR --conf-dir DIR --socket PATH [--deno-dir DIR]
 * [--copy-deno] [--bundle FILE] [--copy-plugins-from DIR] [--stage-conflist DIR]`: installs the shim for a container runtime. With `--copy-deno`
 * the running Deno is copied beside the shim (`DIR/ferry-deno`), so the install depends on
 * nothing else at run time (the DaemonSet's install step, from its image); `--bundle` takes a
 * bundle made beforehand. Writes `DIR/ferry-shim.js`, the shim bundled into one file (one module to
 * load at every start instead of a dozen: measurably faster), and `DIR/ferry`, a wrapper that
 * runs it with the sandbox flags of `cni/sandbox.ts`, a fixed Deno cache directory (the runtime
 * gives it no HOME), no config discovery and no fetching; and `CONF_DIR/10-ferry.conflist` whose
 * plugin type is `ferry`. Then runs VERSION once through the wrapper, which warms the cache and
 * proves it works.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { checkShape } from "../lib/validate.ts";
import { validateNetConfList } from "../lib/_generated/validateNetConfList.js";
import type { NetConfList } from "../lib/cni/schemas.ts";
import { SHIM_ENTRYPOINT, SHIM_RUNTIME_FLAGS, shimArgs, shimPermissionFlags } from "./sandbox.ts";
import { DEFAULT_SOCKET } from "../lib/socket_api.ts";
import { CNI_ENV_VARS } from "./invocation.ts";

/** What to install. */
export interface InstallOptions {
  /** Directory of CNI plugin executables (the runtime's CNI_PATH). */
  binDir: string;
  /** Directory of CNI network configs. */
  confDir: string;
  /** The daemon's socket. */
  socket: string;
  /** The Deno cache directory the shim uses. */
  denoDir: string;
  /** The network's name in the conflist. */
  networkName: string;
  /** The conflist's cniVersion. */
  cniVersion: string;
  /** The Deno executable the wrapper runs. */
  denoPath: string;
  /** Where the bundled shim goes (one JavaScript file with no imports). */
  shimBundle: string;
  /**
   * A bundle made beforehand (the image's) to copy to `shimBundle`, instead of bundling now
   * (`deno bundle` may need to fetch its bundler, which a node cannot).
   */
  prebuiltBundle?: string;
  /**
   * Copy this Deno executable to `denoPath` first: a host install that must not depend on the
   * image at run time (the runtime execs the shim on the host, where the image's Deno is not).
   */
  copyDenoFrom?: string;
  /**
   * Write the conflist into this directory instead of `confDir`: the daemon publishes it into
   * `confDir` once it is ready (its `stagedConflist`), so the node's network is ready only then.
   */
  stageConflistIn?: string;
}

/** Copies `from` to `to` through a temporary file and a rename, executable. */
async function copyAtomically(from: string, to: string, mode: number): Promise<void> {
  const tmp = `${to}.tmp-${Deno.pid}`;
  await Deno.copyFile(from, tmp);
  await Deno.chmod(tmp, mode);
  await Deno.rename(tmp, to);
}

const quote = (s: string) => `'${s.replaceAll("'", `'"'"'`)}'`;

/**
 * The wrapper's command line: Deno, `run`, the runtime flags, the lock file, the sandbox flags,
 * the entrypoint and its arguments.
 */
export function wrapperCommand(
  o: Pick<InstallOptions, "socket" | "denoPath" | "shimBundle">,
): string[] {
  return [
    o.denoPath,
    "run",
    ...SHIM_RUNTIME_FLAGS,
    ...shimPermissionFlags(o.socket),
    o.shimBundle,
    ...shimArgs(o.socket),
  ];
}

/**
 * Bundles the shim's entrypoint into `output` (written to a temporary file, then renamed): one
 * JavaScript file without imports, so each start loads one module.
 */
export async function bundleShim(denoPath: string, output: string): Promise<void> {
  const tmp = `${output}.tmp-${Deno.pid}`;
  const out = await new Deno.Command(denoPath, {
    args: ["bundle", "--quiet", "--no-check", SHIM_ENTRYPOINT.pathname, "-o", tmp],
    cwd: new URL("../", import.meta.url).pathname,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(`bundling the shim failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  await Deno.rename(tmp, output);
}

/**
 * The whole environment the shim's Deno starts with, besides the CNI variables: the runtime hands
 * a plugin its own environment, and variables such as `DENO_V8_FLAGS`, `DENO_COVERAGE_DIR` or
 * `NODE_OPTIONS` would change what Deno does before the shim's first line runs.
 */
export function shimEnvironment(denoDir: string): Record<string, string> {
  return {
    DENO_DIR: denoDir,
    DENO_NO_UPDATE_CHECK: "1",
    DENO_NO_PROMPT: "1",
    NO_COLOR: "1",
  };
}

/**
 * A script that runs `command` with a clean environment: the six CNI variables that are set, plus
 * `env`, and nothing else of what the runtime's environment holds (`env -i`).
 */
export function cleanEnvScript(command: string[], env: Record<string, string>): string {
  return [
    "#!/bin/sh",
    "# Ferry CNI shim, run by the container runtime. Deno starts with a clean environment:",
    "# the CNI variables and the settings below only.",
    "set --",
    ...CNI_ENV_VARS.map((v) => `[ -n "\${${v}+set}" ] && set -- "$@" "${v}=\$${v}"`),
    `exec /usr/bin/env -i ${
      Object.entries(env).map(([k, v]) => quote(`${k}=${v}`)).join(" ")
    } "$@" ${command.map(quote).join(" ")}`,
    "",
  ].join("\n");
}

/** The wrapper script `install-cni` writes: `deno run` of the shim with a clean environment. */
export function wrapperScript(o: InstallOptions): string {
  return cleanEnvScript(wrapperCommand(o), shimEnvironment(o.denoDir));
}

/**
 * The conflist that names Ferry's shim, chained with the reference `portmap` plugin so that a
 * pod's `hostPort`s work (the runtime hands it the port mappings as runtimeConfig).
 */
export function conflist(o: Pick<InstallOptions, "networkName" | "cniVersion">): NetConfList {
  return checkShape<NetConfList>(
    validateNetConfList,
    {
      cniVersion: o.cniVersion,
      cniVersions: ["1.0.0", "1.1.0"],
      name: o.networkName,
      plugins: [{ type: "ferry" }, { type: "portmap", capabilities: { portMappings: true } }],
    },
    7,
    "conflist",
  );
}

/**
 * The files an install writes: in the CNI config directory the conflist; in the CNI bin directory
 * the wrapper (named for the plugin type), the copy of Deno (with `--copy-deno`) and the shim's
 * bundle. `cni/uninstall.ts` removes the same names.
 */
export const INSTALLED_FILES = {
  conflist: "10-ferry.conflist",
  wrapper: "ferry",
  deno: "ferry-deno",
  bundle: "ferry-shim.js",
  /** The reference plugins an install copied because the host had none of that name. */
  pluginList: ".ferry-plugins",
} as const;

/**
 * Copies the plugins of `from` (the image's reference plugins) into `binDir` where the host has
 * none of that name: the conflist chains `portmap`, and NADs name `macvlan`, `static`,
 * `host-local`, … A plugin the host has is never replaced (the host's may be newer). The names
 * copied are recorded in `binDir/.ferry-plugins`, so that the uninstall removes them and nothing
 * else. Returns the names copied now.
 */
export async function copyMissingPlugins(from: string, binDir: string): Promise<string[]> {
  const listFile = `${binDir}/${INSTALLED_FILES.pluginList}`;
  const recorded = new Set(
    (await Deno.readTextFile(listFile).catch(() => "")).split("\n").filter(Boolean),
  );
  const copied: string[] = [];
  for await (const entry of Deno.readDir(from)) {
    if (!entry.isFile || entry.name.startsWith(".")) continue;
    const to = `${binDir}/${entry.name}`;
    if (await Deno.lstat(to).then(() => true, () => false)) continue;
    await copyAtomically(`${from}/${entry.name}`, to, 0o755);
    copied.push(entry.name);
    recorded.add(entry.name);
  }
  if (copied.length) {
    const tmp = `${listFile}.tmp-${Deno.pid}`;
    await Deno.writeTextFile(tmp, [...recorded].sort().join("\n") + "\n");
    await Deno.rename(tmp, listFile);
  }
  return copied.sort();
}

/**
 * Options for an install where everything lives under `dir` (`bin/`, `conf/`, `deno/`), with
 * this Deno and this repository's lock file: what dev mode, the demo and the tests use.
 */
export function installUnder(dir: string, socket: string): InstallOptions {
  return {
    binDir: `${dir}/bin`,
    confDir: `${dir}/conf`,
    socket,
    denoDir: `${dir}/deno`,
    networkName: "ferry",
    cniVersion: "1.0.0",
    denoPath: Deno.execPath(),
    shimBundle: `${dir}/bin/${INSTALLED_FILES.bundle}`,
  };
}

/** Installs the wrapper and the conflist, then runs VERSION through the wrapper. */
export async function install(o: InstallOptions): Promise<{ shim: string; conflist: string }> {
  await Deno.mkdir(o.binDir, { recursive: true });
  await Deno.mkdir(o.stageConflistIn ?? o.confDir, { recursive: true });
  await Deno.mkdir(o.denoDir, { recursive: true });
  // Deno and the bundle first, the wrapper that runs them after, the conflist that names the
  // wrapper last: a runtime never finds a conflist whose plugin is not whole yet.
  if (o.copyDenoFrom) await copyAtomically(o.copyDenoFrom, o.denoPath, 0o755);
  if (o.prebuiltBundle) await copyAtomically(o.prebuiltBundle, o.shimBundle, 0o644);
  else await bundleShim(o.denoPath, o.shimBundle);
  const shim = `${o.binDir}/${INSTALLED_FILES.wrapper}`;
  const tmp = `${shim}.tmp-${Deno.pid}`;
  await Deno.writeTextFile(tmp, wrapperScript(o), { mode: 0o755 });
  await Deno.chmod(tmp, 0o755);
  await Deno.rename(tmp, shim);
  // Written whole, then renamed: the runtime's watch of the directory never reads half a file.
  const confDir = o.stageConflistIn ?? o.confDir;
  const conf = `${confDir}/${INSTALLED_FILES.conflist}`;
  const confTmp = `${confDir}/.${INSTALLED_FILES.conflist}.tmp-${Deno.pid}`;
  await Deno.writeTextFile(confTmp, JSON.stringify(conflist(o), null, 2) + "\n");
  await Deno.rename(confTmp, conf);
  const out = await new Deno.Command(shim, {
    env: { CNI_COMMAND: "VERSION" },
    clearEnv: true,
    stdin: "null",
  })
    .output();
  if (!out.success) {
    throw new Error(
      `the installed shim failed VERSION: ${new TextDecoder().decode(out.stdout)}${
        new TextDecoder().decode(out.stderr)
      }`,
    );
  }
  return { shim, conflist: conf };
}

if (import.meta.main) {
  const flags = parseArgs(Deno.args, {
    string: [
      "bin-dir",
      "conf-dir",
      "socket",
      "deno-dir",
      "network-name",
      "cni-version",
      "bundle",
      "copy-plugins-from",
      "stage-conflist",
    ],
    boolean: ["copy-deno"],
    default: {
      "bin-dir": "/opt/cni/bin",
      "conf-dir": "/etc/cni/net.d",
      socket: DEFAULT_SOCKET,
      "deno-dir": "/var/cache/ferry/deno",
      "network-name": "ferry",
      "cni-version": "1.0.0",
    },
  });
  const done = await install({
    binDir: flags["bin-dir"],
    confDir: flags["conf-dir"],
    socket: flags.socket,
    denoDir: flags["deno-dir"],
    networkName: flags["network-name"],
    cniVersion: flags["cni-version"],
    denoPath: flags["copy-deno"] ? `${flags["bin-dir"]}/${INSTALLED_FILES.deno}` : Deno.execPath(),
    copyDenoFrom: flags["copy-deno"] ? Deno.execPath() : undefined,
    shimBundle: `${flags["bin-dir"]}/${INSTALLED_FILES.bundle}`,
    prebuiltBundle: flags.bundle,
    stageConflistIn: flags["stage-conflist"],
  });
  console.log(
    flags["stage-conflist"]
      ? `installed ${done.shim}; staged ${done.conflist} for the daemon to publish once ready`
      : `installed ${done.shim} and ${done.conflist}`,
  );
  if (flags["copy-plugins-from"]) {
    const copied = await copyMissingPlugins(flags["copy-plugins-from"], flags["bin-dir"]);
    console.log(
      copied.length
        ? `copied the reference plugins the host lacked: ${copied.join(", ")}`
        : "the host has every reference plugin already",
    );
  }
}
