/**
 * A throwaway Ferry for the demo and the tests: a daemon started in-process on a temporary socket
 * and state directory, and the shim installed into temporary CNI directories exactly as
 * `deno task install-cni` does. Everything is removed afterwards, also when the body throws.
 *
 * @module
 */
import { type ConfigOverrides, type DaemonConfig, resolveConfig } from "../config/config.ts";
import type { Daemon, DaemonOverrides } from "../daemon.ts";
import { startDaemon } from "../wiring/main.ts";
import { install, installUnder } from "../../cni/install.ts";
import { uniqueToken } from "./netns.ts";
import { DaemonProcess } from "./daemon_process.ts";

/** What a shim invocation printed and how it exited. */
export interface ShimRun {
  /** Exit code. */
  code: number;
  /** Stdout as text. */
  stdout: string;
  /** Stdout parsed as JSON, or undefined when empty. */
  json: Record<string, unknown> | undefined;
  /** Stderr as text. */
  stderr: string;
}

/**
 * A running throwaway Ferry. Standalone (no Kubernetes) unless the overrides name a kubeconfig
 * and set `standalone: false`.
 */
export interface TestFerry {
  /** The daemon's configuration. */
  config: DaemonConfig;
  /** Temporary directory holding everything. */
  dir: string;
  /** The installed shim's path. */
  shimPath: string;
  /** Runs the installed shim with exactly `env` (nothing else) and `stdin`. */
  shim(env: Record<string, string>, stdin: string): Promise<ShimRun>;
  /** Stops the daemon (tests of a daemon that is down). */
  stopDaemon(): Promise<void>;
  /** Starts it again with the same configuration and state. */
  restartDaemon(): Promise<void>;
  /** The running daemon (its stats, readiness, health). */
  daemon(): Daemon;
  /** The addresses allocated on disk, over every pool, once answered DELs have finished. */
  allocations(): Promise<string[]>;
  /** The attachment records on disk, once answered DELs have finished. */
  records(): Promise<string[]>;
}

