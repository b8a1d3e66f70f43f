// NetworkPolicy enforced by the node daemons on the simulated cluster (daemon/dev/cluster_sim.ts),
// on the stand-in or, in `test:real`, on a real kube-apiserver: TCP between pods on one node
// (bridged) and across nodes (routed), a deny-all policy, an allowing rule by pod label and named
// port, namespace selectors, egress, a pod created under a policy, and the table gone once the
// policies are. Needs root and nft.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import type { Event } from "kubernetes-types/core/v1.d.ts";
import { type SimPod, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { IS_ROOT, run, type TestNetns } from "../../daemon/dev/netns.ts";
import { EVENTS, NAMESPACES, NETWORK_POLICIES, PODS } from "../../daemon/k8s/resources.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { eventually } from "./_cluster.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { STATS_PATH } from "../../lib/socket_api.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft, sanitizeResources: false, sanitizeOps: false };
const PORT = 8080;

/** A TCP server in `ns` on PORT that accepts and closes; stopped by the returned function. */
function listen(ns: TestNetns): () => void {
  const child = new Deno.Command("ip", {
    args: [
      "netns",
      "exec",
      ns.name,
      "python3",
      "-c",
      "import socket\ns=socket.socket(socket.AF_INET6 if False else socket.AF_INET)\n" +
      `s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('0.0.0.0',${PORT}))\n` +
      "s.listen(64)\nwhile True:\n  c,_=s.accept()\n  c.close()\n",
    ],
    stdout: "null",
    stderr: "null",
  }).spawn();
  return () => {
    try {
      child.kill("SIGKILL");
    } catch { /* gone */ }
  };
}

/** Whether a TCP connection from `from` to `to`:PORT is accepted within 1 s. */
async function connects(from: SimPod, to: SimPod): Promise<boolean> {
  const out = await new Deno.Command("ip", {
    args: [
      "netns",
      "exec",
      from.ns.name,
      "python3",
      "-c",
      `import socket\nsocket.create_connection(('${to.ip}',${PORT}),timeout=1).close()`,
    ],
    stdout: "null",
    stderr: "null",
  }).output();
  return out.success;
}

function policy(name: string, spec: NetworkPolicy["spec"]): NetworkPolicy {
  return { metadata: { name, namespace: "default" }, spec };
}

Deno.test({
  name:
    "NetworkPolicy on two nodes: deny-all isolates a pod on its node and across nodes; a rule by label and named port lets one client in; egress limits a client; a pod created under a policy is never open; a second pod the same rules isolate writes its own rules in-process and is limited from its first moment; a relabelled pod follows its labels; no policy, no table",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 2 }, async (c) => {
      const [n0, n1] = c.nodes;
      const ports = [{ name: "http", containerPort: PORT }];
      const db = await c.addPod(n0, "db", 0, { labels: { app: "db" }, ports });
      const near = await c.addPod(n0, "near", 0, { labels: { app: "other" }, ports });
      const web = await c.addPod(n1, "web", 0, { labels: { app: "web" }, ports });
      const stops = [db, near, web].map((p) => listen(p.ns));
      const created: string[] = [];
      const apply = async (p: NetworkPolicy) => {
        await c.client.create(NETWORK_POLICIES, p);
        created.push(p.metadata!.name!);
      };
      try {
        await eventually(async () => await connects(web, db) && await connects(near, db), "open");
        // Deny-all ingress for app=db: nothing gets in, on its node or from the other.
        await apply(policy("db-deny", {
          podSelector: { matchLabels: { app: "db" } },
          policyTypes: ["Ingress"],
        }));
        await eventually(
          async () => !(await connects(web, db)) && !(await connects(near, db)),
          "db isolated",
        );
        assert(await connects(db, web), "egress of db is not isolated");
        // Allowed: app=web on the port db names "http"; app=other stays out.
        await apply(policy("db-from-web", {
          podSelector: { matchLabels: { app: "db" } },
          ingress: [{
            from: [{ podSelector: { matchLabels: { app: "web" } } }],
            ports: [{ port: "http" }],
          }],
        }));
        await eventually(() => connects(web, db), "web reaches db");
        assertEquals(await connects(near, db), false, "other still out");
        // A namespace selector that does not match default lets nobody more in; one that does
        // (a label on default) lets every pod of it in.
        await apply(policy("db-from-team", {
          podSelector: { matchLabels: { app: "db" } },
          ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: "blue" } } }] }],
        }));
        await new Promise((r) => setTimeout(r, 1000));
        assertEquals(await connects(near, db), false);
        await c.client.patchMerge(NAMESPACES, undefined, "default", {
          metadata: { labels: { team: "blue" } },
        });
        try {
          await eventually(() => connects(near, db), "a namespace selector lets near in");
        } finally {
          await c.client.patchMerge(NAMESPACES, undefined, "default", {
            metadata: { labels: { team: null } },
          });
        }
        await eventually(async () => !(await connects(near, db)), "label gone, near out again");
        // A new pod under the policies: closed to app=other from its first moment.
        const db2 = await c.addPod(n1, "db2", 0, { labels: { app: "db" }, ports });
        stops.push(listen(db2.ns));
        for (let i = 0; i < 10; i++) {
          assertEquals(await connects(near, db2), false, "db2 reachable by app=other");
        }
        await eventually(() => connects(web, db2), "web reaches the new db");
        // A pod relabelled into a policy's selection is isolated; relabelled out, open again.
        await c.client.patchMerge(PODS, "default", near.name, {
          metadata: { labels: { app: "db" } },
        });
        await eventually(async () => !(await connects(db, near)), "near, now app=db, isolated");
        await c.client.patchMerge(PODS, "default", near.name, {
          metadata: { labels: { app: "other" } },
        });
        await eventually(() => connects(db, near), "near, app=other again, open");
        // Egress: web may reach only app=db on 8080.
        await apply(policy("web-out", {
          podSelector: { matchLabels: { app: "web" } },
          policyTypes: ["Egress"],
          egress: [{
            to: [{ podSelector: { matchLabels: { app: "db" } } }],
            ports: [{ port: PORT }],
          }],
        }));
        await eventually(async () => !(await connects(web, near)), "web's egress limited");
        assert(await connects(web, db), "web still reaches db");
        // A second app=web pod on web's node: the rules that isolate web isolate it too, so its
        // ADD writes its own chain and map entries in-process, and it is limited from its first
        // moment all the same.
        const web2 = await c.addPod(n1, "web2", 0, { labels: { app: "web" }, ports });
        for (let i = 0; i < 10; i++) {
          assertEquals(await connects(web2, near), false, "web2 reached app=other");
        }
        const stats = JSON.parse(
          (await unixRequest(n1.socket, "GET", STATS_PATH, undefined, AbortSignal.timeout(5000)))
            .body,
        ) as { policy?: { podWrites: number } };
        assert((stats.policy?.podWrites ?? 0) >= 1, JSON.stringify(stats.policy));
        await eventually(() => connects(web2, db), "web2 reaches db (now a peer there)");
        const table = await run(
          "ip",
          "netns",
          "exec",
          n0.ns.name,
          "nft",
          "list",
          "table",
          "inet",
          "ferry-policy",
        );
        assert(table.includes("db-from-web"), table);
        // Every policy gone: open again, and no table on any node.
        for (const name of created.splice(0)) {
          await c.client.delete(NETWORK_POLICIES, "default", name);
        }
        await eventually(
          async () => await connects(near, db) && await connects(web, near),
          "open again",
        );
        for (const n of c.nodes) {
          await eventually(async () =>
            (await new Deno.Command("ip", {
              args: ["netns", "exec", n.ns.name, "nft", "list", "table", "inet", "ferry-policy"],
              stdout: "null",
              stderr: "null",
            }).output()).code !== 0, `${n.name} has no policy table`);
        }
      } finally {
        for (const stop of stops) stop();
        for (const name of created) {
          await c.client.delete(NETWORK_POLICIES, "default", name).catch(() => {});
        }
      }
    }),
});

