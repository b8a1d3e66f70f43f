// The daemon with its Kubernetes side on (the stand-in, or a real API server with
// FERRY_TEST_KUBECONFIG), driven through the installed shim with CNI_ARGS exactly as container
// runtimes send them, plugging real namespaces. Needs root.
import { assert, assertEquals, assertMatch } from "deno-std/assert/mod.js";
import type { Node, Pod } from "kubernetes-types/core/v1.d.ts";
import { hostLinkName } from "../../daemon/net/naming.ts";
import { NODES, PODS } from "../../daemon/k8s/resources.ts";
import { ATTACHMENTS_ANNOTATION } from "../../daemon/records/registry.ts";
import {
  netconf,
  runWithInput,
  type TestFerry,
  testSubnet,
  withFerry,
} from "../../daemon/dev/harness.ts";
import {
  hostLinkExists,
  IS_ROOT,
  type TestNetns,
  uniqueToken,
  withNetns,
} from "../../daemon/dev/netns.ts";
import { CNI_REQUEST_PATH, READYZ_PATH } from "../../lib/socket_api.ts";
import { lines, waitForLine, withCapturedLogs } from "./_logs.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import {
  type KubeTarget,
  REAL_KUBECONFIG,
  removePods,
  testPod,
  withKube,
} from "../daemon/k8s/_target.ts";

const opts = { ignore: !IS_ROOT };

function runtimeEnv(
  command: string,
  ns: TestNetns | undefined,
  containerId: string,
  pod: string,
  uid = "",
) {
  const env: Record<string, string> = {
    CNI_COMMAND: command,
    CNI_CONTAINERID: containerId,
    CNI_IFNAME: "eth0",
    CNI_PATH: "/usr/lib/cni",
    CNI_ARGS:
      `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${pod};K8S_POD_INFRA_CONTAINER_ID=${containerId};K8S_POD_UID=${uid}`,
  };
  if (ns) env.CNI_NETNS = ns.path;
  return env;
}

/** A daemon watching `node` on the target, with the shim installed. */
function withNodeFerry<T>(
  k: KubeTarget,
  node: string,
  fn: (f: TestFerry) => Promise<T>,
  config: Record<string, unknown> = {},
) {
  return withFerry({
    config: { podWaitSeconds: 20, ...config },
    overrides: { standalone: false, kubeconfig: k.kubeconfig, nodeName: node },
  }, async (ferry) => {
    await until(() => ferry.daemon().ready());
    return await fn(ferry);
  });
}

/** {@link withNodeFerry} with NetworkPolicy off (its watch of every pod is not counted). */
function withNodeFerryNoPolicy<T>(
  k: KubeTarget,
  node: string,
  fn: (f: TestFerry) => Promise<T>,
  config: Record<string, unknown> = {},
) {
  return withNodeFerry(k, node, fn, {
    ...config,
    policy: { enabled: false, table: "ferry-policy" },
  });
}

/** The pod's attachments annotation as the API has it, parsed; undefined while it has none. */
async function attachmentsOf(
  k: KubeTarget,
  pod: string,
  // deno-lint-ignore no-explicit-any
): Promise<any | undefined> {
  const raw = (await k.client.get<Pod>(PODS, "default", pod)).metadata?.annotations
    ?.[ATTACHMENTS_ANNOTATION];
  return raw === undefined ? undefined : JSON.parse(raw);
}

