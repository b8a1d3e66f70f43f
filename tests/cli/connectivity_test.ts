// kubectl ferry connectivity-test on the API stand-in. The stand-in has no kubelet and no network:
// the test plays the kubelet (test pods get addresses and run, Services get a ClusterIP and a
// NodePort) and answers each `agnhost connect` from a model of the network, where a broken node
// reaches nothing and is reached by nothing, and the namespace's NetworkPolicies decide what
// reaches the `-b` pods. What this proves: the objects made, the plan, the progress, the summary,
// the exit status, naming the broken node, and the clean-up (also on Ctrl-C). What only a real
// cluster shows (packets, enforcement time) is in tests/cluster/.
import { assert, assertEquals, assertMatch } from "deno-std/assert/mod.js";
import type { Namespace, Node, Pod, Service } from "kubernetes-types/core/v1.d.ts";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import { KubeStandin } from "../../daemon/dev/kube_standin/server.ts";
import { withTempDir } from "../../daemon/dev/netns.ts";
import { KubeClient } from "../../daemon/k8s/client.ts";
import { loadKubeconfig } from "../../daemon/k8s/kubeconfig.ts";
import { NAMESPACES, NETWORK_POLICIES, NODES, PODS, SERVICES } from "../../daemon/k8s/resources.ts";
import { HttpTransport } from "../../daemon/k8s/transport.ts";
import type { ExecResult, PodExec, PodRef } from "../../cli/pod_exec.ts";
import { ferry } from "./_cli_deps.ts";

const NODES_N = 3;
const nodeName = (i: number) => `ct-node${i + 1}`;
const nodeIp = (i: number) => `192.0.2.${i + 10}`;

/** The network model: pods by address, broken nodes, and the namespace's policies. */
class ModelExec implements PodExec {
  readonly broken = new Set<string>();
  /** Nodes broken for their next N connection attempts, then repaired (as Ferry repairs). */
  readonly brokenFor = new Map<string, number>();
  /**
   * Service connections refused before the Services are served (kube-proxy has not programmed
   * them yet): the next N, or every one (`Infinity`, a Service path that never works).
   */
  servicesUnservedFor = 0;
  constructor(readonly client: KubeClient) {}

  /** The run's namespace, as the first check found it. */
  readonly namespaces: Namespace[] = [];
  /** Port security per node: on (the default), off, or on but letting forgeries through. */
  readonly portSecurity = new Map<string, "off" | "leaky" | "uncounted">();
  /** Forged frames each node dropped (its `/v1/stats` portSecurity.dropped.ipv4). */
  readonly dropped = new Map<string, number>();
  /** UDP datagrams each test pod's kernel got on a closed port (`/proc/net/snmp` NoPorts). */
  readonly noPorts = new Map<string, number>();

