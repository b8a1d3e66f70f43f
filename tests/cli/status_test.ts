import { assert, assertEquals, assertMatch } from "deno-std/assert/mod.js";
import { type SimCluster, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { CONFIGMAPS, EVENTS, NETWORK_POLICIES } from "../../daemon/k8s/resources.ts";
import { ferry as run } from "./_cli_deps.ts";
import type { ClusterStatus } from "../../cli/status.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import {
  createFerryPods,
  ferryPodName,
  removeFerryPods,
  scopeFlags,
  SimExec,
  TEST_FERRY_NAMESPACE,
} from "./_sim_exec.ts";

const NOW = Date.parse("2026-01-01T12:00:00Z");

const ferry = (args: string[], exec: SimExec) => run(args, exec, { now: () => NOW });

Deno.test("status reports every node healthy, then names the node whose daemon was stopped", async () => {
  await withSimCluster({ nodes: 2, kubeconfig: REAL_KUBECONFIG }, async (c) => {
    const id = crypto.randomUUID().slice(0, 8);
    try {
      await body(c, id);
    } finally {
      await removeFerryPods(c);
      await c.client.delete(CONFIGMAPS, TEST_FERRY_NAMESPACE, "ferry-config").catch(() => {});
      await c.client.delete(NETWORK_POLICIES, "default", `isolate-${id}`).catch(() => {});
      for (const e of [`ferry-warning-${id}`, `kubelet-warning-${id}`]) {
        await c.client.delete(EVENTS, "default", e).catch(() => {});
      }
    }
  });
});