async function until(
  cond: () => boolean | Promise<boolean>,
  ms = 15_000,
  what = String(cond),
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`not true within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

Deno.test({
  name:
    "an ADD that starts before its pod exists is served once the watch delivers the pod, and records it on the pod",
  ...opts,
  fn: () =>
    withKube((k) => {
      const node = `node-${k.id}`;
      const name = `early-${k.id}`;
      return withNodeFerry(k, node, (ferry) =>
        withNetns(1, async ([ns]) => {
          const cid = `c${uniqueToken()}`;
          try {
            const adding = ferry.shim(runtimeEnv("ADD", ns, cid, name), netconf());
            await until(() => ferry.daemon().stats().registry!.waiting === 1);
            const pod = await k.client.create<Pod>(PODS, testPod(name, node));
            const add = await adding;
            assertEquals(add.code, 0, add.stdout);
            // The annotation is written after the answer: ADD waited for no API round trip.
            assertEquals(ferry.daemon().stats().apiCallsOnCniPath, 0);
            await until(
              async () => !!(await attachmentsOf(k, name)),
              15_000,
              "the attachment annotation is written",
            );
            const record = await attachmentsOf(k, name);
            assertEquals(record.containerId, cid);
            assertEquals(record.interfaces[0].ifname, "eth0");
            assertEquals(
              record.interfaces[0].ips,
              (add.json!.ips as { address: string }[]).map((i) => i.address),
            );
            assertEquals(ferry.daemon().stats().annotationWrites?.sent, 1);
            // The ADD's time is broken down: most of it was waiting for the pod to appear.
            const phases = ferry.daemon().stats().addPhases!;
            assertEquals(phases.total?.n, 1);
            assert(phases.podWait!.max <= phases.total!.max, JSON.stringify(phases));
            assert(phases.plug!.max < phases.total!.max, JSON.stringify(phases));
            assert(phases.ipam!.max <= phases.plug!.max, JSON.stringify(phases));
            // The annotation write is timed in /metrics, by verb.
            const metrics = await (await fetch(`http://${ferry.daemon().httpAddress}/metrics`))
              .text();
            assertMatch(metrics, /ferry_api_request_duration_seconds_count\{verb="PATCH"\} 1\n/);
            assertMatch(metrics, /ferry_api_request_duration_seconds_count\{verb="GET"\} \d+/);
            assertEquals(
              (await ferry.shim(runtimeEnv("DEL", ns, cid, name, pod.metadata!.uid), netconf()))
                .code,
              0,
            );
          } finally {
            await removePods(k.client, [name]);
          }
        }));
    }),
});

Deno.test({
  name: "an ADD for a pod that never appears fails with try-again-later and leaves nothing behind",
  ...opts,
  fn: () =>
    withKube((k) =>
      withNodeFerry(k, `node-${k.id}`, (ferry) =>
        withNetns(1, async ([ns]) => {
          const cid = `c${uniqueToken()}`;
          const add = await ferry.shim(runtimeEnv("ADD", ns, cid, `ghost-${k.id}`), netconf());
          assertEquals([add.code, add.json!.code], [1, 11]);
          assertMatch(String(add.json!.msg), new RegExp(`default/ghost-${k.id}`));
          assertEquals(await hostLinkExists(hostLinkName(cid, "eth0")), false);
          assertEquals(ferry.daemon().stats().registry!.waiting, 0);
        }), { podWaitSeconds: 0.5 })
    ),
});

Deno.test({
  name: "a DEL carrying an older container ID leaves the running pod plugged",
  ...opts,
  fn: () =>
    withKube((k) => {
      const node = `node-${k.id}`;
      const name = `stale-${k.id}`;
      return withNodeFerry(k, node, (ferry) =>
        withNetns(2, async ([oldNs, ns]) => {
          const [oldCid, cid] = [`old${uniqueToken()}`, `new${uniqueToken()}`];
          try {
            await k.client.create<Pod>(PODS, testPod(name, node));
            // A first sandbox that the runtime abandoned, then the one that runs.
            assertEquals(
              (await ferry.shim(runtimeEnv("ADD", oldNs, oldCid, name), netconf())).code,
              0,
            );
            const add = await ferry.shim(runtimeEnv("ADD", ns, cid, name), netconf());
            assertEquals(add.code, 0);
            const del = await ferry.shim(runtimeEnv("DEL", oldNs, oldCid, name), netconf());
            assertEquals(del.code, 0);
            assertEquals(
              await hostLinkExists(hostLinkName(cid, "eth0")),
              true,
              "the running pod is still plugged",
            );
            assertEquals(
              await hostLinkExists(hostLinkName(oldCid, "eth0")),
              false,
              "the old sandbox is released",
            );
            const check = await ferry.shim(runtimeEnv("CHECK", ns, cid, name), netconf());
            assertEquals(check.code, 0, check.stdout);
            assertEquals((await ferry.shim(runtimeEnv("DEL", ns, cid, name), netconf())).code, 0);
          } finally {
            await removePods(k.client, [name]);
          }
        }));
    }),
});