  /** The forged-source check's commands: node report, UDP counters, honest and forged sends. */
  async #forgeCheck(pod: PodRef, argv: string[]): Promise<ExecResult | undefined> {
    if (pod.container === "ferry") {
      const node = /^ferry-(.*)$/.exec(pod.name)![1];
      const mode = this.portSecurity.get(node);
      const portSecurity = mode === "off"
        ? { enabled: false }
        : { enabled: true, guardedPorts: 2, dropped: { ipv4: this.dropped.get(node) ?? 0 } };
      return {
        code: 0,
        stdout: JSON.stringify({ stats: { portSecurity }, attachments: 2 }),
        stderr: "",
      };
    }
    if (argv[0] === "cat" && argv[1] === "/proc/net/snmp") {
      const n = this.noPorts.get(pod.name) ?? 0;
      return { code: 0, stdout: `Udp: InDatagrams NoPorts InErrors\nUdp: 0 ${n} 0\n`, stderr: "" };
    }
    if (argv[0] !== "sh") return undefined;
    const m = /nc -u -w 1 (?:-s (\S+) )?(\S+) 19081/.exec(argv[2])!;
    const pods = (await this.client.listAll<Pod>(PODS, { namespace: pod.namespace })).items;
    const from = pods.find((p) => p.metadata?.name === pod.name)!;
    const to = pods.find((p) => p.status?.podIP === m[2])!;
    const node = from.spec!.nodeName!;
    if (this.broken.has(node) || this.broken.has(to.spec!.nodeName!)) {
      return { code: 0, stdout: "", stderr: "" };
    }
    const mode = this.portSecurity.get(node);
    if (m[1] && mode !== "leaky") {
      if (mode !== "uncounted") this.dropped.set(node, (this.dropped.get(node) ?? 0) + 3);
    } else {
      const name = to.metadata!.name!;
      this.noPorts.set(name, (this.noPorts.get(name) ?? 0) + 3);
    }
    return { code: 0, stdout: "", stderr: "" };
  }

  async exec(pod: PodRef, argv: string[]): Promise<ExecResult> {
    const forging = await this.#forgeCheck(pod, argv);
    if (forging) return forging;
    if (!this.namespaces.length) {
      this.namespaces.push(await this.client.get<Namespace>(NAMESPACES, undefined, pod.namespace));
    }
    const fail = (why: string) => ({ code: 1, stdout: "", stderr: why });
    if (argv[0] !== "/agnhost" || argv[1] !== "connect") return fail(`unexpected ${argv}`);
    const target = argv[2].replace(/^\[|\]?:\d+$/g, "");
    const pods = (await this.client.listAll<Pod>(PODS, { namespace: pod.namespace })).items;
    const from = pods.find((p) => p.metadata?.name === pod.name)!;
    const to = pods.find((p) => p.status?.podIP === target && !p.spec?.hostNetwork) ??
      pods.find((p) => p.status?.podIP === target) ??
      pods.find((p) =>
        p.metadata?.annotations?.["k8s.v1.cni.cncf.io/network-status"]?.includes(`"${target}"`)
      );
    const service = target.startsWith("10.96.") || argv[2].endsWith(":30080");
    if (service && this.servicesUnservedFor > 0) {
      this.servicesUnservedFor--;
      return fail("dial tcp: connect: connection refused");
    }
    for (const node of [from.spec!.nodeName!, to?.spec?.nodeName].filter((n) => n)) {
      const left = this.brokenFor.get(node!) ?? 0;
      if (left > 0) {
        this.brokenFor.set(node!, left - 1);
        return fail("dial tcp: i/o timeout");
      }
    }
    if (this.broken.has(from.spec!.nodeName!)) return fail("dial tcp: i/o timeout");
    if (to && this.broken.has(to.spec!.nodeName!)) return fail("dial tcp: i/o timeout");
    if (!to && !service) return fail("dial tcp: no route to host");
    if (to?.metadata?.labels?.role === "b") {
      const policies = (await this.client.listAll<NetworkPolicy>(NETWORK_POLICIES, {
        namespace: pod.namespace,
      })).items.map((p) => p.metadata?.name);
      const fromA = from.metadata?.labels?.role === "a";
      if (policies.includes("ct-deny-all") && !(fromA && policies.includes("ct-allow-clients"))) {
        return fail("dial tcp: i/o timeout");
      }
    }
    return { code: 0, stdout: "", stderr: "" };
  }

  logs(): Promise<ExecResult> {
    return Promise.resolve({ code: 1, stdout: "", stderr: "no logs" });
  }
}

