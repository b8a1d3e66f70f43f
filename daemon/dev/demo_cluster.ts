/**
 * The second half of `deno task demo`: a cluster of three simulated nodes (each a network
 * namespace with its own daemon process, see `cluster_sim.ts`) in `ipam.mode: kubernetes` with
 * host-gw routing and masquerade. Two pods per node are plugged through each node's shim; every
 * pod pings every pod on the other nodes; one pod per node connects to the "outside" host, which
 * reports the source address it saw (the node's: masqueraded). Then everything is unplugged and
 * checked for leftovers.
 *
 * @module
 */
import { type SimPod, withSimCluster } from "./cluster_sim.ts";
import { pingOnce, run } from "./netns.ts";
import { FERRY_ROUTE_PROTOCOL } from "../cluster/route_table.ts";
import type { DaemonStats } from "../daemon.ts";
import { STATS_PATH } from "../../lib/socket_api.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { DemoChecks } from "./demo_checks.ts";

/**
 * Runs the three-node demo, printing each check with its result; resolves to the checks (which
 * did not hold, by name).
 */
export async function demoCluster(): Promise<DemoChecks> {
  const checks = new DemoChecks();
  await withSimCluster({ nodes: 3 }, async (c) => {
    console.log(
      `\nthree simulated nodes on one underlay, ipam.mode kubernetes, host-gw routes, masquerade:`,
    );
    for (const node of c.nodes) {
      const routes = (await run(
        "ip",
        "-n",
        node.ns.name,
        "route",
        "show",
        "proto",
        String(FERRY_ROUTE_PROTOCOL),
      )).trim().split("\n").filter(Boolean);
      console.log(
        `  ${node.name}  ${node.address}  podCIDR ${node.podCIDR}  routes: ${routes.join("; ")}`,
      );
    }
    const pods: SimPod[] = [];
    for (const [i, node] of c.nodes.entries()) {
      for (const k of [0, 1]) pods.push(await c.addPod(node, `app-${i}-${k}`, 10_000));
    }
    const rows: string[][] = [];
    const judged: [string, boolean, string][] = [];
    let port = 9000;
    for (const pod of pods) {
      const remote = pods.filter((p) => p.node !== pod.node);
      const pings = await Promise.all(remote.map((p) => pingOnce(p.ip, pod.ns)));
      const listener = c.acceptOnce(c.outside, c.internet, ++port);
      await run(
        "ip",
        "netns",
        "exec",
        pod.ns.name,
        "bash",
        "-c",
        `echo hi > /dev/tcp/${c.internet}/${port}`,
      );
      const seen = await listener.source;
      listener.close();
      const reached = pings.every(Boolean);
      const masqueraded = seen === pod.node.address;
      judged.push(
        [
          `${pod.name} reaches the pods of the other nodes`,
          reached,
          `${pings.filter((p) => !p).length} of ${pings.length} did not answer`,
        ],
        [
          `${pod.name} reaches ${c.internet} from its node's address (${pod.node.address})`,
          masqueraded,
          `seen from ${seen}`,
        ],
      );
      rows.push([
        pod.name,
        pod.node.name,
        pod.ip,
        reached ? `ok (${pings.length})` : `FAILED ${pings.filter((p) => !p).length}`,
        `${seen}${masqueraded ? " (its node)" : " (NOT its node)"}`,
      ]);
    }
    const head = ["pod", "node", "ipv4", "pod→other nodes' pods", `→ ${c.internet} seen from`];
    const width = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
    const line = (cells: string[]) => cells.map((x, i) => x.padEnd(width[i])).join("  ");
    console.log(
      "\n" + [line(head), line(width.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n") +
        "\n",
    );
    for (const [what, held, seen] of judged) checks.check(what, held, seen);
    for (const pod of pods) {
      const del = await c.removePod(pod);
      checks.check(`DEL of ${pod.name} succeeds`, del.code === 0, `exit code ${del.code}`);
    }
    // A DEL is answered once the kernel is removing the pod's link; its addresses are released
    // when the kernel confirms, milliseconds later: count once no node has a DEL finishing.
    for (const node of c.nodes) {
      for (let i = 0; i < 100 && (await daemonStats(node.socket)).finishingDels > 0; i++) {
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    let left = 0;
    for (const node of c.nodes) {
      const state = node.socket.replace("/run/ferry.sock", "/state");
      for await (const pool of Deno.readDir(`${state}/ipam`)) {
        for await (const f of Deno.readDir(`${state}/ipam/${pool.name}`)) {
          if (!f.name.startsWith(".")) left++;
        }
      }
    }
    checks.check(
      "no address is still allocated on the three nodes",
      left === 0,
      `${left} still allocated`,
    );
  });
  return checks;
}

async function daemonStats(socket: string): Promise<DaemonStats> {
  const res = await unixRequest(socket, "GET", STATS_PATH, undefined, AbortSignal.timeout(5000));
  return JSON.parse(res.body);
}