Deno.test({
  name:
    "a daemon restarted while the API server's watch cache lags keeps a live pod's address: the IP reconcile loop asks the server before releasing",
  // The stand-in's stalled watch cache: a real server's cannot be stalled on demand.
  ignore: !IS_ROOT || !!REAL_KUBECONFIG,
  fn: () =>
    withKube((k) => {
      const node = `node-${k.id}`;
      const name = `lagged-${k.id}`;
      const api = k.standin!;
      return withNodeFerry(k, node, (ferry) =>
        withNetns(1, async ([ns]) => {
          const cid = `c${uniqueToken()}`;
          try {
            const beforePod = api.store.rv;
            await k.client.create<Pod>(PODS, testPod(name, node));
            const add = await ferry.shim(runtimeEnv("ADD", ns, cid, name), netconf());
            assertEquals(add.code, 0, add.stdout);
            await new Promise((r) => setTimeout(r, 1200)); // older than the grace period
            // The cache stopped before the pod was created: the restarted daemon's first list
            // (served from it) and its watch do not have the pod.
            api.stallWatchCache(beforePod);
            await ferry.restartDaemon();
            await until(() => ferry.daemon().ready());
            assertEquals(ferry.daemon().stats().registry?.pods, 0, "the cache lacks the pod");
            await until(() => (ferry.daemon().stats().gc?.sweeps ?? 0) >= 3, 15_000, "3 sweeps");
            await until(() => ferry.daemon().stats().gc?.queued === 0);
            assertEquals(ferry.daemon().stats().gc?.released, 0);
            assert(await hostLinkExists(hostLinkName(cid, "eth0")), "still plugged");
            assertEquals((await ferry.records()).length, 1);
            api.resumeWatchCache();
            await until(() => ferry.daemon().stats().registry?.pods === 1);
            const check = await ferry.shim(runtimeEnv("CHECK", ns, cid, name), netconf());
            assertEquals(check.code, 0, check.stdout);
            await removePods(k.client, [name]);
            const del = await ferry.shim(runtimeEnv("DEL", ns, cid, name), netconf());
            assertEquals(del.code, 0, del.stdout);
          } finally {
            api.resumeWatchCache();
            await removePods(k.client, [name]);
          }
        }), { gc: { graceSeconds: 1, intervalSeconds: 1 } });
    }),
});

Deno.test({
  name:
    "a daemon restarted between ADD and DEL still unplugs and releases, and DEL after the pod is gone succeeds",
  ...opts,
  fn: () =>
    withKube((k) => {
      const node = `node-${k.id}`;
      const name = `restart-${k.id}`;
      return withNodeFerry(k, node, (ferry) =>
        withNetns(1, async ([ns]) => {
          const cid = `c${uniqueToken()}`;
          try {
            await k.client.create<Pod>(PODS, testPod(name, node));
            const add = await ferry.shim(runtimeEnv("ADD", ns, cid, name), netconf());
            assertEquals(add.code, 0);
            await ferry.restartDaemon();
            await until(() => ferry.daemon().ready());
            assertEquals(
              (await ferry.shim(runtimeEnv("ADD", ns, cid, name), netconf())).json,
              add.json,
            );
            await removePods(k.client, [name]);
            const del = await ferry.shim(runtimeEnv("DEL", ns, cid, name), netconf());
            assertEquals(del.code, 0, del.stdout);
            assertEquals(await hostLinkExists(hostLinkName(cid, "eth0")), false);
          } finally {
            await removePods(k.client, [name]);
          }
        }));
    }),
});

