// Ferry as a real cluster's network (`deno task test:cluster`): the three-node cluster of
// ../shared/tools/realcluster brought up with no CNI, Ferry's image built here and imported on
// every node, `kubectl apply -k deploy/` unchanged; the Kubernetes e2e sig-network conformance
// specs; port security against forged ARP and IPv4, a whereabouts NAD served natively across the
// nodes, `kubectl ferry` (status, connectivity-test with faults made by hand, sysdump); with
// traffic running between pods on every node, the Ferry pod of a node deleted, a
// rolling upgrade to a new image tag, a NAD-attached second network across two nodes, a node
// drained, deleted and added back; `ipam check` clean after each; the vxlan overlay
// (deploy/overlays/vxlan) and pool IPAM on nodes without podCIDRs (deploy/overlays/pool) each
// passing e2e's Networking Granular Checks: Pods; the uninstall leaving nothing on any node.
// Needs root and the cluster built (`build.sh`, `build.sh e2e`); about 25 minutes.
// FERRY_CLUSTER_STEPS=REGEX runs only the matching steps after the setup (docs/development.md).
import { assert, assertEquals } from "deno-std/assert/mod.js";
import {
  CLUSTER_BUILT,
  deleteNode,
  e2e,
  eventsAbout,
  exec,
  kubectl,
  kubectlJson,
  nodeexec,
  NODES,
  type PodInfo,
  podOn,
  pods,
  registerAgain,
  REPO,
  script,
  TOOLS,
  uninstallFerry,
  until,
} from "./_realcluster.ts";
import {
  AGNHOST,
  apply,
  blocked,
  ferryReady,
  ferryRoutes,
  ipamCheck,
  NS,
  reaches,
  ready,
  server,
} from "./_suite.ts";
import {
  connectivityWholeThenBroken,
  imageHasNodeScripts,
  statusHealthyThenNaming,
  sysdumpWhole,
} from "./_operator_cli.ts";
import { nativeWhereaboutsAcrossNodes } from "./_nad_ipam.ts";
import { fillPoolNad, poolNadBack, poolNadReclaimed } from "./_nad_reclaim.ts";
import { forgeriesDropped } from "./_port_security.ts";
import { cidrContains, parseCidr, parseIp } from "../../daemon/ipam/cidr.ts";

const GRANULAR_PODS = "Networking Granular Checks: Pods";
/**
 * Upstream NetworkPolicy e2e specs (test/e2e/network/netpol), about 25 s each here: deny-all,
 * selectors of both kinds, ports by number and name, egress, ipBlock with except, a relabelled
 * pod, UDP.
 */
const NETPOL_SAMPLE = "\\[sig-network\\] Netpol .*should (support a 'default-deny-all' policy|" +
  "enforce policy based on PodSelector and NamespaceSelector|allow ingress access on one named port|" +
  "allow egress access on one named port|enforce except clause while egress access to server in CIDR block|" +
  "deny ingress access to updated pod|enforce policy based on Ports)";

/** A pod on every node serving HTTP on 8080 (the traffic between nodes runs between them). */
const TRAFFIC = {
  apiVersion: "apps/v1",
  kind: "DaemonSet",
  metadata: { name: "traffic", namespace: NS },
  spec: {
    selector: { matchLabels: { app: "traffic" } },
    template: {
      metadata: { labels: { app: "traffic" } },
      spec: {
        terminationGracePeriodSeconds: 1,
        containers: [{ name: "c", image: AGNHOST, args: ["netexec", "--http-port=8080"] }],
      },
    },
  },
};

/**
 * Traffic between pods on every node: in each pod of the `traffic` DaemonSet, a loop asks every
 * other one for its hostname over HTTP five times a second and writes one line per answer; a
 * request unanswered within 5 s (not merely slow on this two-core machine running three nodes)
 * counts as lost.
 */
