// Port security's macvlan guard through a real daemon (in this process) and the installed shim:
// its table is written and removed without a process. The programs the daemon starts are seen by
// shims for `nft` and `nsenter` put first on PATH while the ADD and DEL run; each logs its
// command line and runs the real one. Needs root, macvlan, nft and libnftables.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { cniEnv, netconf, withFerry } from "../../daemon/dev/harness.ts";
import {
  IS_ROOT,
  kernelSupports,
  run,
  type TestNetns,
  uniqueToken,
  withMasterLink,
  withNetns,
  withTempDir,
} from "../../daemon/dev/netns.ts";
import { podGuardTable } from "../../daemon/portsec/pod_guard.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = {
  ignore: !IS_ROOT || !hasNft || !(await kernelSupports("macvlan")),
  sanitizeResources: false,
  sanitizeOps: false,
};

/** Where a program is on PATH (before the shims go first). */
async function which(program: string): Promise<string> {
  return (await run("sh", "-c", `command -v ${program}`)).trim();
}

/**
 * Runs `fn` with shims for `nft` and `nsenter` first on this process's PATH, each appending its
 * command line to a log and running the real program; returns the lines logged meanwhile.
 */
async function programsStartedBy(fn: () => Promise<void>): Promise<string[]> {
  return await withTempDir(async (dir) => {
    const log = `${dir}/started`;
    await Deno.writeTextFile(log, "");
    for (const program of ["nft", "nsenter"]) {
      const real = await which(program);
      await Deno.writeTextFile(
        `${dir}/${program}`,
        `#!/bin/sh\necho "${program} $*" >> ${log}\nexec ${real} "$@"\n`,
        { mode: 0o755 },
      );
    }
    const path = Deno.env.get("PATH") ?? "";
    Deno.env.set("PATH", `${dir}:${path}`);
    try {
      await fn();
    } finally {
      Deno.env.set("PATH", path);
    }
    return (await Deno.readTextFile(log)).split("\n").filter((l) => l);
  });
}

/** The tables `nft list tables` shows in `ns`. */
async function tablesIn(ns: TestNetns): Promise<string> {
  return await run("ip", "netns", "exec", ns.name, "nft", "list", "tables");
}

Deno.test({
  name:
    "port security on macvlan: an ADD writes the pod's guard table and a DEL removes it without starting an nft or nsenter process (the shims on PATH see programs the daemon starts); a DEL after the pod's namespace is gone succeeds",
  ...opts,
  fn: () =>
    withMasterLink((master) =>
      withFerry({}, (ferry) =>
        withNetns(2, async ([a, b]) => {
          const table = podGuardTable(ferry.config.portSecurity.table, "net1");
          const stdin = netconf("1.0.0", {
            name: `mv-${uniqueToken()}`,
            attachment: {
              type: "macvlan",
              master,
              mode: "bridge",
              ipam: {
                type: "host-local",
                ranges: [[{ subnet: `172.${16 + Math.floor(Math.random() * 16)}.9.0/24` }]],
                dataDir: `${ferry.dir}/host-local`,
              },
            },
          });
          const [idA, idB] = [`c${uniqueToken()}`, `c${uniqueToken()}`];
          // The shims see what they should: a process started by the daemon's own runner.
          const seen = await programsStartedBy(async () => {
            await run("nft", "list", "tables");
          });
          assertEquals(seen, ["nft list tables"], "the PATH shims do not see programs started");
          const started = await programsStartedBy(async () => {
            const add = await ferry.shim(cniEnv("ADD", a, idA, "net1"), stdin);
            assertEquals(add.code, 0, add.stdout + add.stderr);
            assert(
              (await tablesIn(a)).includes(`table netdev ${table}`),
              `no guard table after the ADD: ${await tablesIn(a)}`,
            );
            const del = await ferry.shim(cniEnv("DEL", a, idA, "net1"), stdin);
            assertEquals(del.code, 0, del.stdout + del.stderr);
            assert(
              !(await tablesIn(a)).includes(table),
              `the guard table left at DEL: ${await tablesIn(a)}`,
            );
          });
          assertEquals(
            started.filter((l) => l.startsWith("nsenter") || /^nft .*-f/.test(l)),
            [],
            "the guard's ADD and DEL started programs",
          );
          // Gone before its DEL (the runtime removed the sandbox first): the DEL still succeeds.
          const add = await ferry.shim(cniEnv("ADD", b, idB, "net1"), stdin);
          assertEquals(add.code, 0, add.stdout + add.stderr);
          await run("ip", "netns", "del", b.name);
          const del = await ferry.shim(cniEnv("DEL", b, idB, "net1"), stdin);
          assertEquals(del.code, 0, `a DEL in a gone namespace: ${del.stdout}${del.stderr}`);
        }))
    ),
});