Deno.test({
  name: "100 pods created at once are all served by one watch, with one API write per ADD",
  ...opts,
  fn: () =>
    withKube((k) => {
      const node = `node-${k.id}`;
      const names = Array.from({ length: Number(Deno.env.get("FERRY_BULK") ?? 100) }, (_, i) =>
        `bulk${i}-${k.id}`);
      // The node's own pod watch, counted alone: NetworkPolicy's watch of every pod (one more
      // list and watch of pods, tested in network_policy_test.ts) is off here.
      return withNodeFerryNoPolicy(k, node, (ferry) =>
        withNetns(names.length, async (namespaces) => {
          const cids = names.map(() =>
            `c${uniqueToken()}`
          );
          try {
            const adds = Promise.all(
              namespaces.map((ns, i) =>
                ferry.shim(runtimeEnv("ADD", ns, cids[i], names[i]), netconf())
              ),
            );
            await Promise.all(names.map((n) => k.client.create<Pod>(PODS, testPod(n, node))));
            const results = await adds;
            for (const r of results) assertEquals(r.code, 0, r.stdout);
            assertEquals(
              new Set(results.map((r) => JSON.stringify(r.json!.ips))).size,
              names.length,
            );
            await until(() => ferry.daemon().stats().annotationWrites?.pending === 0);
            // One watch stream served them all: one list, no per-pod watch. A real server may end
            // a watch it finds too slow; the informer then resumes it from its resourceVersion
            // (counted once the new watch is open, so an ended one may be awaiting its resumption).
            await until(
              () => {
                const w = ferry.daemon().stats().podWatch!;
                return w.watches === 1 + w.interrupted;
              },
              15_000,
              "every ended watch is resumed",
            );
            const stats = ferry.daemon().stats();
            assertEquals(stats.apiCallsOnCniPath, 0);
            assertEquals(stats.annotationWrites?.sent, names.length, "one write per pod");
            const w = stats.podWatch!;
            assertEquals(w.lists, 1, JSON.stringify(stats));
            assertEquals(w.watches, 1 + w.interrupted, JSON.stringify(stats));
            assert(w.watches <= 3, JSON.stringify(stats));
            if (k.standin) {
              assertEquals(k.standin.stats.requests["WATCH pods"], 1);
              // The pod list and watch and every annotation write asked for metadata only; the
              // list was of any version (a real server's watch cache).
              const { metadataOnly, requests, listsFromCache } = k.standin.stats;
              assertEquals(
                [metadataOnly["GET pods"], metadataOnly["WATCH pods"], metadataOnly["PATCH pods"]],
                [requests["GET pods"], 1, names.length],
              );
              assertEquals(listsFromCache.pods, 1);
            }
            const dels = await Promise.all(
              namespaces.map((ns, i) =>
                ferry.shim(runtimeEnv("DEL", ns, cids[i], names[i]), netconf())
              ),
            );
            for (const d of dels) assertEquals(d.code, 0);
            assertEquals(
              ferry.daemon().stats().apiCallsOnCniPath,
              0,
              "DEL makes no API round trip",
            );
            assertEquals(
              ferry.daemon().stats().annotationWrites?.sent,
              names.length,
              "nor a write",
            );
          } finally {
            await removePods(k.client, names);
          }
        }), {
        network: {
          subnet: `10.${200 + Math.floor(Math.random() * 50)}.${
            Math.floor(Math.random() * 250)
          }.0/24`,
          mtu: 1500,
        },
      });
    }),
});

Deno.test({
  name: "readyz stays 503 until the first pod list has been delivered",
  ...opts,
  ignore: !IS_ROOT || !!REAL_KUBECONFIG,
  fn: () =>
    withKube(async (k) => {
      k.standin!.failRequests({
        method: "GET",
        watch: false,
        status: 503,
        reason: "ServiceUnavailable",
        times: 3,
      });
      // The failures must reach the pod list: NetworkPolicy's lists (off here) would take some.
      await withFerry({
        config: { podWaitSeconds: 5, policy: { enabled: false, table: "ferry-policy" } },
        overrides: { standalone: false, kubeconfig: k.kubeconfig, nodeName: `node-${k.id}` },
      }, async (ferry) => {
        const first = await unixRequest(
          ferry.config.socket,
          "GET",
          READYZ_PATH,
          undefined,
          AbortSignal.timeout(2000),
        );
        assertEquals(first.status, 503);
        await until(() => ferry.daemon().ready());
        const later = await unixRequest(
          ferry.config.socket,
          "GET",
          READYZ_PATH,
          undefined,
          AbortSignal.timeout(2000),
        );
        assertEquals(later.status, 200);
        assert(ferry.daemon().stats().podWatch!.failures >= 3);
      });
    }),
});

