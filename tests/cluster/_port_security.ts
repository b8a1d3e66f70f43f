/**
 * Port security (#43) on the real cluster: a pod on a node forges ARP and IPv4 as another pod of
 * the same bridge; a third pod keeps the victim's MAC for its address, the victim keeps its
 * traffic, the node's `ferry_spoofed_packets` rises, and the pods' own traffic flows.
 *
 * @module
 */
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { exec, kubectl, nodeexec, NODES, until } from "./_realcluster.ts";
import { apply, askHostname, NS, reaches, ready, server } from "./_suite.ts";

/** busybox (its `arping`, `ip`, `ping`). */
const BUSYBOX = "registry.k8s.io/e2e-test-images/busybox:1.29-4";

/**
 * The forger: busybox with `NET_ADMIN` in its own namespace (busybox's `arping -s` binds to the
 * address it claims, so the pod first puts the victim's address on its own interface; a pod can
 * do anything inside its namespace, and port security must hold all the same).
 */
function forger(name: string, node: string) {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, labels: { app: name } },
    spec: {
      nodeName: node,
      terminationGracePeriodSeconds: 1,
      containers: [{
        name: "c",
        image: BUSYBOX,
        args: ["sleep", "3600"],
        securityContext: { capabilities: { add: ["NET_ADMIN"] } },
      }],
    },
  };
}

/** `ferry_spoofed_packets` on `node`, scraped from its daemon, summed by kind. */
async function spoofed(node: string): Promise<Record<string, number>> {
  const metrics = (await nodeexec(node, "curl", "-s", "-m", "5", "http://127.0.0.1:9667/metrics"))
    .out;
  const byKind: Record<string, number> = {};
  for (const m of metrics.matchAll(/^ferry_spoofed_packets\{[^}]*kind="(\w+)"[^}]*\} (\d+)$/gm)) {
    byKind[m[1]] = (byKind[m[1]] ?? 0) + Number(m[2]);
  }
  return byKind;
}

/** Runs a shell command in a pod; its output, or a failure naming what it ran. */
async function inPod(pod: string, cmd: string): Promise<string> {
  const r = await exec("kubectl", ["exec", "-n", NS, pod, "--", "sh", "-c", cmd]);
  assertEquals(r.code, 0, `in ${pod}: ${cmd}\nexit ${r.code}: ${r.out}${r.err}`);
  return r.out;
}

/** `pod`'s MAC for `ip` in its neighbour table ("" when it has none). */
async function neighbour(pod: string, ip: string): Promise<string> {
  const out = await inPod(pod, `ip neigh show ${ip}`);
  return /lladdr (\S+)/.exec(out)?.[1] ?? "";
}

/**
 * A forged gratuitous ARP and IPv4 packets from another pod's address are dropped and counted;
 * the third pod's neighbour entry and the victim's traffic stay; the pods' own traffic flows.
 */
export async function forgeriesDropped(): Promise<void> {
  const node = NODES[0];
  await apply(server("ps-victim", node));
  await apply(server("ps-third", node));
  await apply(forger("ps-forger", node));
  const [victim] = await ready("app=ps-victim", 1);
  const [third] = await ready("app=ps-third", 1);
  await ready("app=ps-forger", 1);
  const victimMac = /link\/ether (\S+)/.exec(await inPod("ps-victim", "ip link show eth0"))![1];
  const thirdMac = /link\/ether (\S+)/.exec(await inPod("ps-third", "ip link show eth0"))![1];
  // The third pod talks to the victim: it has a neighbour entry for the victim's address.
  await reaches("ps-third", victim.ip, (t) => t === "ps-victim");
  assertEquals(await neighbour("ps-third", victim.ip), victimMac, "the third pod's entry before");
  const before = await spoofed(node);

  // ARP: "victim's address is at the forger's MAC", to the third pod. IPv4: pings from the
  // victim's address, sent straight to the third pod's MAC (a static entry: no ARP needed).
  await inPod(
    "ps-forger",
    `ip addr add ${victim.ip}/32 dev eth0 && ` +
      `arping -U -c 2 -s ${victim.ip} -I eth0 ${third.ip}; ` +
      `arp -i eth0 -s ${third.ip} ${thirdMac} && ` +
      `ping -c 3 -W 1 -I ${victim.ip} ${third.ip}; ` +
      `arp -i eth0 -d ${third.ip}; ip addr del ${victim.ip}/32 dev eth0`,
  );
  // The counters are read every 10 s.
  let after = before;
  const rose = (kind: string, by: number) => (after[kind] ?? 0) >= (before[kind] ?? 0) + by;
  await until(
    async () => {
      after = await spoofed(node);
      return rose("arp", 2) && rose("ipv4", 3);
    },
    `${node}'s ferry_spoofed_packets to count the 2 forged ARP and 3 forged IPv4 frames ` +
      `(before ${JSON.stringify(before)}, last ${JSON.stringify(after)})`,
    45_000,
  );
  console.log(
    `ferry_spoofed_packets on ${node}: ${JSON.stringify(before)} → ${JSON.stringify(after)}`,
  );
  const entry = await neighbour("ps-third", victim.ip);
  assert(
    entry === victimMac || entry === "",
    `the third pod's entry for ${victim.ip} is ${entry}, not the victim's ${victimMac}: the forged ARP got through`,
  );
  // The victim still gets its traffic, and the forger's own traffic flows.
  await reaches("ps-third", victim.ip, (t) => t === "ps-victim");
  assertEquals(await neighbour("ps-third", victim.ip), victimMac, "the third pod's entry after");
  await inPod("ps-forger", `ping -c 2 -W 2 ${third.ip}`);
  const other = await askHostname("ps-victim", third.ip);
  assertEquals(other.out.trim(), "ps-third", `the victim's own requests: ${other.err}`);
  await kubectl("delete", "pod", "-n", NS, "ps-victim", "ps-third", "ps-forger", "--wait=true");
}
