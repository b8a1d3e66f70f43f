// The forged-source check's commands (cli/connectivity/forge.ts) on real network namespaces and a
// real Ferry daemon: run in a pod's namespace exactly as connectivity-test runs them in a test
// pod, the honest datagrams arrive at the target (its kernel counts them), the forged ones (a
// third pod's address as source) do not, and the node's /v1/stats counts them under ipv4 dropped.
// With the node's port security off, the same forgery arrives: the method really forges, so the
// check can fail.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { type SimPod, waitReady, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import type { NodeReport } from "../../daemon/tools/node_report.ts";
import { nodeReportArgv } from "../../cli/ferry_pods.ts";
import {
  DATAGRAMS,
  forgedArgv,
  honestArgv,
  noPorts,
  snmpArgv,
} from "../../cli/connectivity/forge.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { ferryPodName, SimExec, TEST_FERRY_NAMESPACE } from "./_sim_exec.ts";

async function inPod(pod: SimPod, argv: string[]) {
  const out = await new Deno.Command("ip", {
    args: ["netns", "exec", pod.ns.name, ...argv],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
}

async function poll<T>(read: () => Promise<T>, done: (v: T) => boolean, what: string, ms: number) {
  const deadline = Date.now() + ms;
  let last = await read();
  while (!done(last)) {
    if (Date.now() > deadline) throw new Error(`${what} (last: ${JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, 250));
    last = await read();
  }
  return last;
}

Deno.test("a datagram sent with another pod's address as source is dropped by port security and counted, an honest one arrives; with port security off the forgery arrives", async () => {
  await withSimCluster({ nodes: 1, kubeconfig: REAL_KUBECONFIG }, async (c) => {
    const [node] = c.nodes;
    const forger = await c.addPod(node, "forger");
    const target = await c.addPod(node, "target");
    const victim = await c.addPod(node, "victim");
    const exec = new SimExec(c);
    const stats = async () => {
      const r = await exec.exec(
        { namespace: TEST_FERRY_NAMESPACE, name: ferryPodName(node), container: "ferry" },
        nodeReportArgv(),
        AbortSignal.timeout(30_000),
      );
      assertEquals(r.code, 0, `node report: ${r.stderr}`);
      return (JSON.parse(r.stdout) as NodeReport).stats as {
        portSecurity?: {
          enabled: boolean;
          guardedPorts?: number;
          dropped?: Record<string, number>;
        };
      };
    };
    const arrived = async () => {
      const r = await inPod(target, snmpArgv());
      assertEquals(r.code, 0, r.stderr);
      return noPorts(r.stdout);
    };
    const start = await arrived();
    const honest = await inPod(forger, honestArgv(target.ip));
    assertEquals(honest.code, 0, `honest send: ${honest.stderr}`);
    const afterHonest = await poll(
      arrived,
      (n) => n >= start + DATAGRAMS,
      `the ${DATAGRAMS} honest datagrams did not arrive at ${target.ip}`,
      10_000,
    );
    const before = await stats();
    assertEquals(before.portSecurity?.enabled, true, JSON.stringify(before.portSecurity));
    assertEquals(before.portSecurity?.guardedPorts, 3, "the three pods' ports are guarded");
    const droppedBefore = before.portSecurity?.dropped?.ipv4 ?? 0;

    const forged = await inPod(forger, forgedArgv(target.ip, victim.ip));
    assertEquals(forged.code, 0, `forged send: ${forged.stderr}`);
    assertEquals(await arrived(), afterHonest, "a forged datagram arrived at the target");
    const addrs = await inPod(forger, ["ip", "-o", "addr", "show"]);
    assert(!addrs.stdout.includes(`${victim.ip}/32`), `the victim's address left on the forger`);
    await poll(
      async () => (await stats()).portSecurity?.dropped?.ipv4 ?? 0,
      (n) => n >= droppedBefore + DATAGRAMS,
      `the node's /v1/stats did not count ${DATAGRAMS} dropped ipv4 frames`,
      40_000,
    );

    // Port security off: the same forgery arrives (what the check would then catch).
    await c.reconfigure(node, { portSecurity: { enabled: false } });
    await waitReady(node);
    assertEquals((await stats()).portSecurity, { enabled: false }, "port security off");
    await inPod(forger, honestArgv(target.ip));
    const unguarded = await poll(
      arrived,
      (n) => n >= afterHonest + DATAGRAMS,
      "the honest datagrams after the restart",
      10_000,
    );
    const through = await inPod(forger, forgedArgv(target.ip, victim.ip));
    assertEquals(through.code, 0, `forged send: ${through.stderr}`);
    await poll(
      arrived,
      (n) => n >= unguarded + DATAGRAMS,
      "with port security off the forged datagrams should arrive (else the method forges nothing)",
      10_000,
    );
  });
});