async function startTraffic(): Promise<PodInfo[]> {
  const all = await ready("app=traffic", NODES.length);
  for (const p of all) {
    const targets = all.filter((o) => o.name !== p.name).map((o) => o.ip).join(" ");
    const loop = `while [ ! -e /tmp/stop ]; do for ip in ${targets}; ` +
      `do if curl -s -m 5 -o /dev/null http://$ip:8080/hostname; then echo "ok $ip"; ` +
      `else echo "fail $ip $(date +%s)"; fi; done; sleep 0.2; done`;
    await kubectl(
      "exec",
      "-n",
      NS,
      p.name,
      "--",
      "bash",
      "-c",
      // No nohup in the image: the loop ignores the hang-up of the exec session itself.
      `rm -f /tmp/stop; bash -c 'trap "" HUP; ${loop}' </dev/null >/tmp/probe.log 2>&1 &`,
    );
  }
  return all;
}

/** What the traffic loops counted since they started: answers and failures. */
async function trafficCount(all: PodInfo[]): Promise<{ ok: number; fail: string[] }> {
  let ok = 0;
  const fail: string[] = [];
  for (const p of all) {
    const log = await kubectl("exec", "-n", NS, p.name, "--", "cat", "/tmp/probe.log");
    for (const line of log.split("\n")) {
      if (line.startsWith("ok ")) ok++;
      else if (line.startsWith("fail ")) fail.push(`${p.name} (${p.node}) → ${line.slice(5)}`);
    }
  }
  return { ok, fail };
}

/** Restarts the loops' counts (a new log per phase). */
async function restartTraffic(all: PodInfo[]): Promise<void> {
  for (const p of all) {
    await kubectl("exec", "-n", NS, p.name, "--", "bash", "-c", "touch /tmp/stop");
  }
  await new Promise((r) => setTimeout(r, 1500));
  await startTraffic();
}

/** What Ferry leaves on a node: nothing once uninstalled. */
async function ferryLeftovers(node: string): Promise<string[]> {
  const left: string[] = [];
  const has = async (...cmd: string[]) => (await nodeexec(node, ...cmd)).code === 0;
  for (
    const f of [
      "/etc/cni/net.d/10-ferry.conflist",
      "/opt/cni/bin/ferry",
      "/opt/cni/bin/ferry-deno",
      "/opt/cni/bin/.ferry-plugins",
      "/var/lib/ferry",
      "/run/ferry",
    ]
  ) {
    if (await has("test", "-e", f)) left.push(f);
  }
  for (const link of ["ferry0", "ferry.vxlan"]) {
    if (await has("ip", "link", "show", link)) left.push(`link ${link}`);
  }
  if ((await ferryRoutes(node)).trim()) left.push("routes proto 199");
  if (await has("nft", "list", "table", "inet", "ferry")) left.push("nft table inet ferry");
  if (await has("nft", "list", "table", "inet", "ferry-policy")) {
    left.push("nft table inet ferry-policy");
  }
  return left;
}