async function body(c: SimCluster, id: string) {
  {
    await createFerryPods(c, "2026-01-01T09:00:00Z");
    await c.client.create(CONFIGMAPS, {
      metadata: { name: "ferry-config", namespace: TEST_FERRY_NAMESPACE },
      data: { "config.json": JSON.stringify({ routing: { mode: "host-gw" } }) },
    });
    await c.addPod(c.nodes[0], "web-0", 0, { labels: { app: `web-${id}` } });
    // A Warning Ferry reported on a tenant pod of node 1, and one about something else.
    const event = (name: string, component: string) => ({
      metadata: { name: `${name}-${id}`, namespace: "default" },
      involvedObject: { kind: "Pod", namespace: "default", name: "web-0" },
      type: "Warning",
      reason: component === "ferry" ? "FailedNetworkSetup" : "BackOff",
      message: `${component} says no`,
      count: 2,
      source: { component, host: c.nodes[0].name },
    });
    await c.client.create(EVENTS, event("ferry-warning", "ferry"));
    await c.client.create(EVENTS, event("kubelet-warning", "kubelet"));
    const exec = new SimExec(c);
    const kube = ["--kubeconfig", c.kubeconfig, ...scopeFlags(c)];
    const [n1, n2] = c.nodes;

    // The daemons publish their routes asynchronously: poll (bounded) until both are healthy.
    let healthy = await ferry(["status", ...kube], exec);
    for (let i = 0; i < 50 && healthy.code !== 0; i++) {
      await new Promise((r) => setTimeout(r, 200));
      healthy = await ferry(["status", ...kube], exec);
    }
    assertEquals(healthy.code, 0, `status of a healthy cluster:\n${healthy.out}${healthy.err}`);
    assertMatch(healthy.out, /2 nodes, 2 healthy\n$/);
    for (const n of c.nodes) {
      assertMatch(healthy.out, new RegExp(`^${n.name}  ok$`, "m"), `${n.name} ok:\n${healthy.out}`);
      assert(
        healthy.out.includes(`${ferryPodName(n)}  ready  image ferry:test  restarts 1  up 3h00m`),
        `pod line of ${n.name}:\n${healthy.out}`,
      );
    }
    assertMatch(healthy.out, /routes +1\/1 to other nodes' pods in place \(routing host-gw\)/);
    assertMatch(healthy.out, /kubernetes +1 interfaces plugged/, "node 1 has web-0 plugged");
    assertMatch(
      healthy.out,
      /warning +Pod default\/web-0 FailedNetworkSetup ×2: ferry says no\n/,
      "Ferry's Warning Event under node 1",
    );
    assert(!healthy.out.includes("kubelet says no"), "only Ferry's Warning Events");
    // Port security per node: node 1 guards web-0's port, node 2 none.
    assertMatch(healthy.out, /^ {2}portsec +on, 1 ports guarded, none dropped$/m, healthy.out);
    assertMatch(healthy.out, /^ {2}portsec +on, 0 ports guarded, none dropped$/m, healthy.out);
    assertMatch(healthy.out, new RegExp(`${c.nodes[0].podCIDR.replace(/\./g, "\\.")} +\\[#`));
    assert(
      exec.calls.every((call) => call.startsWith(`${TEST_FERRY_NAMESPACE}/ferry-`)),
      `exec only into Ferry pods: ${exec.calls.join("\n")}`,
    );

    // A policy isolating web-0: node 1 writes its table, and status says when.
    await c.client.create(NETWORK_POLICIES, {
      metadata: { name: `isolate-${id}`, namespace: "default" },
      spec: { podSelector: { matchLabels: { app: `web-${id}` } }, policyTypes: ["Ingress"] },
    });
    const real = (args: string[]) => run(args, exec, { now: () => Date.now() });
    let isolated = await real(["status", "-o", "json", ...kube]);
    const policyOf = (r: { out: string }) =>
      (JSON.parse(r.out) as ClusterStatus).nodes.find((n) => n.node === n1.name)?.policy;
    for (let i = 0; i < 100 && policyOf(isolated)?.isolatedPods !== 1; i++) {
      await new Promise((r) => setTimeout(r, 200));
      isolated = await real(["status", "-o", "json", ...kube]);
    }
    const policy = policyOf(isolated);
    assertEquals(policy?.isolatedPods, 1, `node 1's policy table: ${isolated.out}`);
    assert(
      policy?.lastWriteSecondsAgo !== undefined && policy.lastWriteSecondsAgo < 600,
      `when node 1 last wrote its table: ${JSON.stringify(policy)}`,
    );
    assertEquals(policy?.lastFailureSecondsAgo, undefined, "no write failed");
    const text = await real(["status", ...kube]);
    assertMatch(
      text.out,
      /policy +\d+ policies, 1 isolated pods, \d+ table writes, 0 failed, last write \d+[smh]\S* ago\n/,
      text.out,
    );

    await c.killDaemon(n2);
    const broken = await ferry(["status", ...kube], exec);
    assertEquals(broken.code, 1, `status with ${n2.name}'s daemon stopped:\n${broken.out}`);
    assertMatch(broken.out, new RegExp(`^${n2.name}  UNHEALTHY$`, "m"));
    assertMatch(broken.out, new RegExp(`^${n1.name}  ok$`, "m"));
    assertMatch(
      broken.out,
      new RegExp(
        `2 nodes, 1 healthy, 1 unhealthy: ${n2.name} \\(cannot read the daemon's /v1/stats: .*nothing is listening`,
      ),
    );
    assertEquals(broken.err, `ferry: unhealthy nodes: ${n2.name}\n`);

    const json = await ferry(["status", "-o", "json", ...kube], exec);
    assertEquals(json.code, 1);
    const s = JSON.parse(json.out) as ClusterStatus;
    assertEquals(s.unhealthy, [n2.name]);
    assertEquals(s.routing, "host-gw");
    assertEquals(s.nodes.find((n) => n.node === n1.name)?.podsPlugged, 1);
    assertEquals(s.nodes.find((n) => n.node === n1.name)?.portSecurity, {
      enabled: true,
      guardedPorts: 1,
      dropped: {},
    });
  }
}
