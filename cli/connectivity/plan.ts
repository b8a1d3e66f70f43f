/**
 * What `kubectl ferry connectivity-test` checks, planned from the test pods it placed: pod↔pod on
 * one node and across nodes, node→pod, pod→node, pod→ClusterIP and NodePort Service, a forged
 * source dropped (IPv4), a NetworkPolicy deny-all then an allow, and an outside address, for each
 * address family the test pods got. Pure: plain data in, the ordered list of checks out.
 *
 * @module
 */

import { FORGE_PORT } from "./forge.ts";

/** The tests, by the name `--test` takes, with what each proves. */
export const TESTS = {
  "pod-pod-same-node": "pod→pod on one node",
  "pod-pod-cross-node": "pod→pod across nodes",
  "node-pod": "node→pod",
  "pod-node": "pod→node",
  "pod-clusterip": "pod→ClusterIP Service",
  "pod-nodeport": "pod→NodePort Service",
  "forged-source": "forged source dropped",
  "policy-deny": "NetworkPolicy deny-all enforced",
  "policy-allow": "NetworkPolicy allow enforced",
  "external": "pod→outside address",
  "network": "pod→pod on the --network NAD",
} as const;

/** A test's name. */
export type TestName = keyof typeof TESTS;

/** The port the test pods serve on (HTTP, `agnhost serve-hostname`). */
export const POD_PORT = 8080;
/** The port the hostNetwork test pods serve on. */
export const HOST_PORT = 19080;

/** A test pod, once running. */
export interface TestPod {
  /** Its name. */
  name: string;
  /** Its node. */
  node: string;
  /** Whether it is on the node's network. */
  hostNetwork: boolean;
  /** Its addresses (the node's, for a hostNetwork pod). */
  ips: string[];
  /** Its addresses on the `--network` NetworkAttachmentDefinition, when it has one. */
  networkIps?: string[];
}

/** Where a check connects to. */
export interface Target {
  /** Address. */
  address: string;
  /** TCP port. */
  port: number;
  /** The node it is on, when it is on one. */
  node?: string;
  /** What it is, for the reader: a pod's name, `service`, `node`, `outside`. */
  label: string;
}

/** One check. */
export interface Check {
  /** The test it belongs to. */
  test: TestName;
  /** The pod it runs in. */
  from: TestPod;
  /** Where it connects. */
  to: Target;
  /** 4 or 6. */
  family: 4 | 6;
  /** Whether the connection must succeed or be refused by policy. */
  expect: "connect" | "blocked";
  /** The nodes a failure points at. */
  nodes: string[];
  /** `forged-source`: the other test pod whose address the datagrams claim as their source. */
  spoofAs?: { address: string; label: string };
}

/** What the plan is made from. */
export interface PlanInput {
  /** Every test pod, running. */
  pods: TestPod[];
  /** The ClusterIP Service's addresses, and its port. */
  clusterIPs: string[];
  /** The NodePort. */
  nodePort?: number;
  /** The tests to run (all when empty). */
  tests: TestName[];
  /** Outside addresses `IP:PORT` given with `--external`. */
  external: string[];
  /** The NAD `NS/NAME` given with `--network`. */
  network?: string;
}

const familyOf = (ip: string): 4 | 6 => (ip.includes(":") ? 6 : 4);
const byFamily = (ips: string[], f: 4 | 6) => ips.find((ip) => familyOf(ip) === f);

/** `IP:PORT` or `[IPv6]:PORT` to its parts. */
export function parseHostPort(text: string): { address: string; port: number } {
  const m = /^\[([0-9a-fA-F:.]+)\]:(\d+)$/.exec(text) ?? /^([0-9.]+):(\d+)$/.exec(text);
  if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535) {
    throw new Error(`--external ${text}: IP:PORT or [IPv6]:PORT`);
  }
  return { address: m[1], port: Number(m[2]) };
}

/**
 * The checks, in the order they run (the policy checks last: they change what is allowed). Each
 * node's first pod-network pod (`…-a`) is the client; a second (`…-b`) on the same node is the
 * server of the same-node check and of the policy checks; nodes form a ring for the cross-node
 * checks (node i → node i+1), so every node is a source and a destination once.
 *
 * @example
 * ```ts
 * const checks = planChecks({ pods, clusterIPs: ["10.96.0.10"], nodePort: 30080, tests: [], external: [] });
 * ```
 */