async function fileNames(dir: string): Promise<string[]> {
  const names: string[] = [];
  try {
    for await (const e of Deno.readDir(dir)) if (!e.name.startsWith(".")) names.push(e.name);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  return names.sort();
}

/** Runs an executable with exactly `env` and `stdin`. */
export async function runShimAt(
  path: string,
  env: Record<string, string>,
  stdin: string,
): Promise<ShimRun> {
  const out = await runWithInput(path, [], env, stdin, true);
  const stdout = new TextDecoder().decode(out.stdout);
  return {
    code: out.code,
    stdout,
    json: stdout.trim() ? JSON.parse(stdout) : undefined,
    stderr: new TextDecoder().decode(out.stderr),
  };
}

/**
 * Runs `cmd` with `args` and `env`, writing `stdin` to it; with `clearEnv`, `env` is all it gets.
 * Resolves to its exit status and output.
 */
export async function runWithInput(
  cmd: string,
  args: string[],
  env: Record<string, string>,
  stdin: string,
  clearEnv = false,
): Promise<Deno.CommandOutput> {
  const child = new Deno.Command(cmd, {
    args,
    env,
    clearEnv,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  })
    .spawn();
  const w = child.stdin.getWriter();
  await w.write(new TextEncoder().encode(stdin));
  await w.close();
  return await child.output();
}

/** A random /24 out of 10.100.0.0/14 (1024 of them), so throwaway Ferries never share addresses. */
export function testSubnet(): string {
  const n = Math.floor(Math.random() * 1024);
  return `10.${100 + (n >> 8)}.${n & 255}.0/24`;
}

/** A daemon process of {@link standaloneDaemonProcess}, with where it keeps its files. */
export interface StandaloneDaemonProcess {
  /** The process (not started). */
  daemon: DaemonProcess;
  /** Its socket, `DIR/run/ferry.sock`. */
  socket: string;
  /** Its log, `DIR/daemon.log`. */
  log: string;
  /** (Re)writes its config, `DIR/config.json`, with `extra` over the standalone settings. */
  writeConfig(extra?: Record<string, unknown>): Promise<void>;
}

/**
 * A daemon as a process of its own that needs no API server (`standalone`), inside namespace
 * `netns`: its config, socket, state and log under `dir`, its bridge `bridge` on a throwaway
 * subnet, no masquerade.
 *
 * @example
 * ```ts
 * const { daemon, writeConfig } = standaloneDaemonProcess(dir, ns.name, "fyx0");
 * await writeConfig({ logLevel: "debug" });
 * await daemon.start();
 * ```
 */
export function standaloneDaemonProcess(
  dir: string,
  netns: string,
  bridge: string,
): StandaloneDaemonProcess {
  const socket = `${dir}/run/ferry.sock`, log = `${dir}/daemon.log`, config = `${dir}/config.json`;
  const subnet = testSubnet();
  return {
    daemon: new DaemonProcess(config, socket, log, netns),
    socket,
    log,
    writeConfig: (extra = {}) =>
      Deno.writeTextFile(
        config,
        JSON.stringify({
          socket,
          stateDir: `${dir}/state`,
          standalone: true,
          masquerade: { enabled: false },
          network: { subnet, bridge, forwarding: false },
          ...extra,
        }),
      ),
  };
}

/** A random IPv6 /64 out of fd00:f3::/32, for dual-stack throwaway Ferries. */
export function testSubnet6(): string {
  return `fd00:f3:${Math.floor(Math.random() * 0xffff).toString(16)}::/64`;
}

/**
 * Starts a daemon and installs the shim, runs `fn`, and tears it all down.
 *
 * @example
 * ```ts
 * await withFerry({}, async (ferry) => { const add = await ferry.shim({ CNI_COMMAND: "ADD", … }, conf); });
 * ```
 */
export async function withFerry<T>(
  options: {
    config?: Record<string, unknown>;
    overrides?: ConfigOverrides;
    daemon?: DaemonOverrides;
  },
  fn: (ferry: TestFerry) => Promise<T>,
): Promise<T> {
  const token = uniqueToken();
  const dir = await Deno.makeTempDir({ prefix: `ferry-${token}-` });
  const given = options.config ?? {};
  const config = resolveConfig(
    {
      // Throwaway Ferries share the host's namespace: none of them owns its nftables, and each
      // serves its probes and metrics on a port of its own.
      masquerade: { enabled: false },
      ...given,
      // Its own port security table (on its own bridge's ports only).
      portSecurity: {
        table: `fp${token}`,
        ...(given.portSecurity as Record<string, unknown> | undefined),
      },
      server: { httpPort: 0, ...(given.server as Record<string, unknown> | undefined) },
      // Its own bridge and subnet; the host's forwarding sysctls are left alone unless asked.
      network: {
        subnet: testSubnet(),
        bridge: `fb${token}`,
        forwarding: false,
        mtu: 1500,
        ...(given.network as Record<string, unknown> | undefined),
      },
    },
    {
      socket: `${dir}/run/ferry.sock`,
      stateDir: `${dir}/state`,
      nodeName: "test-node",
      standalone: true,
      ...options.overrides,
    },
  );
  let daemon: Daemon;
  try {
    daemon = await startDaemon(config, options.daemon);
  } catch (e) {
    await removeBridge(config.network.bridge);
    await removeGuardTable(config.portSecurity.table);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw e;
  }
  let running = true;
  try {
    const { shim } = await install(installUnder(dir, config.socket));
    return await fn({
      config,
      dir,
      shimPath: shim,
      shim: (env, stdin) => runShimAt(shim, env, stdin),
      async stopDaemon() {
        if (running) await daemon.stop();
        running = false;
      },
      daemon: () => daemon,
      async allocations() {
        await daemon.idle(); // a DEL is answered before its addresses are released

        const pools = await fileNames(`${config.stateDir}/ipam`);
        return (await Promise.all(pools.map((p) => fileNames(`${config.stateDir}/ipam/${p}`))))
          .flat();
      },
      async records() {
        await daemon.idle();
        return await fileNames(`${config.stateDir}/attachments`);
      },
      async restartDaemon() {
        if (running) await daemon.stop();
        daemon = await startDaemon(config, options.daemon);
        running = true;
      },
    });
  } finally {
    try {
      if (running) await daemon.stop();
    } finally {
      // Even when the stop throws: a failed test must not leave its bridge behind.
      await removeBridge(config.network.bridge);
      await removeGuardTable(config.portSecurity.table);
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  }
}

/** Deletes a throwaway Ferry's port security table (a stopped daemon leaves it, as a node's must). */
export async function removeGuardTable(table: string): Promise<void> {
  await new Deno.Command("nft", { args: ["delete", "table", "bridge", table], stderr: "null" })
    .output();
}

/** Deletes a throwaway Ferry's bridge (the daemon leaves it on stop, as a node's must stay). */
export async function removeBridge(name: string): Promise<void> {
  await new Deno.Command("ip", { args: ["link", "del", name], stderr: "null" }).output();
}

/**
 * The CNI environment a runtime sets for one invocation, naming `pod` (by default
 * `pod-<containerId>` with UID `uid-<containerId>`) in `default`; `netns` absent for a DEL of a
 * sandbox already gone.
 */
export function cniEnv(
  command: string,
  netns: { path: string } | undefined,
  containerId: string,
  ifname = "eth0",
  pod: { name: string; uid: string } = { name: `pod-${containerId}`, uid: `uid-${containerId}` },
): Record<string, string> {
  const e: Record<string, string> = {
    CNI_COMMAND: command,
    CNI_CONTAINERID: containerId,
    CNI_IFNAME: ifname,
    CNI_PATH: "/usr/lib/cni",
    CNI_ARGS:
      `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${pod.name};K8S_POD_UID=${pod.uid}`,
  };
  if (netns) e.CNI_NETNS = netns.path;
  return e;
}

/** A network config for the shim's stdin. */
export function netconf(cniVersion = "1.0.0", extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ cniVersion, name: "ferry", type: "ferry", ...extra });
}