Deno.test({
  name:
    "Ferry on a real three-node cluster: conformance, node failures, upgrades, overlays, uninstall",
  ignore: !CLUSTER_BUILT,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async (t) => {
    const failed: string[] = [];
    /**
     * `FERRY_CLUSTER_STEPS` (a regular expression; for iterating on steps by hand, never set by
     * CI): only the steps whose names match run, after the three that set the cluster up.
     */
    const only = Deno.env.get("FERRY_CLUSTER_STEPS");
    const chosen = (name: string) => !only || new RegExp(only).test(name);
    const why = new Map<string, string>();
    /**
     * `fn`, keeping why it failed: the run's last error repeats it, so the end of a long log (all
     * CI shows of it) says which check of a step failed, not only the step's name.
     */
    const told = (name: string, fn: () => Promise<void>) => async () => {
      try {
        await fn();
      } catch (e) {
        // The end of the message: the reports it quotes put their verdicts last.
        why.set(name, (e instanceof Error ? e.message : String(e)).slice(-4000));
        throw e;
      }
    };
    /** A step the ones after it depend on: its failure ends the run. */
    const step = async (name: string, fn: () => Promise<void>, setup = false) => {
      const ignore = !setup && !chosen(name);
      const ok = await t.step({ name, fn: told(name, fn), ignore });
      if (!ok && !ignore) {
        throw new Error(
          `step failed: ${name} (the steps after it depend on it): ${why.get(name) ?? "?"}`,
        );
      }
    };
    /** A step nothing after it depends on: the run goes on, and fails at the end. */
    const alone = async (name: string, fn: () => Promise<void>) => {
      const ignore = !chosen(name);
      if (!(await t.step({ name, fn: told(name, fn), ignore })) && !ignore) {
        failed.push(`${name}: ${why.get(name) ?? "?"}`);
      }
    };
    try {
      await step(
        "the cluster comes up with no CNI; Ferry's image is built and imported on every node",
        async () => {
          await exec("bash", [`${TOOLS}stop.sh`, "--clean"]);
          await script("start.sh", ["none"]);
          await script("ferry.sh", ["image", REPO]);
        },
        true,
      );

      await step(
        "kubectl apply -k deploy/, unchanged, makes Ferry the network; a node whose Ferry is not ready stays NotReady until it is",
        async () => {
          // The node's identity held by another daemon: Ferry on that node cannot serve.
          const held = NODES[2];
          await apply({
            apiVersion: "coordination.k8s.io/v1",
            kind: "Lease",
            metadata: { name: `ferry-node-${held}`, namespace: "kube-system" },
            spec: {
              holderIdentity: "another-daemon-of-the-same-name",
              leaseDurationSeconds: 3600,
              renewTime: new Date().toISOString().replace("Z", "000Z"),
            },
          });
          await script("use-cni.sh", ["none"]);
          for (let i = 0; i < 5; i++) {
            if ((await exec("kubectl", ["apply", "-k", `${REPO}deploy`])).code === 0) break;
            await new Promise((r) => setTimeout(r, 2000));
          }
          await kubectl("apply", "-k", `${REPO}deploy`);
          const nodeReady = async (n: string) =>
            (await kubectlJson<{ status: { conditions: { type: string; status: string }[] } }>(
              "get",
              "node",
              n,
            )).status.conditions.some((c) => c.type === "Ready" && c.status === "True");
          for (const n of NODES.filter((n) => n !== held)) {
            await until(() => nodeReady(n), `${n} Ready with Ferry`, 180_000);
          }
          // Long past the others' readiness: still NotReady, its network unconfigured.
          await new Promise((r) => setTimeout(r, 20_000));
          assertEquals(await nodeReady(held), false, `${held} Ready while its Ferry cannot serve`);
          const conf = await nodeexec(held, "ls", "/etc/cni/net.d");
          assert(!conf.out.includes("10-ferry.conflist"), conf.out);
          const log = await kubectl(
            "logs",
            "-n",
            "kube-system",
            await podOn(held),
            "-c",
            "ferry",
          );
          assert(log.includes("another-daemon-of-the-same-name"), log.slice(-3000));
          // The other daemon gone (its Lease deleted): Ferry takes the node, the node turns Ready.
          await kubectl("delete", "lease", "-n", "kube-system", `ferry-node-${held}`);
          await until(() => nodeReady(held), `${held} Ready once its Ferry is`, 180_000);
          await ferryReady();
          await kubectl("create", "namespace", NS);
          await apply(TRAFFIC);
        },
        true,
      );

      let traffic: PodInfo[] = [];
      await step("pods on every node reach each other", async () => {
        traffic = await startTraffic();
        await new Promise((r) => setTimeout(r, 5000));
        const { ok, fail } = await trafficCount(traffic);
        assert(ok > 0, "answers counted");
        assertEquals(fail, []);
        await ipamCheck();
      }, true);

      await alone(
        "the daemons run unprivileged with NET_ADMIN, SYS_ADMIN and SYS_NICE only; Prometheus can scrape each through its pod's address; the log reads as sentences",
        async () => {
          for (const n of NODES) {
            const pod = await podOn(n);
            const status = await kubectl(
              "exec",
              "-n",
              "kube-system",
              pod,
              "-c",
              "ferry",
              "--",
              "grep",
              "-E",
              "^Cap(Eff|Prm|Bnd):",
              "/proc/1/status",
            );
            // NET_ADMIN (12), SYS_ADMIN (21), SYS_NICE (23), and nothing else.
            const want = ((1n << 12n) | (1n << 21n) | (1n << 23n)).toString(16).padStart(16, "0");
            for (const line of status.trim().split("\n")) {
              assertEquals(line.split(/\s+/)[1], want, `${n}: ${line}`);
            }
            const spec = await kubectlJson<
              {
                metadata: { annotations: Record<string, string> };
                status: { podIP: string };
                spec: { containers: { securityContext: Record<string, unknown> }[] };
              }
            >("get", "pod", "-n", "kube-system", pod);
            assertEquals(spec.spec.containers[0].securityContext.privileged, false);
            assertEquals(spec.metadata.annotations["prometheus.io/scrape"], "true");
            const port = spec.metadata.annotations["prometheus.io/port"];
            const scrape = await exec("curl", [
              "-s",
              "-m",
              "5",
              `http://${spec.status.podIP}:${port}/metrics`,
            ]);
            assert(
              /^ferry_cni_requests_total\{command="ADD",code="0"\} \d+$/m.test(scrape.out),
              `${n}: ${scrape.out.slice(0, 1500)}${scrape.err}`,
            );
            const log = await kubectl("logs", "-n", "kube-system", pod, "-c", "ferry");
            assert(/serving on \S+ for node /.test(log), log.slice(0, 2000));
            assert(!/^\s*\{/m.test(log), `no JSON lines:\n${log.slice(0, 2000)}`);
          }
        },
      );

      await alone(
        "NetworkPolicy: a sample of the upstream Netpol e2e specs passes (the whole set is run by hand: docs/network-policy.md)",
        async () => {
          const run = await e2e("ferry-netpol", NETPOL_SAMPLE, "SCTP");
          assertEquals(run.failed, [], run.text);
          assert(run.passed >= 6, run.text);
        },
      );

      await step(
        "sig-network conformance (no DNS) passes with Ferry as the DaemonSet ships it",
        async () => {
          const run = await e2e("ferry");
          assertEquals(run.failed, [], run.text);
          assert(run.passed >= 31, run.text);
        },
      );

      await alone(
        "port security: a pod forging ARP and IPv4 as another pod of its node is dropped and counted (ferry_spoofed_packets); the third pod keeps the victim's MAC, everyone's own traffic flows",
        forgeriesDropped,
      );

      await alone(
        "a whereabouts NAD served natively (multiNetwork.whereaboutsIpam: native): pods on all three nodes get distinct addresses of its /28 and reach each other on it, every address of the /28 served once, ipam check clean",
        nativeWhereaboutsAcrossNodes,
      );

      await alone(
        "kubectl ferry status: exit 0 naming every node ok; with one node's Ferry stopped, exit 1 naming it; the image holds the node scripts it runs",
        async () => {
          await imageHasNodeScripts();
          await statusHealthyThenNaming();
        },
      );

      await alone(
        "kubectl ferry connectivity-test: passes whole; a route to another node's pods deleted by hand fails the checks that cross it, naming the nodes, or is put back by Ferry; a deleted policy table is rewritten and isolates again",
        connectivityWholeThenBroken,
      );

      await alone(
        "kubectl ferry sysdump: one tar.gz with every node's part and no token",
        sysdumpWhole,
      );

      await step(
        "the Ferry pod of a node deleted: its pods keep talking, the replacement adopts them",
        async () => {
          await restartTraffic(traffic);
          const node = NODES[1];
          const before = await ferryRoutes(NODES[0]);
          await kubectl(
            "delete",
            "pod",
            "-n",
            "kube-system",
            await podOn(node),
            "--wait=true",
          );
          await ferryReady();
          // A pod created on that node after the replacement starts and reaches the others.
          await apply(server("after-restart", node));
          const [fresh] = await ready("app=after-restart", 1);
          await reaches(
            traffic.find((p) => p.node === NODES[0])!.name,
            fresh.ip,
            (t) => t === "after-restart",
          );
          const { ok, fail } = await trafficCount(traffic);
          assert(ok > 0);
          assertEquals(fail, [], "no request lost while the daemon was replaced");
          assertEquals(await ferryRoutes(NODES[0]), before);
          // The replacement knows the pods the old daemon plugged (its records, from the node's state).
          const metrics = (await nodeexec(node, "curl", "-s", "http://127.0.0.1:9667/metrics")).out;
          const plugged = Number(
            /^ferry_attachments\{network="ferry"\} (\d+)$/m.exec(metrics)?.[1] ?? 0,
          );
          assert(plugged >= 1, `the new daemon's attachments:\n${metrics.slice(0, 2000)}`);
          await kubectl("delete", "pod", "-n", NS, "after-restart", "--wait=true");
          await ipamCheck();
        },
      );

      await step(
        "a rolling upgrade to a new image tag loses nothing, and a pod created mid-upgrade starts",
        async () => {
          await restartTraffic(traffic);
          for (const n of NODES) {
            const r = await nodeexec(
              n,
              "ctr",
              "-a",
              "/run/containerd/containerd.sock",
              "-n",
              "k8s.io",
              "images",
              "tag",
              "--force",
              "docker.io/library/ferry:dev",
              "docker.io/library/ferry:upgrade",
            );
            assertEquals(r.code, 0, r.err);
          }
          await kubectl(
            "set",
            "image",
            "-n",
            "kube-system",
            "ds/ferry",
            "ferry=ferry:upgrade",
            "install-cni=ferry:upgrade",
          );
          await apply(server("mid-upgrade", NODES[2]));
          await ferryReady();
          await ready("app=mid-upgrade", 1);
          const { ok, fail } = await trafficCount(traffic);
          assert(ok > 0);
          assertEquals(fail, [], "no request lost during the rolling upgrade");
          await kubectl("delete", "pod", "-n", NS, "mid-upgrade", "--wait=true");
          await ipamCheck();
        },
      );

      await step(
        "a NAD-attached second network (macvlan on the underlay) across two nodes, with network-status",
        async () => {
          await kubectl(
            "apply",
            "-f",
            `${REPO}deploy/base/crds/network-attachment-definitions.yaml`,
          );
          await until(
            async () =>
              (await exec("kubectl", [
                "get",
                "crd",
                "network-attachment-definitions.k8s.cni.cncf.io",
              ])).code === 0,
            "the NAD CRD",
          );
          await new Promise((r) => setTimeout(r, 2000));
          await apply({
            apiVersion: "k8s.cni.cncf.io/v1",
            kind: "NetworkAttachmentDefinition",
            metadata: { name: "underlay", namespace: NS },
            spec: {
              config: JSON.stringify({
                cniVersion: "1.0.0",
                type: "macvlan",
                master: "eth0",
                mode: "bridge",
                capabilities: { ips: true },
                ipam: { type: "static" },
              }),
            },
          });
          for (const [i, node] of [[1, NODES[0]], [2, NODES[1]]] as const) {
            await apply(server(`nad${i}`, node, {
              "k8s.v1.cni.cncf.io/networks": JSON.stringify([{
                name: "underlay",
                ips: [`192.168.177.${10 + i}/24`],
              }]),
            }));
          }
          await ready("app in (nad1,nad2)", 2);
          const pod = await kubectlJson<{ metadata: { annotations: Record<string, string> } }>(
            "get",
            "pod",
            "-n",
            NS,
            "nad1",
          );
          const status = JSON.parse(
            pod.metadata.annotations["k8s.v1.cni.cncf.io/network-status"],
          ) as { name: string; ips: string[] }[];
          assertEquals(status.map((s) => s.name), ["ferry", `${NS}/underlay`]);
          assertEquals(status[1].ips, ["192.168.177.11"]);
          // Across nodes over the second network.
          await reaches("nad1", "192.168.177.12", (t) => t === "nad2");
          // MultiNetworkPolicy on it: deny-all ingress closes nad2's macvlan to nad1 (its eth0
          // stays open); a rule by label opens it again; without policies nothing is left in the pod.
          await kubectl("apply", "-f", `${REPO}deploy/base/crds/multi-networkpolicies.yaml`);
          await until(
            async () =>
              (await exec("kubectl", ["get", "multi-networkpolicies", "-n", NS])).code === 0,
            "the MultiNetworkPolicy CRD",
          );
          const multiPolicy = (name: string, spec: unknown) =>
            apply({
              apiVersion: "k8s.cni.cncf.io/v1beta1",
              kind: "MultiNetworkPolicy",
              metadata: {
                name,
                namespace: NS,
                annotations: { "k8s.v1.cni.cncf.io/policy-for": "underlay" },
              },
              spec,
            });
          await multiPolicy("nad2-deny", {
            podSelector: { matchLabels: { app: "nad2" } },
            policyTypes: ["Ingress"],
          });
          // The daemons list MultiNetworkPolicies again within 30 s of the CRD's installation.
          await blocked("nad1", "192.168.177.12", 90_000);
          const nad2 = (await pods(NS, "app=nad2"))[0];
          await reaches("nad1", nad2.ip, (t) => t === "nad2");
          await multiPolicy("nad2-from-nad1", {
            podSelector: { matchLabels: { app: "nad2" } },
            ingress: [{ from: [{ podSelector: { matchLabels: { app: "nad1" } } }] }],
          });
          await reaches("nad1", "192.168.177.12", (t) => t === "nad2");
          await kubectl("delete", "multi-networkpolicies", "-n", NS, "--all");
          await until(
            async () => {
              const stats = JSON.parse(
                (await nodeexec(
                  NODES[1],
                  "curl",
                  "-s",
                  "--unix-socket",
                  "/run/ferry/ferry.sock",
                  "http://ferry/v1/stats",
                )).out,
              ) as { multiPolicy?: { tables: number; policies: number } };
              return stats.multiPolicy?.policies === 0 && stats.multiPolicy.tables === 0;
            },
            `no MultiNetworkPolicy table left in the pods of ${NODES[1]}`,
          );
          // A pod whose network selection is malformed gets no sandbox, and an Event that says
          // why (a NAD that does not exist yet is waited for, then 11: it may still come).
          await apply(server("nad-missing", NODES[0], {
            "k8s.v1.cni.cncf.io/networks": "Not_A_Name",
          }));
          let said: { message: string; source?: { component?: string; host?: string } }[] = [];
          await until(
            async () =>
              (said = await eventsAbout(NS, "nad-missing", "InvalidNetworkSelection")).length > 0,
            "an InvalidNetworkSelection Event about nad-missing",
          );
          assert(said[0].message.includes("Not_A_Name"), said[0].message);
          assertEquals(said[0].source?.component, "ferry");
          assertEquals(said[0].source?.host, NODES[0]);
          const stuck = await pods(NS, "app=nad-missing");
          assertEquals(stuck.map((p) => [p.ready, p.ip]), [[false, ""]]);
          await kubectl("delete", "pod", "-n", NS, "nad1", "nad2", "nad-missing", "--wait=true");
          await ipamCheck();
        },
      );

      await step(
        "vxlan (deploy/overlays/vxlan): Networking Granular Checks: Pods pass",
        async () => {
          await kubectl("apply", "-k", `${REPO}deploy/overlays/vxlan`);
          await kubectl("rollout", "restart", "-n", "kube-system", "ds/ferry");
          await ferryReady();
          for (const n of NODES) {
            await until(
              async () => (await nodeexec(n, "ip", "-d", "link", "show", "ferry.vxlan")).code === 0,
              `${n} has its VXLAN device`,
            );
          }
          const run = await e2e("ferry-vxlan", GRANULAR_PODS);
          assertEquals(run.failed, [], run.text);
          assert(run.passed >= 4, run.text);
          await ipamCheck();
        },
      );

      await alone(
        "a node drained and deleted: its routes vanish everywhere and its blocks of a NAD network (ferry IPAM, an IPPool for networks, a /28 filled whole) are reclaimed and handed out again on the other nodes, whose NAD pods keep reaching each other; added back, it gets a range and a NAD address and its pods reach the rest; ipam check clean",
        async () => {
          const gone = NODES[2];
          const old = traffic.find((p) => p.node === gone)!.name;
          const cidr =
            (await kubectlJson<{ spec: { podCIDR: string } }>("get", "node", gone)).spec.podCIDR;
          const nadHeld = await fillPoolNad(gone);
          const kubelet = await deleteNode(gone);
          for (const n of NODES.filter((n) => n !== gone)) {
            await until(
              async () => !(await ferryRoutes(n)).includes(cidr),
              `${n} drops its route to ${cidr}`,
            );
          }
          await poolNadReclaimed(gone, nadHeld);
          await registerAgain(kubelet, true);
          await ferryReady();
          // The node's new traffic pod (the old one went with the node), in its new podCIDR.
          const range = parseCidr(
            (await kubectlJson<{ spec: { podCIDR: string } }>("get", "node", gone)).spec.podCIDR,
          );
          let back: PodInfo[] = [];
          await until(
            async () => {
              back = await pods(NS, "app=traffic");
              const there = back.find((p) => p.node === gone);
              return back.length === NODES.length && back.every((p) => p.ready && p.ip) &&
                !!there && there.name !== old && cidrContains(range, parseIp(there.ip));
            },
            `a new traffic pod on ${gone}, in its new podCIDR`,
            240_000,
          );
          const fresh = back.find((p) => p.node === gone)!;
          const from = back.find((p) => p.node === NODES[0])!;
          await reaches(from.name, fresh.ip, (t) => t === fresh.name);
          traffic = back;
          await poolNadBack(gone);
          await ipamCheck();
        },
      );

      await alone(
        "the uninstall (deploy/uninstall) leaves nothing of Ferry on any node",
        async () => {
          await kubectl("delete", "namespace", NS, "--wait=true", "--timeout=180s");
          await uninstallFerry();
          for (const n of NODES) assertEquals(await ferryLeftovers(n), [], n);
        },
      );

      await alone(
        "pool IPAM on nodes without podCIDRs (deploy/overlays/pool): blocks claimed, Networking Granular Checks: Pods pass; a node deleted has its blocks reclaimed and its routes gone, and added back claims anew; ipam check clean",
        async () => {
          await script("stop.sh", ["--clean"]);
          await script("start.sh", [], { NODE_CIDRS: "0" });
          for (let i = 0; i < 5; i++) {
            if (
              (await exec("kubectl", ["apply", "-k", `${REPO}deploy/overlays/pool`])).code === 0
            ) break;
            await new Promise((r) => setTimeout(r, 2000));
          }
          await kubectl("apply", "-k", `${REPO}deploy/overlays/pool`);
          await ferryReady();
          const blocks = await kubectlJson<{ items: { spec: { node: string; cidr: string } }[] }>(
            "get",
            "ipblocks",
          );
          assertEquals(
            new Set(blocks.items.map((b) => b.spec.node)).size,
            NODES.length,
            JSON.stringify(blocks.items.map((b) => b.spec)),
          );
          const run = await e2e("ferry-pool", GRANULAR_PODS);
          assertEquals(run.failed, [], run.text);
          assert(run.passed >= 4, run.text);
          await ipamCheck();

          // A node drained and deleted: the others reclaim its blocks, and their routes to them go.
          await kubectl("create", "namespace", NS);
          await apply(TRAFFIC);
          await ready("app=traffic", NODES.length);
          const gone = NODES[2];
          const blocksOf = async (node: string) =>
            (await kubectlJson<{ items: { spec: { node: string; cidr: string } }[] }>(
              "get",
              "ipblocks",
            )).items.filter((b) => b.spec.node === node).map((b) => b.spec.cidr);
          const held = await blocksOf(gone);
          assert(held.length > 0, `${gone} holds a block for its traffic pod`);
          const kubelet = await deleteNode(gone);
          await until(
            async () => (await blocksOf(gone)).length === 0,
            `the blocks of ${gone} (${held.join(", ")}) reclaimed`,
            180_000,
          );
          for (const n of NODES.filter((n) => n !== gone)) {
            await until(
              async () => {
                const routes = await ferryRoutes(n);
                return held.every((cidr) => !routes.includes(cidr));
              },
              `${n} drops its routes to ${held.join(", ")}`,
            );
          }
          await ipamCheck();
          // Added back: it claims a block again, and its new pod reaches the others.
          await registerAgain(kubelet, false);
          await ferryReady();
          const back = await ready("app=traffic", NODES.length);
          const fresh = back.find((p) => p.node === gone)!;
          assert((await blocksOf(gone)).length > 0, `${gone} claimed a block again`);
          await reaches(
            back.find((p) => p.node === NODES[0])!.name,
            fresh.ip,
            (t) => t === fresh.name,
          );
          await ipamCheck();
          await kubectl("delete", "namespace", NS, "--wait=true", "--timeout=180s");
          await uninstallFerry();
          for (const n of NODES) assertEquals(await ferryLeftovers(n), [], n);
        },
      );
      assertEquals(failed, [], "steps failed");
    } finally {
      await exec("bash", [`${TOOLS}stop.sh`, "--clean"]);
    }
  },
});