Deno.test({
  name:
    "the API server stopping and starting again leaves plugged pods alone, readiness is honest, the watch resumes, and an annotation the outage held back is written after it",
  ...opts,
  fn: () =>
    withKube((k) => {
      const node = `node-${k.id}`;
      const [before, during, after] = [`before-${k.id}`, `during-${k.id}`, `after-${k.id}`];
      return withNodeFerry(k, node, (ferry) =>
        withNetns(3, async ([ns1, ns3, ns2]) => {
          const [c1, c2, c3] = [`c${uniqueToken()}`, `c${uniqueToken()}`, `c${uniqueToken()}`];
          try {
            await k.client.create<Pod>(PODS, testPod(before, node));
            await k.client.create<Pod>(PODS, testPod(during, node));
            assertEquals((await ferry.shim(runtimeEnv("ADD", ns1, c1, before), netconf())).code, 0);
            await until(() => ferry.daemon().stats().registry!.pods === 2);
            await until(
              async () => !!(await attachmentsOf(k, before)),
              15_000,
              "before's annotation",
            );
            await k.stopApi();
            try {
              // The watch delivered the pod before the outage: its ADD is served, and the
              // annotation write fails for as long as the API is away (longer than a few tries).
              const add = await ferry.shim(runtimeEnv("ADD", ns3, c3, during), netconf());
              assertEquals(add.code, 0, add.stdout);
              await until(() => ferry.daemon().stats().annotationWrites!.failed >= 1, 30_000);
              await until(() => !ferry.daemon().ready(), 30_000);
              assertEquals(ferry.daemon().healthy(), false);
              assertEquals(
                await hostLinkExists(hostLinkName(c1, "eth0")),
                true,
                "nothing is unplugged while the API is away",
              );
              const check = await ferry.shim(runtimeEnv("CHECK", ns1, c1, before), netconf());
              assertEquals(check.code, 0, "CHECK is served from the node's own state");
            } finally {
              await k.startApi();
            }
            await until(() => ferry.daemon().ready(), 60_000);
            await until(
              async () => (await attachmentsOf(k, during))?.containerId === c3,
              90_000,
              "the annotation held back by the outage is written",
            );
            // (the GET may see the write before the daemon has read the PATCH's answer)
            await until(() => ferry.daemon().stats().annotationWrites!.pending === 0);
            await k.client.create<Pod>(PODS, testPod(after, node));
            const add = await ferry.shim(runtimeEnv("ADD", ns2, c2, after), netconf());
            assertEquals(add.code, 0, add.stdout);
            assertEquals(await hostLinkExists(hostLinkName(c1, "eth0")), true);
            for (
              const [ns, c, p] of [[ns1, c1, before], [ns3, c3, during], [ns2, c2, after]] as const
            ) {
              assertEquals((await ferry.shim(runtimeEnv("DEL", ns, c, p), netconf())).code, 0);
            }
          } finally {
            await removePods(k.client, [before, during, after]);
          }
        }), {
        apiRequestTimeoutSeconds: 3,
        watch: {
          timeoutSeconds: 300,
          unhealthyAfterSeconds: 1,
          resyncSeconds: 0,
          requestTimeoutSeconds: 3,
        },
      });
    }),
});