export function planChecks(p: PlanInput): Check[] {
  const want = (t: TestName) => !p.tests.length || p.tests.includes(t);
  const nodes = [...new Set(p.pods.map((x) => x.node))].sort();
  const pod = (node: string, suffix: string) =>
    p.pods.find((x) => x.node === node && x.name.endsWith(`-${suffix}`));
  const families = ([4, 6] as const).filter((f) =>
    p.pods.some((x) => byFamily([...x.ips, ...(x.networkIps ?? [])], f))
  );
  const checks: Check[] = [];
  const add = (
    test: TestName,
    from: TestPod | undefined,
    to: Target | undefined,
    family: 4 | 6,
  ) => {
    if (!from || !to || !want(test)) return;
    const nodesOf = [...new Set([from.node, ...(to.node ? [to.node] : [])])];
    const expect = test === "policy-deny" ? "blocked" : "connect";
    checks.push({ test, from, to, family, expect, nodes: nodesOf });
  };
  const at = (x: TestPod | undefined, f: 4 | 6, port: number): Target | undefined => {
    const address = x && byFamily(x.ips, f);
    return x && address ? { address, port, node: x.node, label: x.name } : undefined;
  };
  const policy: [TestPod | undefined, Target | undefined, 4 | 6][] = [];
  for (const f of families) {
    nodes.forEach((node, i) => {
      const next = nodes[(i + 1) % nodes.length];
      const a = pod(node, "a"), b = pod(node, "b"), host = pod(node, "host");
      add("pod-pod-same-node", a, at(b, f, POD_PORT), f);
      if (next !== node) add("pod-pod-cross-node", a, at(pod(next, "a"), f, POD_PORT), f);
      add("node-pod", host, at(pod(next, "a"), f, POD_PORT), f);
      add("pod-node", a, at(pod(next, "host"), f, HOST_PORT), f);
      const clusterIP = byFamily(p.clusterIPs, f);
      if (clusterIP) {
        add("pod-clusterip", a, { address: clusterIP, port: POD_PORT, label: "service" }, f);
      }
      const nodeAddress = byFamily(pod(next, "host")?.ips ?? [], f);
      if (p.nodePort && nodeAddress) {
        add("pod-nodeport", a, {
          address: nodeAddress,
          port: p.nodePort,
          node: next,
          label: `${next} NodePort`,
        }, f);
      }
      if (p.network) {
        for (const to of [b, pod(next, "a")]) {
          const address = byFamily(to?.networkIps ?? [], f);
          if (to && to !== a && address) {
            add("network", a, {
              address,
              port: POD_PORT,
              node: to.node,
              label: `${to.name} on ${p.network}`,
            }, f);
          }
        }
      }
      for (const e of p.external.map(parseHostPort).filter((e) => familyOf(e.address) === f)) {
        add("external", a, { ...e, label: "outside" }, f);
      }
      policy.push([a, at(pod(next, "b"), f, POD_PORT), f]);
    });
  }
  // Forged source (IPv4): node i's `-a` sends to its `-b` as the next node's `-a` (as its own
  // node's hostNetwork pod on a one-node cluster).
  if (families.includes(4) && want("forged-source")) {
    nodes.forEach((node, i) => {
      const next = nodes[(i + 1) % nodes.length];
      const a = pod(node, "a"), b = pod(node, "b");
      const victim = next !== node ? pod(next, "a") : pod(node, "host");
      const address = victim && byFamily(victim.ips, 4);
      const to = at(b, 4, FORGE_PORT);
      if (!a || !to || !victim || !address) return;
      checks.push({
        test: "forged-source",
        from: a,
        to,
        family: 4,
        expect: "blocked",
        nodes: [node],
        spoofAs: { address, label: victim.name },
      });
    });
  }
  for (const [from, to, f] of policy) add("policy-deny", from, to, f);
  for (const [from, to, f] of policy) add("policy-allow", from, to, f);
  return checks;
}
