// The choice of the macvlan/ipvlan guard's writer, in real namespaces: libnftables in-process
// with the daemon's libc, `nsenter` + `nft` processes without it (said once in the log). Needs
// root and nft.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { resolveConfig } from "../../../daemon/config/config.ts";
import { Libc } from "../../../daemon/net/netlink/libc.ts";
import { podGuardSide } from "../../../daemon/wiring/portsec_side.ts";
import { podGuardScript, podGuardTable } from "../../../daemon/portsec/pod_guard.ts";
import { ChildSet } from "../../../daemon/runtime/child_set.ts";
import { IS_ROOT, run, uniqueToken, withNetns } from "../../../daemon/dev/netns.ts";
import { lines, withCapturedLogs } from "../../integration/_logs.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
// The in-process writer closes its socket on a worker thread after the write: not awaited here.
const opts = { ignore: !IS_ROOT || !hasNft, sanitizeOps: false };

/**
 * Writes a guard for `net1` through `podGuardSide` (with `libc` or not) and removes it, also from
 * a namespace that is gone: the table as listed, what is left, the log lines said.
 */
async function writeGuard(
  libc: Libc | undefined,
): Promise<{ said: string[]; listed: string; left: string }> {
  return await withCapturedLogs((records) =>
    withNetns(1, async ([ns]) => {
      await run("ip", "-n", ns.name, "link", "add", "net1", "type", "veth", "peer", "name", "p1");
      const config = resolveConfig({ portSecurity: { table: `fps${uniqueToken()}` } });
      const children = new ChildSet();
      try {
        const guard = podGuardSide({
          config,
          libc,
          logger: getLogger(["ferry", "portsec"]),
          children,
        });
        const table = config.portSecurity.table;
        await guard.applyIn(ns.path, podGuardScript(table, { ifname: "net1", ips: ["10.9.0.5"] }));
        const listed = await run(
          "ip",
          "netns",
          "exec",
          ns.name,
          "nft",
          "list",
          "table",
          "netdev",
          podGuardTable(table, "net1"),
        );
        await guard.removeIn(ns.path, podGuardTable(table, "net1"));
        await guard.removeIn(`/var/run/netns/fyt-gone-${uniqueToken()}`, "any");
        const left = await run("ip", "netns", "exec", ns.name, "nft", "list", "tables");
        return { said: lines(records), listed, left };
      } finally {
        children.close();
      }
    })
  );
}

Deno.test({
  name:
    "with the daemon's libc the macvlan guard is written and removed in-process and nothing is said; without it, by nft processes, and the log says so once; either removes from a gone namespace without failing",
  ...opts,
  fn: async () => {
    const inProcess = await writeGuard(Libc.open());
    assert(inProcess.listed.includes(`hook egress device "net1"`), inProcess.listed);
    assertEquals(inProcess.said, []);
    assertEquals(inProcess.left, "", "the in-process removal left the table");
    const processes = await writeGuard(undefined);
    assert(processes.listed.includes(`hook egress device "net1"`), processes.listed);
    assertEquals(processes.left, "", "the processes' removal left the table");
    assertEquals(processes.said.length, 1, processes.said.join("\n"));
    assert(
      /WARN.*in-process netlink is off.*written by nsenter and nft processes/i.test(
        processes.said[0],
      ),
      processes.said[0],
    );
  },
});
