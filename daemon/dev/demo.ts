/**
 * `deno task demo` (as root): Ferry's main job end to end on this machine, on the embedded
 * cluster. Starts the API stand-in and creates three pods bound to a node; starts a daemon for
 * that node (one pod watch) on a temporary socket with a dual-stack default network on its own
 * bridge, and installs the shim; plugs three pod namespaces through the shim exactly as a
 * container runtime would (CNI_ARGS naming the pods); prints what was plugged; proves every pod
 * reaches every other pod and the host, and the host every pod, over IPv4 and IPv6; deletes them;
 * and verifies that no namespace, link, bridge, address or record is left.
 *
 * @module
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { PODS } from "../k8s/resources.ts";
import { KubeClient } from "../k8s/client.ts";
import { HttpTransport } from "../k8s/transport.ts";
import { hostLinkName } from "../net/naming.ts";
import { ATTACHMENTS_ANNOTATION } from "../records/registry.ts";
import { netconf, withFerry } from "./harness.ts";
import { DemoChecks, eventually } from "./demo_checks.ts";
import { demoCluster } from "./demo_cluster.ts";
import { KubeStandin } from "./kube_standin/server.ts";
import {
  hostLinkExists,
  IS_ROOT,
  linkInNetns,
  pingOnce,
  run,
  uniqueToken,
  withNetns,
} from "./netns.ts";

interface Row {
  pod: string;
  uid: string;
  netns: string;
  iface: string;
  hostLink: string;
  mac: string;
  ipv4: string;
  ipv6: string;
  "host→pod": string;
  "pod→pods": string;
  "pod→host": string;
}

const answered = (results: boolean[]) =>
  results.every(Boolean) ? `ok (${results.length})` : `FAILED ${results.filter((r) => !r).length}`;

function table(rows: Row[]): string {
  const cols = Object.keys(rows[0]) as (keyof Row)[];
  const width = cols.map((c) => Math.max(c.length, ...rows.map((r) => r[c].length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(width[i])).join("  ");
  return [
    line(cols),
    line(width.map((w) => "-".repeat(w))),
    ...rows.map((r) => line(cols.map((c) => r[c]))),
  ].join("\n");
}

/**
 * Runs the demo, printing each check with its result; resolves to the checks (which did not
 * hold, by name).
 */
