/**
 * `deno task uninstall-node [--config FILE] [--bin-dir DIR] [--conf-dir DIR] [--host-root DIR]`
 * (as root, on a node, once Ferry's DaemonSet is deleted; on a cluster `deploy/uninstall` runs it
 * on every node): removes what Ferry left on the node, in the order
 * that keeps the runtime from half-using it: the conflist first (new pods stop naming Ferry), then
 * the shim (wrapper, its Deno, its bundle), the links Ferry made on its bridge, the bridge, the
 * VXLAN device, its routes (protocol 199), its nftables tables (masquerade, policy, port security), its state and socket directories.
 * Names come from the daemon's config file (the ConfigMap's `config.json`; defaults otherwise).
 * Prints what it removed; what is already gone is skipped. In the image it runs as
 * `deno run --allow-all --cached-only cni/uninstall.ts`.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import { loadConfig } from "../daemon/config/config.ts";
import { FERRY_ROUTE_PROTOCOL } from "../daemon/cluster/route_table.ts";
import { HOST_LINK_PREFIX } from "../daemon/net/naming.ts";
import { INSTALLED_FILES } from "./install.ts";

/** Where the pieces are. */
export interface NodeInstall {
  /** CNI executables' directory. */
  binDir: string;
  /** CNI configs' directory. */
  confDir: string;
  /** Ferry's bridge. */
  bridge: string;
  /** The VXLAN device (routing vxlan). */
  vxlanDevice: string;
  /** The nftables table (family inet). */
  nftTable: string;
  /** The NetworkPolicy table (family inet). */
  policyTable?: string;
  /** Port security's table (family bridge). */
  guardTable?: string;
  /** The daemon's state directory. */
  stateDir: string;
  /** The directory of the daemon's socket. */
  socketDir: string;
}

async function quiet(cmd: string, args: string[]): Promise<{ ok: boolean; out: string }> {
  const res = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).output()
    .catch(() => undefined);
  return {
    ok: !!res?.success,
    out: res ? new TextDecoder().decode(res.stdout) : "",
  };
}

async function removePath(path: string, recursive = false): Promise<boolean> {
  try {
    await Deno.remove(path, { recursive });
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return false;
    throw e;
  }
}

/** Removes everything of `n` from this node; returns one line per thing removed. */
export async function uninstallNode(n: NodeInstall): Promise<string[]> {
  const done: string[] = [];
  const note = (removed: boolean, what: string) => removed && done.push(what);
  const conflist = `${n.confDir}/${INSTALLED_FILES.conflist}`;
  note(await removePath(conflist), conflist);
  // The reference plugins the install copied because the host had none (and only those).
  const copied =
    (await Deno.readTextFile(`${n.binDir}/${INSTALLED_FILES.pluginList}`).catch(() => ""))
      .split("\n").filter((name) => /^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(name));
  for (const f of [...copied, INSTALLED_FILES.pluginList]) {
    note(await removePath(`${n.binDir}/${f}`), `${n.binDir}/${f}`);
  }
  for (const f of [INSTALLED_FILES.wrapper, INSTALLED_FILES.deno, INSTALLED_FILES.bundle]) {
    note(await removePath(`${n.binDir}/${f}`), `${n.binDir}/${f}`);
  }
  const ports = await quiet("ip", ["-j", "link", "show", "master", n.bridge]);
  const names = ports.ok && ports.out.trim()
    ? (JSON.parse(ports.out) as { ifname: string }[]).map((l) => l.ifname)
    : [];
  for (const name of names.filter((x) => x.startsWith(HOST_LINK_PREFIX))) {
    note((await quiet("ip", ["link", "del", name])).ok, `link ${name}`);
  }
  note((await quiet("ip", ["link", "del", n.bridge])).ok, `bridge ${n.bridge}`);
  note((await quiet("ip", ["link", "del", n.vxlanDevice])).ok, `VXLAN device ${n.vxlanDevice}`);
  for (const family of ["-4", "-6"]) {
    const routes = await quiet("ip", [
      family,
      "route",
      "show",
      "proto",
      String(FERRY_ROUTE_PROTOCOL),
    ]);
    if (routes.out.trim()) {
      await quiet("ip", [family, "route", "flush", "proto", String(FERRY_ROUTE_PROTOCOL)]);
      done.push(`routes ${family} proto ${FERRY_ROUTE_PROTOCOL}`);
    }
  }
  for (const table of [n.nftTable, n.policyTable].filter((t): t is string => !!t)) {
    note((await quiet("nft", ["delete", "table", "inet", table])).ok, `nft table inet ${table}`);
  }
  if (n.guardTable) {
    const ok = (await quiet("nft", ["delete", "table", "bridge", n.guardTable])).ok;
    note(ok, `nft table bridge ${n.guardTable}`);
  }
  note(await removePath(n.stateDir, true), n.stateDir);
  note(await removePath(n.socketDir, true), n.socketDir);
  return done;
}

if (import.meta.main) {
  const flags = parseArgs(Deno.args, {
    string: ["config", "bin-dir", "conf-dir", "host-root"],
    default: { "bin-dir": "/opt/cni/bin", "conf-dir": "/etc/cni/net.d", "host-root": "" },
  });
  // The ConfigMap may be gone already (deploy/uninstall mounts it optionally): the default names.
  const present = flags.config &&
    await Deno.stat(flags.config).then((s) => s.isFile, () => false);
  if (flags.config && !present) {
    console.log(`no config at ${flags.config}: removing what the default names name`);
  }
  const config = await loadConfig(present ? flags.config : undefined);
  // In a container the node's directories are mounted below --host-root (their parents, so that
  // the state and socket directories themselves can be removed).
  const root = flags["host-root"].replace(/\/+$/, "");
  const removed = await uninstallNode({
    binDir: root + flags["bin-dir"],
    confDir: root + flags["conf-dir"],
    bridge: config.network.bridge,
    vxlanDevice: config.routing.vxlan.device,
    nftTable: config.masquerade.table,
    policyTable: config.policy.table,
    guardTable: config.portSecurity.table,
    stateDir: root + config.stateDir,
    socketDir: root + (config.socket.slice(0, config.socket.lastIndexOf("/")) || "/"),
  });
  console.log(removed.length ? `removed:\n  ${removed.join("\n  ")}` : "nothing of Ferry here");
}