Deno.test({
  name:
    "an API server that accepts requests and never answers fails no CNI request; the annotation write times out, is retried, and lands once the server answers",
  ...opts,
  fn: () =>
    withKube((k) => {
      const node = `node-${k.id}`;
      const name = `frozen-${k.id}`;
      return withNodeFerry(k, node, (ferry) =>
        withNetns(1, async ([ns]) => {
          const cid = `c${uniqueToken()}`;
          try {
            const pod = await k.client.create<Pod>(PODS, testPod(name, node));
            await until(() => ferry.daemon().stats().registry!.pods === 1);
            await k.freezeApi();
            try {
              const add = await ferry.shim(runtimeEnv("ADD", ns, cid, name), netconf());
              assertEquals(add.code, 0, add.stdout);
              const check = await ferry.shim(runtimeEnv("CHECK", ns, cid, name), netconf());
              assertEquals(check.code, 0, check.stdout);
              // Three tries, each cut at the 2 s time limit: the write counts as failing and
              // goes on (without a time limit the first try would hang until the thaw).
              await until(() => ferry.daemon().stats().annotationWrites!.failed === 1, 30_000);
              assertEquals(ferry.daemon().stats().annotationWrites!.pending, 1);
            } finally {
              await k.thawApi();
            }
            await until(
              async () => (await attachmentsOf(k, name))?.containerId === cid,
              60_000,
              "the annotation is written once the server answers",
            );
            await until(() => ferry.daemon().stats().annotationWrites!.pending === 0);
            const del = await ferry.shim(
              runtimeEnv("DEL", ns, cid, name, pod.metadata!.uid),
              netconf(),
            );
            assertEquals(del.code, 0, del.stdout);
          } finally {
            await removePods(k.client, [name]);
          }
        }), { apiRequestTimeoutSeconds: 2 });
    }),
});

async function kubectl(kubeconfig: string, stdin: string, ...args: string[]): Promise<string> {
  const out = await runWithInput("kubectl", args, { KUBECONFIG: kubeconfig }, stdin);
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`kubectl ${args.join(" ")}: ${text}`);
  return text;
}

Deno.test({
  name: "a Node and a pod bound to it, created with kubectl as an operator would, are served",
  // kubectl needs the API's discovery documents, which only a real server has.
  ignore: !IS_ROOT || !REAL_KUBECONFIG,
  fn: () =>
    withKube((k) => {
      const node = `kubectl-node-${k.id}`;
      const pod = `kubectl-pod-${k.id}`;
      const manifest = `
apiVersion: v1
kind: Node
metadata: {name: ${node}, labels: {ferry.dev/test: "true"}}
---
apiVersion: v1
kind: Pod
metadata: {name: ${pod}, namespace: default}
spec:
  nodeName: ${node}
  containers: [{name: app, image: registry.invalid/app:1}]
`;
      return withNodeFerry(k, node, (ferry) =>
        withNetns(1, async ([ns]) => {
          const cid = `c${uniqueToken()}`;
          try {
            await kubectl(k.kubeconfig, manifest, "apply", "-f", "-");
            const uid =
              (await kubectl(k.kubeconfig, "", "get", "pod", pod, "-o", "jsonpath={.metadata.uid}"))
                .trim();
            const add = await ferry.shim(runtimeEnv("ADD", ns, cid, pod, uid), netconf());
            assertEquals(add.code, 0, add.stdout);
            const recorded = await kubectl(
              k.kubeconfig,
              "",
              "get",
              "pod",
              pod,
              "-o",
              `jsonpath={.metadata.annotations.ferry\\.dev/attachments}`,
            );
            assertEquals(JSON.parse(recorded).containerId, cid);
            assertEquals(
              (await ferry.shim(runtimeEnv("DEL", ns, cid, pod, uid), netconf())).code,
              0,
            );
          } finally {
            await kubectl(
              k.kubeconfig,
              "",
              "delete",
              "pod",
              pod,
              "--grace-period=0",
              "--force",
              "--ignore-not-found",
            ).catch(() => {});
            await kubectl(k.kubeconfig, "", "delete", "node", node, "--ignore-not-found").catch(
              () => {},
            );
          }
        }));
    }),
});