/** Plays the kubelet and the Service controllers until `stop` aborts. */
async function kubelet(client: KubeClient, stop: AbortSignal): Promise<void> {
  let next = 2;
  while (!stop.aborted) {
    for (const p of (await client.listAll<Pod>(PODS, {})).items) {
      if (
        p.status?.phase === "Running" || !p.metadata?.namespace?.startsWith("ferry-connectivity-")
      ) {
        continue;
      }
      const i = Number(/ct-node(\d+)/.exec(p.spec!.nodeName!)![1]) - 1;
      const ip = p.spec?.hostNetwork ? nodeIp(i) : `10.244.${i}.${next++}`;
      const nad = p.metadata.annotations?.["k8s.v1.cni.cncf.io/networks"];
      const status = [
        { name: "ferry", default: true, ips: [ip] },
        ...(nad ? [{ name: nad, ips: [`10.99.${i}.${next++}`] }] : []),
      ];
      await client.patchMerge(PODS, p.metadata.namespace, p.metadata.name!, {
        metadata: { annotations: { "k8s.v1.cni.cncf.io/network-status": JSON.stringify(status) } },
      });
      await client.patchMerge(PODS, p.metadata.namespace, p.metadata.name!, {
        status: {
          phase: "Running",
          podIP: ip,
          podIPs: [{ ip }],
          conditions: [{ type: "Ready", status: "True" }],
        },
      });
    }
    for (const s of (await client.listAll<Service>(SERVICES, {})).items) {
      if (s.spec?.clusterIP) continue;
      const nodePort = s.spec?.type === "NodePort" ? 30080 : undefined;
      await client.patchMerge(SERVICES, s.metadata!.namespace, s.metadata!.name!, {
        spec: {
          clusterIP: `10.96.0.${next}`,
          clusterIPs: [`10.96.0.${next++}`],
          ports: [{ ...s.spec!.ports![0], nodePort }],
        },
      });
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function withCluster(
  fn: (kubeconfig: string, client: KubeClient, exec: ModelExec) => Promise<void>,
  options: { kubelet?: boolean } = {},
) {
  const api = await KubeStandin.start();
  const stop = new AbortController();
  let running: Promise<void> | undefined;
  try {
    await withTempDir(async (dir) => {
      const kubeconfig = `${dir}/kubeconfig`;
      await Deno.writeTextFile(kubeconfig, api.kubeconfig());
      const transport = new HttpTransport(await loadKubeconfig(kubeconfig));
      const client = new KubeClient(transport);
      try {
        await client.create<Namespace>(NAMESPACES, { metadata: { name: "kube-system" } })
          .catch(() => {});
        for (let i = 0; i < NODES_N; i++) {
          await client.create<Node>(NODES, {
            metadata: { name: nodeName(i) },
            status: { addresses: [{ type: "InternalIP", address: nodeIp(i) }] },
          });
          // Its Ferry pod (the forged-source check reads the node's port security through it).
          await client.create<Pod>(PODS, {
            metadata: {
              name: `ferry-${nodeName(i)}`,
              namespace: "kube-system",
              labels: { "app.kubernetes.io/name": "ferry" },
            },
            spec: { nodeName: nodeName(i), containers: [{ name: "ferry", image: "ferry" }] },
          });
        }
        if (options.kubelet !== false) running = kubelet(client, stop.signal);
        await fn(kubeconfig, client, new ModelExec(client));
      } finally {
        stop.abort();
        await running;
        transport.close();
      }
    });
  } finally {
    await api.stop();
  }
}

const testNamespaces = async (client: KubeClient) =>
  (await client.listAll<Namespace>(NAMESPACES, {})).items.map((n) => n.metadata!.name!)
    .filter((n) => n.startsWith("ferry-connectivity-"));

Deno.test("connectivity-test passes whole on a healthy cluster, with progress and a summary, and removes its namespace", () =>
  withCluster(async (kubeconfig, client, exec) => {
    const r = await ferry(["connectivity-test", "--kubeconfig", kubeconfig], exec);
    assertEquals(r.code, 0, `${r.out}\n${r.err}`);
    // same node, across, node→pod, pod→node, ClusterIP, NodePort, forged source, deny, allow
    const checks = NODES_N * 9;
    assertMatch(r.out, new RegExp(`${checks} checks: ${checks} passed, 0 failed\n$`));
    assertMatch(r.out, /^CHECK +FAMILY +FROM → TO +RESULT$/m);
    assertMatch(
      r.err,
      new RegExp(
        `^\\[2/${checks}\\] pod→pod across nodes ct-0-a \\(ct-node1\\) → ct-1-a \\(ct-node2\\) 10\\.244\\.1\\.\\d+:8080 … ok \\d+ ms$`,
        "m",
      ),
    );
    assertMatch(r.err, /NetworkPolicy deny-all enforced ct-2-a \(ct-node3\) → ct-0-b \(ct-node1\)/);
    assertMatch(
      r.err,
      /pod→NodePort Service ct-0-a \(ct-node1\) → ct-node2 NodePort 192\.0\.2\.11:30080 … ok/,
    );
    assertEquals(await testNamespaces(client), [], "the namespace is deleted");
    const created = exec.namespaces[0];
    assertEquals(created?.metadata?.labels?.["pod-security.kubernetes.io/enforce"], "privileged");
  }));

Deno.test("connectivity-test fails the checks that cross a broken node and names it", () =>
  withCluster(async (kubeconfig, _client, exec) => {
    exec.broken.add("ct-node3");
    const r = await ferry(["connectivity-test", "--json", "--kubeconfig", kubeconfig], exec);
    assertEquals(r.code, 1, r.err);
    const summary = JSON.parse(r.out);
    assertEquals(summary.failedNodes[0], { node: "ct-node3", failures: summary.failed });
    assert(summary.failed > 0 && summary.passed > 0, `${summary.passed} passed`);
    for (const c of summary.checks) {
      const crosses = c.from.node === "ct-node3" || c.to.node === "ct-node3";
      if (c.to.label !== "service") assertEquals(c.ok, !crosses, JSON.stringify(c));
    }
  }));

Deno.test("connectivity-test's forged-source check passes where port security drops and counts the forgery, fails naming the node where a forgery arrives or is not counted, and is skipped where port security is off", () =>
  withCluster(async (kubeconfig, _client, exec) => {
    exec.portSecurity.set("ct-node1", "leaky");
    exec.portSecurity.set("ct-node2", "off");
    exec.portSecurity.set("ct-node3", "uncounted");
    const r = await ferry([
      "connectivity-test",
      "--test",
      "forged-source",
      "--kubeconfig",
      kubeconfig,
    ], exec);
    assertEquals(r.code, 1, r.err);
    assertMatch(
      r.out,
      /forged source dropped +IPv4 +ct-0-a \(ct-node1\) as ct-1-a 10\.244\.1\.\d+ → ct-0-b \(ct-node1\) 10\.244\.0\.\d+:19081 +FAILED \d+ ms: 3 of 3 datagrams forged as ct-1-a \(10\.244\.1\.\d+\) arrived at ct-0-b: not dropped\n/,
    );
    assertMatch(r.out, /ct-1-a \(ct-node2\).* skipped: port security is off on ct-node2\n/);
    assertMatch(
      r.out,
      /ct-2-a \(ct-node3\).* FAILED \d+ ms: the forged datagrams did not arrive, but ct-node3's dropped-frame counter \(ferry_spoofed_packets, ipv4\) went 0 → 0, not \+3, within 30 s\n/,
    );
    assertMatch(
      r.out,
      /3 checks: 0 passed, 2 failed, 1 skipped; failures involve ct-node1 \(1 of 2\), ct-node3 \(1 of 2\)\n$/,
    );
    exec.portSecurity.clear();
    const good = await ferry(
      ["connectivity-test", "--test", "forged-source", "--json", "--kubeconfig", kubeconfig],
      exec,
    );
    assertEquals(good.code, 0, good.err);
    const summary = JSON.parse(good.out);
    assertEquals([summary.passed, summary.failed, summary.skipped], [3, 0, 0]);
    for (const n of ["ct-node1", "ct-node2", "ct-node3"]) {
      assertEquals(exec.dropped.get(n), 3, `${n} counted the 3 forged datagrams (both runs: 3)`);
    }
  }));

Deno.test("connectivity-test --test runs only the tests named", () =>
  withCluster(async (kubeconfig, _client, exec) => {
    const r = await ferry([
      "connectivity-test",
      "--test",
      "pod-pod-cross-node",
      "--test",
      "policy-deny",
      "--kubeconfig",
      kubeconfig,
    ], exec);
    assertEquals(r.code, 0, r.err);
    assertMatch(r.out, new RegExp(`${NODES_N * 2} checks: ${NODES_N * 2} passed`));
    assert(!r.out.includes("ClusterIP"), r.out);
    const bad = await ferry(["connectivity-test", "--test", "pod-teleport"], exec);
    assertEquals(bad.code, 2);
    assertMatch(bad.err, /--test pod-teleport: one of pod-pod-same-node/);
  }));

Deno.test("connectivity-test interrupted (Ctrl-C) stops and still removes its namespace", () =>
  withCluster(async (kubeconfig, client, exec) => {
    const ctrlC = new AbortController();
    const r = await ferry(["connectivity-test", "--kubeconfig", kubeconfig], exec, {
      interrupted: ctrlC.signal,
      onErr: (t) => t.startsWith("[1/") && ctrlC.abort(new Error("interrupted")),
    });
    assertEquals(r.code, 130, r.err);
    assertMatch(r.out, /1 checks: 1 passed, 0 failed; stopped: interrupted/);
    assertEquals(await testNamespaces(client), [], "the namespace is deleted");
  }));

Deno.test("connectivity-test whose pods never become ready says which and where, exits 2, and cleans up", () =>
  withCluster(async (kubeconfig, client, exec) => {
    let t = 0;
    const r = await ferry(["connectivity-test", "--kubeconfig", kubeconfig], exec, {
      now: () => t += 60_000, // the readiness bound passes after a few polls
    });
    assertEquals(r.code, 2, r.err);
    assertMatch(
      r.out,
      /stopped: test pods not ready after 180 s: ct-0-a on ct-node1 \(Pending\)/,
    );
    assertEquals(await testNamespaces(client), []);
  }, { kubelet: false }));

Deno.test("connectivity-test --network checks pod→pod over the NAD's addresses too", () =>
  withCluster(async (kubeconfig, client, exec) => {
    const r = await ferry([
      "connectivity-test",
      "--network",
      "default/macv",
      "--test",
      "network",
      "--json",
      "--kubeconfig",
      kubeconfig,
    ], exec);
    assertEquals(r.code, 0, r.err);
    const summary = JSON.parse(r.out);
    assertEquals(summary.passed, NODES_N * 2, "a→b on each node and a→next node's a");
    for (const c of summary.checks) assertMatch(c.to.address, /^10\.99\./, JSON.stringify(c));
    const annotated = (await client.listAll<Pod>(PODS, {})).items.filter((p) =>
      p.metadata?.annotations?.["k8s.v1.cni.cncf.io/networks"] === "default/macv"
    );
    assertEquals(annotated.length, NODES_N * 2, "the -a and -b pods asked for the NAD");
    assertEquals(await testNamespaces(client), [], "the namespace is deleted");
    const bad = await ferry(["connectivity-test", "--network", "macv"], exec);
    assertEquals(bad.code, 2);
    assertMatch(bad.err, /--network macv: a NetworkAttachmentDefinition as NS\/NAME/);
  }));

Deno.test("connectivity-test --wait-repair shows a fault Ferry repaired, and how long it took", () =>
  withCluster(async (kubeconfig, _client, exec) => {
    exec.brokenFor.set("ct-node3", 2);
    const args = ["connectivity-test", "--test", "pod-pod-cross-node", "--kubeconfig", kubeconfig];
    const r = await ferry([...args, "--wait-repair", "30"], exec);
    assertEquals(r.code, 0, r.err);
    assertMatch(
      r.err,
      /pod→pod across nodes ct-1-a \(ct-node2\) → ct-2-a \(ct-node3\) \S+ … ok, repaired after \d+\.\d s \(no connection: dial tcp: i\/o timeout\)/,
    );
    assertMatch(r.out, /3 checks: 3 passed, 0 failed; 1 repaired while waiting\n$/);
    exec.brokenFor.set("ct-node3", 1);
    const without = await ferry(args, exec);
    assertEquals(without.code, 1, "without --wait-repair the fault is a failure");
    assertMatch(without.out, /1 failed; failures involve ct-node2 \(1 of 1\), ct-node3 \(1 of 1\)/);
  }));

Deno.test("connectivity-test tries a Service check again while the new Services are programmed, for at most 15 s after its pods are ready, fails one still unserved after that, and calls a pass a repair only after those 15 s", () =>
  withCluster(async (kubeconfig, _client, exec) => {
    const args = [
      "connectivity-test",
      "--test",
      "pod-clusterip,pod-nodeport",
      "--kubeconfig",
      kubeconfig,
    ];
    // kube-proxy still programming the new Services: the first attempts are refused.
    exec.servicesUnservedFor = 3;
    const served = await ferry(args, exec);
    assertEquals(served.code, 0, `${served.out}\n${served.err}`);
    assertEquals(exec.servicesUnservedFor, 0, "the refused attempts were made");
    assertMatch(served.out, /6 checks: 6 passed, 0 failed\n$/);
    assert(!served.err.includes("repaired"), `a Service coming up is no repair:\n${served.err}`);
    // Never served: the first check fails once the 15 s after the pods were ready are over (a
    // clock that moves 250 ms a read), not sooner and not much later; the checks after it, with
    // the 15 s gone, at their first refusal.
    exec.servicesUnservedFor = Infinity;
    let t = 0;
    const never = await ferry([...args, "--json"], exec, { now: () => (t += 250) });
    assertEquals(never.code, 1, never.err);
    const run = JSON.parse(never.out) as {
      checks: { test: string; ok: boolean; ms: number; reason?: string }[];
    };
    assertEquals(run.checks.length, 6);
    for (const c of run.checks) {
      assertEquals(c.ok, false, JSON.stringify(c));
      assertMatch(c.reason ?? "", /connection refused/);
    }
    const [first, ...rest] = run.checks.map((c) => c.ms);
    assert(first >= 13_000 && first <= 16_000, `the first check gave up after ${first} ms`);
    assert(rest.every((ms) => ms < 1000), `the later checks waited: ${rest}`);
    // With --wait-repair: refusals within the 15 s and a pass then are no repair; refusals that
    // go on past them (about 60 reads of that clock) and a pass after are one.
    exec.servicesUnservedFor = 3;
    t = 0;
    const early = await ferry([...args, "--wait-repair", "60"], exec, { now: () => (t += 250) });
    assertEquals(early.code, 0, early.err);
    assert(!early.err.includes("repaired"), `a Service coming up is no repair:\n${early.err}`);
    exec.servicesUnservedFor = 70;
    t = 0;
    const late = await ferry([...args, "--wait-repair", "60"], exec, { now: () => (t += 250) });
    assertEquals(late.code, 0, late.err);
    assertMatch(
      late.err,
      /pod→ClusterIP Service ct-0-a .* ok, repaired after \d+\.\d s \(no connection: dial tcp: connect: connection refused\)/,
    );
    assertMatch(late.out, /6 checks: 6 passed, 0 failed; 1 repaired while waiting\n$/);
  }));