Deno.test({
  name:
    "a policy changed while connections are open: an established connection keeps flowing both ways, new ones follow the change (denied, then allowed again)",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 1 }, async (c) => {
      const [n0] = c.nodes;
      const srv = await c.addPod(n0, "srv", 0, { labels: { app: "srv" } });
      const cli = await c.addPod(n0, "cli", 0, { labels: { role: "client" } });
      // An echo server, and a client that holds one connection open, echoing every 100 ms and
      // writing a line per round trip (or its failure) until told to stop.
      const echo = new Deno.Command("ip", {
        args: [
          "netns",
          "exec",
          srv.ns.name,
          "python3",
          "-c",
          "import socket, threading\ns=socket.socket()\n" +
          "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n" +
          `s.bind(('0.0.0.0',${PORT}))\ns.listen(64)\n` +
          "def serve(c):\n  while True:\n    d=c.recv(64)\n    if not d: break\n    c.sendall(d)\n" +
          "while True:\n  c,_=s.accept()\n  threading.Thread(target=serve,args=(c,),daemon=True).start()\n",
        ],
        stdout: "null",
        stderr: "null",
      }).spawn();
      const stopFile = await Deno.makeTempFile();
      await Deno.remove(stopFile);
      const created: string[] = [];
      let held: Deno.ChildProcess | undefined;
      try {
        await eventually(() => connects(cli, srv), "open");
        held = new Deno.Command("ip", {
          args: [
            "netns",
            "exec",
            cli.ns.name,
            "python3",
            "-c",
            "import socket, time, os\n" +
            `s=socket.create_connection(('${srv.ip}',${PORT}),timeout=0.5)\n` +
            `while not os.path.exists('${stopFile}'):\n` +
            "  try:\n    s.sendall(b'x')\n    ok = s.recv(8) == b'x'\n  except Exception:\n    ok = False\n" +
            "  print('ok' if ok else 'fail', flush=True)\n  time.sleep(0.1)\n",
          ],
          stdout: "piped",
          stderr: "null",
        }).spawn();
        // Its lines as they come: the policy is created only once the connection is open (a
        // python started slowly on a busy machine would otherwise connect after it, and fail).
        const lines: string[] = [];
        const reading = (async () => {
          let rest = "";
          for await (const chunk of held!.stdout.pipeThrough(new TextDecoderStream())) {
            const parts = (rest + chunk).split("\n");
            rest = parts.pop()!;
            lines.push(...parts);
          }
        })();
        await eventually(() => Promise.resolve(lines.length >= 3), "the held connection echoing");
        await c.client.create(
          NETWORK_POLICIES,
          policy("srv-closed", {
            podSelector: { matchLabels: { app: "srv" } },
            policyTypes: ["Ingress"],
          }),
        );
        created.push("srv-closed");
        await eventually(async () => !(await connects(cli, srv)), "new connections denied");
        // Longer than the held connection's half-second wait for each echo.
        await new Promise((r) => setTimeout(r, 2000));
        await c.client.delete(NETWORK_POLICIES, "default", created.pop()!);
        await eventually(() => connects(cli, srv), "new connections allowed again");
        await new Promise((r) => setTimeout(r, 500));
        await Deno.writeTextFile(stopFile, "");
        await held.status;
        await reading;
        const out = lines;
        assert(out.length >= 5, out.join(" "));
        assertEquals(out.filter((l) => l !== "ok"), [], "the established connection never failed");
      } finally {
        await Deno.writeTextFile(stopFile, "").catch(() => {});
        for (const name of created) {
          await c.client.delete(NETWORK_POLICIES, "default", name).catch(() => {});
        }
        try {
          echo.kill("SIGKILL");
        } catch { /* gone */ }
        await echo.status;
        await held?.status;
        await Deno.remove(stopFile).catch(() => {});
      }
    }),
});