Deno.test({
  name:
    "ipam.mode kubernetes: the daemon waits for its Node's podCIDRs, then hands out addresses from them",
  ...opts,
  fn: () =>
    withKube(async (k) => {
      const node = `cidr-node-${k.id}`;
      const name = `cidr-pod-${k.id}`;
      const podCIDR = testSubnet();
      await k.client.create<Node>(NODES, { metadata: { name: node }, spec: {} });
      try {
        await withFerry({
          config: { podWaitSeconds: 20, ipam: { mode: "kubernetes" } },
          overrides: { standalone: false, kubeconfig: k.kubeconfig, nodeName: node },
        }, (ferry) =>
          withNetns(1, async ([ns]) => {
            // Serving, but not ready: the node has no range yet, and the stats say why.
            await until(() => (ferry.daemon().stats().nodes ?? 0) > 0, 15_000, "the node is seen");
            assertEquals(ferry.daemon().ready(), false);
            assertMatch(String(ferry.daemon().stats().network?.waitingFor), /no spec.podCIDRs/);
            const current = await k.client.get<Node>(NODES, undefined, node);
            await k.client.update<Node>(NODES, {
              ...current,
              spec: { ...current.spec, podCIDR: podCIDR, podCIDRs: [podCIDR] },
            });
            await until(() => ferry.daemon().ready(), 15_000, "ready once the range is set");
            const pod = await k.client.create<Pod>(PODS, testPod(name, node));
            const cid = `c${uniqueToken()}`;
            try {
              const add = await ferry.shim(
                runtimeEnv("ADD", ns, cid, name, pod.metadata!.uid),
                netconf(),
              );
              assertEquals(add.code, 0, add.stdout);
              const ip = (add.json!.ips as { address: string }[])[0].address;
              assertEquals(ip.split(".").slice(0, 3), podCIDR.split(".").slice(0, 3));
              const del = await ferry.shim(
                runtimeEnv("DEL", ns, cid, name, pod.metadata!.uid),
                netconf(),
              );
              assertEquals(del.code, 0);
            } finally {
              await removePods(k.client, [name]);
            }
          }));
      } finally {
        await k.client.delete(NODES, undefined, node).catch(() => {});
      }
    }),
});

Deno.test({
  name:
    "the daemon gives the memory its first lists freed back once it is quiet after them, with no request at all",
  ...opts,
  fn: () =>
    withKube((k) =>
      withFerry({
        config: { podWaitSeconds: 20 },
        overrides: { standalone: false, kubeconfig: k.kubeconfig, nodeName: `trim-${k.id}` },
        daemon: { trimQuietMs: 300 },
      }, async (ferry) => {
        await until(() => ferry.daemon().ready());
        await until(() => ferry.daemon().stats().memoryTrims === 1, 5000);
        assertEquals(ferry.daemon().stats().cniRequests, {}, "no request was served");
      })
    ),
});

Deno.test({
  name:
    "an ADD whose shim gave up while its pod was not in the watch is logged and counted as abandoned, never as error 999",
  ...opts,
  fn: () =>
    withCapturedLogs((records) =>
      withKube((k) => {
        const node = `node-${k.id}`;
        // A pod the API never shows (as while the API is unreachable): the ADD waits for it.
        const name = `never-${k.id}`;
        return withNodeFerry(k, node, (ferry) =>
          withNetns(1, async ([ns]) => {
            const cid = `c${uniqueToken()}`;
            const hangUp = new AbortController();
            const sent = unixRequest(
              ferry.config.socket,
              "POST",
              CNI_REQUEST_PATH,
              JSON.stringify({
                command: "ADD",
                containerId: cid,
                netns: ns.path,
                ifname: "eth0",
                args: { K8S_POD_NAMESPACE: "default", K8S_POD_NAME: name },
                path: ["/usr/lib/cni"],
                config: JSON.parse(netconf()),
              }),
              hangUp.signal,
            ).catch((e) => e);
            await until(() => ferry.daemon().stats().registry!.waiting === 1);
            hangUp.abort(); // the shim's own deadline passed
            await sent;
            const line = await waitForLine(records, "abandoned by its requester");
            assertEquals(
              line,
              `info ADD of pod default/${name}, container ${cid}, eth0: abandoned by its requester, rolled back`,
            );
            assertEquals(
              lines(records).filter((l) => l.includes("code 999")),
              [],
              "nothing logged as an internal error",
            );
            const metrics = await (await fetch(`http://${ferry.daemon().httpAddress}/metrics`))
              .text();
            assertMatch(metrics, /^ferry_cni_abandoned_total\{command="ADD"\} 1$/m);
            await until(() => ferry.daemon().stats().registry!.waiting === 0);
            assertEquals(await ferry.records(), []);
            assertEquals(await ferry.allocations(), []);
          }));
      })
    ),
});