export async function demo(): Promise<DemoChecks> {
  const conf = netconf("1.0.0");
  const node = "demo-node";
  const ids = ["web-0", "web-1", "db-0"].map((pod) => ({ pod, id: `demo${uniqueToken()}` }));
  const checks = new DemoChecks();
  const api = await KubeStandin.start({ token: crypto.randomUUID() });
  const dir = await Deno.makeTempDir({ prefix: "ferry-demo-" });
  const transport = new HttpTransport({ server: api.url, token: () => Promise.resolve(api.token) });
  try {
    const kube = new KubeClient(transport);
    await Deno.writeTextFile(`${dir}/kubeconfig`, api.kubeconfig());
    for (const { pod } of ids) {
      await kube.create<Pod>(PODS, {
        metadata: { name: pod, namespace: "default", labels: { app: pod.split("-")[0] } },
        spec: { nodeName: node, containers: [{ name: "app", image: "registry.invalid/app:1" }] },
      });
    }
    console.log(
      `API stand-in on ${api.url} with pods ${
        ids.map((i) => `default/${i.pod}`).join(", ")
      } on ${node}`,
    );
    await withFerry({
      config: {
        network: { subnet: "10.244.250.0/24", subnet6: "fd00:10:244:250::/64", mtu: 1500 },
        podWaitSeconds: 10,
      },
      overrides: { standalone: false, kubeconfig: `${dir}/kubeconfig`, nodeName: node },
    }, (ferry) =>
      withNetns(ids.length, async (namespaces) => {
        console.log(
          `daemon on ${ferry.config.socket}, bridge ${ferry.config.network.bridge}; ` +
            `shim installed at ${ferry.shimPath}\n`,
        );
        const plugged: { v4: string; v6: string; gw4: string; gw6: string }[] = [];
        const rows: Row[] = [];
        for (const [i, ns] of namespaces.entries()) {
          const { pod, id } = ids[i];
          const env = {
            CNI_COMMAND: "ADD",
            CNI_CONTAINERID: id,
            CNI_NETNS: ns.path,
            CNI_IFNAME: "eth0",
            CNI_PATH: "/usr/lib/cni",
            CNI_ARGS:
              `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${pod};K8S_POD_INFRA_CONTAINER_ID=${id}`,
          };
          const add = await ferry.shim(env, conf);
          if (add.code !== 0) throw new Error(`ADD ${pod} failed: ${add.stdout}`);
          const result = add.json as {
            interfaces: { name: string; mac: string }[];
            ips: { address: string; gateway: string }[];
          };
          const [v4, v6] = result.ips;
          plugged.push({
            v4: v4.address.split("/")[0],
            v6: v6.address.split("/")[0],
            gw4: v4.gateway,
            gw6: v6.gateway,
          });
          // The annotation is written after the answer: waited for (bounded), then judged.
          const recordedId = (p: Pod) =>
            JSON.parse(p.metadata?.annotations?.[ATTACHMENTS_ANNOTATION] ?? "{}").containerId;
          const stored = await eventually(
            () => kube.get<Pod>(PODS, "default", pod),
            (p) => recordedId(p) === id,
          );
          checks.check(
            `default/${pod}'s ${ATTACHMENTS_ANNOTATION} annotation names container ${id}`,
            recordedId(stored) === id,
            `it names ${recordedId(stored) ?? "none"} 10 s after the ADD's answer`,
          );
          rows.push({
            pod: `default/${pod}`,
            uid: stored.metadata!.uid!.slice(0, 8),
            netns: ns.name,
            iface: "eth0",
            hostLink: result.interfaces[0].name,
            mac: result.interfaces[1].mac,
            ipv4: v4.address,
            ipv6: v6.address,
            "host→pod": "",
            "pod→pods": "",
            "pod→host": "",
          });
        }
        // Every pod is up before any ping: each pod reaches the others, the host and its gateway.
        const reached: [string, boolean[]][] = [];
        for (const [i, ns] of namespaces.entries()) {
          const me = plugged[i];
          const others = plugged.filter((_, j) => j !== i);
          const host = await Promise.all([pingOnce(me.v4), pingOnce(me.v6)]);
          const pods = await Promise.all(
            others.flatMap((o) => [pingOnce(o.v4, ns), pingOnce(o.v6, ns)]),
          );
          const gw = await Promise.all([pingOnce(me.gw4, ns), pingOnce(me.gw6, ns)]);
          rows[i]["host→pod"] = answered(host);
          rows[i]["pod→pods"] = answered(pods);
          rows[i]["pod→host"] = answered(gw);
          const pod = rows[i].pod;
          reached.push(
            [`the host reaches ${pod} over IPv4 and IPv6`, host],
            [`${pod} reaches the other pods over IPv4 and IPv6`, pods],
            [`${pod} reaches its gateway (the host) over IPv4 and IPv6`, gw],
          );
        }
        console.log(table(rows) + "\n");
        for (const [what, answers] of reached) {
          checks.check(what, answers.every(Boolean), answered(answers));
        }
        console.log("");
        const stats = ferry.daemon().stats();
        console.log(
          `one pod watch (${stats.podWatch!.watches} watch, ${stats.podWatch!.lists} list); ` +
            `API round trips ADDs waited for: ${stats.apiCallsOnCniPath}; annotation writes after the answers: ` +
            `${stats.annotationWrites?.sent ?? 0}\n`,
        );
        for (const [i, ns] of namespaces.entries()) {
          const del = await ferry.shim({
            CNI_COMMAND: "DEL",
            CNI_CONTAINERID: ids[i].id,
            CNI_NETNS: ns.path,
            CNI_IFNAME: "eth0",
            CNI_PATH: "/usr/lib/cni",
            CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${ids[i].pod}`,
          }, conf);
          if (del.code !== 0) throw new Error(`DEL ${ids[i].pod} failed: ${del.stdout}`);
          await kube.delete(PODS, "default", ids[i].pod, { gracePeriodSeconds: 0 });
        }
        const leftLinks = [];
        for (const { id } of ids) {
          const probe = await new Deno.Command("ip", {
            args: ["link", "show", hostLinkName(id, "eth0")],
            stderr: "null",
            stdout: "null",
          }).output();
          if (probe.success) leftLinks.push(hostLinkName(id, "eth0"));
        }
        const leftAllocations = await ferry.allocations();
        const leftRecords = await ferry.records();
        const leftInPods = [];
        for (const ns of namespaces) {
          if (await linkInNetns(ns, "eth0")) {
            leftInPods
              .push(ns.name);
          }
        }
        console.log("after DEL:");
        for (
          const [what, left] of [
            ["no host link is left", leftLinks],
            ["no pod interface is left", leftInPods],
            ["no address is still allocated", leftAllocations],
            ["no attachment record is left", leftRecords],
          ] as const
        ) checks.check(what, left.length === 0, `left: ${left.join(", ")}`);
        return namespaces.map((n) => n.name);
      }, "fydemo").then(async (names) => {
        const list = await run("ip", "netns", "list");
        const leftNs = names.filter((n) => list.includes(n));
        console.log("after teardown:");
        checks.check("no namespace is left", leftNs.length === 0, `left: ${leftNs.join(", ")}`);
        return ferry.config.network.bridge;
      })).then(async (bridge) => {
        checks.check(
          `the bridge ${bridge} is removed`,
          !(await hostLinkExists(bridge)),
          "it is still there",
        );
      });
  } finally {
    transport.close();
    await api.stop();
    await Deno.remove(dir, { recursive: true });
  }
  return checks;
}

if (import.meta.main) {
  if (!IS_ROOT) {
    console.error(
      "deno task demo plugs real network namespaces and must run as root (try: sudo deno task demo)",
    );
    Deno.exit(2);
  }
  const failed = (await demo()).failed;
  if (!failed.length) failed.push(...(await demoCluster()).failed);
  console.log(
    !failed.length
      ? "\ndemo: every pod was plugged, reached every other pod (on its node and across nodes), " +
        "the host and the outside (masqueraded), and was cleanly removed"
      : `\ndemo: FAILED, these did not hold:\n${failed.map((f) => `  ${f}`).join("\n")}`,
  );
  const ok = !failed.length;
  Deno.exit(ok ? 0 : 1);
}