/**
 * The policy shape (#42 item 4): selecting `app`, letting app=client in and 40 ipBlocks
 * of 100 excepts each on 40 ports, 4,080 entries.
 */
function hogPolicy(name: string, app: string): NetworkPolicy {
  return policy(name, {
    podSelector: { matchLabels: { app } },
    ingress: [{
      from: [
        { podSelector: { matchLabels: { app: "client" } } },
        ...Array.from({ length: 40 }, (_, b) => ({
          ipBlock: {
            cidr: `10.${b}.0.0/16`,
            except: Array.from({ length: 100 }, (_, e) => `10.${b}.${2 * e}.0/24`),
          },
        })),
      ],
      ports: Array.from({ length: 40 }, (_, p) => ({ port: PORT - 20 + p })),
    }],
  });
}

Deno.test({
  name:
    "a tenant's oversized policies are refused and fail closed, with an Event on each; another tenant's isolated pods are plugged and reached meanwhile; once deleted they are forgotten",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 1 }, async (c) => {
      const [n0] = c.nodes;
      const hog = await c.addPod(n0, "hog", 0, { labels: { app: "hog" } });
      const client = await c.addPod(n0, "client", 0, { labels: { app: "client" } });
      const victim = await c.addPod(n0, "victim", 0, { labels: { app: "victim" } });
      const stops = [hog, victim].map((p) => listen(p.ns));
      const names = Array.from({ length: 12 }, (_, i) => `hog-${i}`);
      const stats = async () =>
        (JSON.parse(
          (await unixRequest(n0.socket, "GET", STATS_PATH, undefined, AbortSignal.timeout(5000)))
            .body,
        ) as { policy?: { policies: number; refusedPolicies: number } }).policy;
      try {
        await c.client.create(
          NETWORK_POLICIES,
          policy("victim-in", {
            podSelector: { matchLabels: { app: "victim" } },
            ingress: [{ from: [{ podSelector: { matchLabels: { app: "client" } } }] }],
          }),
        );
        for (const name of names) await c.client.create(NETWORK_POLICIES, hogPolicy(name, "hog"));
        // Refused as a whole: hog is isolated, and not even app=client (which they allow) gets in.
        await eventually(async () => (await stats())?.refusedPolicies === names.length, "refused");
        await eventually(async () => !(await connects(client, hog)), "hog isolated");
        for (let i = 0; i < 5; i++) {
          assertEquals(await connects(client, hog), false, "a refused policy's rule let client in");
        }
        await eventually(async () => {
          const { items } = await c.client.listAll<Event>(EVENTS, { namespace: "default" });
          const told = new Set(
            items.filter((e) => e.reason === "PolicyTooLarge").map((e) => e.involvedObject?.name),
          );
          return names.every((n) => told.has(n));
        }, "a PolicyTooLarge Event on every hog policy");
        // The other tenant: an isolated pod plugged now is in place, and reached as allowed.
        const victim2 = await c.addPod(n0, "victim2", 0, { labels: { app: "victim" } });
        stops.push(listen(victim2.ns));
        await eventually(() => connects(client, victim2), "client reaches the new victim");
        assert(await connects(client, victim), "client reaches victim");
        assertEquals(await connects(hog, victim), false, "victim-in lets only app=client in");
        // Deleted: forgotten, and hog open again.
        for (const name of names) await c.client.delete(NETWORK_POLICIES, "default", name);
        await eventually(async () => {
          const s = await stats();
          return s?.policies === 1 && s.refusedPolicies === 0;
        }, "the deleted policies forgotten");
        await eventually(() => connects(client, hog), "hog open again");
      } finally {
        for (const stop of stops) stop();
        for (const name of ["victim-in", ...names]) {
          await c.client.delete(NETWORK_POLICIES, "default", name).catch(() => {});
        }
      }
    }),
});
