// NetworkPolicy as a truth table (the upstream Netpol e2e idea): four pods on two simulated nodes,
// dual stack, each serving TCP 80 (named "web") and UDP 81 (named "dns"); for each policy case,
// every pod probes every other one over both protocols and both families, and the whole matrix
// must equal what the policy semantics (daemon/policy/explain.ts) say, which the nodes' tables
// implement. On the stand-in and, in `test:real`, a real kube-apiserver. Needs root and nft.
import { assertEquals } from "deno-std/assert/mod.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import { type SimPod, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { IS_ROOT } from "../../daemon/dev/netns.ts";
import { NETWORK_POLICIES } from "../../daemon/k8s/resources.ts";
import { explain } from "../../daemon/policy/explain.ts";
import type { PolicyPod, Protocol } from "../../daemon/policy/compile.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft, sanitizeResources: false, sanitizeOps: false };

const SERVE = `
import socket, threading
def tcp():
  s = socket.socket(socket.AF_INET6); s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
  s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('::', 80)); s.listen(64)
  while True:
    c, _ = s.accept(); c.close()
def udp():
  s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
  s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0); s.bind(('::', 81))
  while True:
    d, a = s.recvfrom(64); s.sendto(d, a)
threading.Thread(target=tcp, daemon=True).start(); udp()
`;

const PROBE = `
import socket, sys, json
from concurrent.futures import ThreadPoolExecutor
def probe(target):
  ip, proto = target
  fam = socket.AF_INET6 if ':' in ip else socket.AF_INET
  try:
    if proto == 'TCP':
      s = socket.socket(fam); s.settimeout(0.5); s.connect((ip, 80)); s.close()
    else:
      s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(0.5); s.sendto(b'x', (ip, 81)); s.recv(8)
    return True
  except Exception:
    return False
targets = json.loads(sys.argv[1])
with ThreadPoolExecutor(len(targets)) as pool:
  seen = list(pool.map(probe, targets))
print(json.dumps({t[0] + ' ' + t[1]: r for t, r in zip(targets, seen)}))
`;

/** The pods of the table: name, node index, labels. */
const PODS: [string, number, Record<string, string>][] = [
  ["a", 0, { app: "a", role: "x" }],
  ["b", 0, { app: "b", role: "y" }],
  ["c", 1, { app: "c", role: "x" }],
  ["d", 1, { app: "d", role: "y" }],
];

const PORTS = [
  { name: "web", containerPort: 80, protocol: "TCP" as const },
  { name: "dns", containerPort: 81, protocol: "UDP" as const },
];

/** The table's name of a simulated pod (the simulation adds a suffix of its own). */
const baseName = (p: SimPod) => p.name.split("-")[0];

/** Every pod's view of every other one: `from → to family proto` → reachable. */
type Matrix = Record<string, boolean>;

async function probeAll(pods: SimPod[]): Promise<Matrix> {
  const out: Matrix = {};
  await Promise.all(pods.map(async (from) => {
    const targets = pods.filter((p) => p !== from).flatMap((p) =>
      [p.ip, p.ip6!].flatMap((ip) => [[ip, "TCP"], [ip, "UDP"]])
    );
    const res = await new Deno.Command("ip", {
      args: ["netns", "exec", from.ns.name, "python3", "-c", PROBE, JSON.stringify(targets)],
      stdout: "piped",
      stderr: "null",
    }).output();
    const seen = JSON.parse(new TextDecoder().decode(res.stdout)) as Record<string, boolean>;
    for (const to of pods.filter((p) => p !== from)) {
      for (const [family, ip] of [["v4", to.ip], ["v6", to.ip6!]]) {
        for (const proto of ["TCP", "UDP"]) {
          out[`${from.name} → ${to.name} ${family} ${proto}`] = seen[`${ip} ${proto}`];
        }
      }
    }
  }));
  return out;
}

/** What the semantics say of every pair under `policies`. */
function expected(pods: SimPod[], policies: NetworkPolicy[]): Matrix {
  const out: Matrix = {};
  const asPolicyPod = (p: SimPod, ip: string): PolicyPod => ({
    namespace: "default",
    name: p.name,
    labels: PODS.find(([n]) => n === baseName(p))![2],
    ips: [ip],
    hostNetwork: false,
    done: false,
    ports: PORTS.map((x) => ({ name: x.name, port: x.containerPort, protocol: x.protocol })),
  });
  for (const family of ["v4", "v6"] as const) {
    const ipOf = (p: SimPod) => family === "v4" ? p.ip : p.ip6!;
    const view = {
      policies,
      namespaces: new Map([["default", { team: "t" }]]),
      pods: pods.map((p) => asPolicyPod(p, ipOf(p))),
    };
    for (const from of pods) {
      for (const to of pods.filter((p) => p !== from)) {
        for (const proto of ["TCP", "UDP"] as Protocol[]) {
          const port = proto === "TCP" ? 80 : 81;
          out[`${from.name} → ${to.name} ${family} ${proto}`] = explain(
            view,
            view.pods.find((p) => p.name === from.name)!,
            view.pods.find((p) => p.name === to.name)!,
            proto,
            port,
          ).allowed;
        }
      }
    }
  }
  return out;
}

function np(name: string, spec: NetworkPolicy["spec"]): NetworkPolicy {
  return { metadata: { name, namespace: "default" }, spec };
}

/** The cases: each a set of policies, generated over selectors, peers, ports and directions. */
function cases(pods: SimPod[]): [string, NetworkPolicy[]][] {
  const ip = (name: string) => pods.find((p) => baseName(p) === name)!;
  return [
    ["no policy", []],
    ["deny all ingress to app in (a, c)", [np("t1", {
      podSelector: { matchExpressions: [{ key: "app", operator: "In", values: ["a", "c"] }] },
      policyTypes: ["Ingress"],
    })]],
    ["ingress to role=x from role=y on the port named web", [np("t2", {
      podSelector: { matchLabels: { role: "x" } },
      ingress: [{
        from: [{ podSelector: { matchLabels: { role: "y" } } }],
        ports: [{ port: "web" }],
      }],
    })]],
    ["egress of role=y only to app=c on UDP 81, and the namespace by label on TCP 79-80", [
      np("t3", {
        podSelector: { matchLabels: { role: "y" } },
        policyTypes: ["Egress"],
        egress: [
          {
            to: [{ podSelector: { matchLabels: { app: "c" } } }],
            ports: [{ protocol: "UDP", port: 81 }],
          },
          {
            to: [{ namespaceSelector: { matchLabels: { team: "t" } } }],
            ports: [{ port: 79, endPort: 80 }],
          },
        ],
      }),
    ]],
    ["ingress to d from an ipBlock of both families except a's addresses; app NotIn (d) open", [
      np("t4", {
        podSelector: { matchLabels: { app: "d" } },
        ingress: [{
          from: [
            {
              ipBlock: {
                cidr: `${ip("a").ip.split(".").slice(0, 2).join(".")}.0.0/16`,
                except: [`${ip("a").ip}/32`],
              },
            },
            {
              ipBlock: {
                cidr: `${ip("a").ip6!.split(":").slice(0, 2).join(":")}::/32`,
                except: [`${ip("a").ip6}/128`],
              },
            },
          ],
        }],
      }),
    ]],
    [
      "ingress to d from blocks that add up: a /16 less a's /24 and b's address, then a's address again",
      [
        np("t8", {
          podSelector: { matchLabels: { app: "d" } },
          ingress: [{
            from: [
              {
                ipBlock: {
                  cidr: `${ip("a").ip.split(".").slice(0, 2).join(".")}.0.0/16`,
                  except: [
                    `${ip("a").ip.split(".").slice(0, 3).join(".")}.0/24`,
                    `${ip("b").ip}/32`,
                  ],
                },
              },
              { ipBlock: { cidr: `${ip("a").ip}/32` } },
              {
                ipBlock: {
                  cidr: `${ip("a").ip6!.split(":").slice(0, 2).join(":")}::/32`,
                  except: [`${ip("a").ip6}/128`, `${ip("b").ip6}/128`],
                },
              },
              { ipBlock: { cidr: `${ip("b").ip6}/128` } },
            ],
          }],
        }),
      ],
    ],
    ["two policies add up: role=x open to app=b (any port), and to app=d on UDP", [
      np("t5", {
        podSelector: { matchLabels: { role: "x" } },
        ingress: [{ from: [{ podSelector: { matchLabels: { app: "b" } } }] }],
      }),
      np("t6", {
        podSelector: { matchLabels: { role: "x" } },
        ingress: [{
          from: [{
            podSelector: {
              matchExpressions: [{ key: "app", operator: "Exists" }, {
                key: "role",
                operator: "NotIn",
                values: ["x"],
              }],
            },
          }],
          ports: [{ protocol: "UDP" }],
        }],
      }),
    ]],
    ["egress deny-all for a", [
      np("t7", { podSelector: { matchLabels: { app: "a" } }, policyTypes: ["Egress"] }),
    ]],
  ];
}

Deno.test({
  name:
    "NetworkPolicy truth table: for each generated case, every pod's reach to every other one, TCP and UDP, IPv4 and IPv6, across nodes and on one, is what the semantics say",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 2, dualStack: true }, async (c) => {
      const pods: SimPod[] = [];
      for (const [name, node, labels] of PODS) {
        pods.push(await c.addPod(c.nodes[node], name, 30_000, { labels, ports: PORTS }));
      }
      const servers = pods.map((p) =>
        new Deno.Command("ip", {
          args: ["netns", "exec", p.ns.name, "python3", "-c", SERVE],
          stdout: "null",
          stderr: "null",
        }).spawn()
      );
      await c.client.patchMerge(
        (await import("../../daemon/k8s/resources.ts")).NAMESPACES,
        undefined,
        "default",
        { metadata: { labels: { team: "t" } } },
      );
      try {
        for (const [what, policies] of cases(pods)) {
          for (const p of policies) await c.client.create(NETWORK_POLICIES, p);
          const want = expected(pods, policies);
          let got: Matrix = {};
          const deadline = Date.now() + 20_000;
          const same = () => Object.keys(want).every((k) => got[k] === want[k]);
          do {
            got = await probeAll(pods);
          } while (!same() && Date.now() < deadline);
          const wrong = Object.keys(want).filter((k) => got[k] !== want[k])
            .map((k) =>
              `${k}: ${got[k] ? "reached" : "blocked"}, the semantics say ${
                want[k] ? "allowed" : "denied"
              }`
            );
          assertEquals(wrong, [], what);
          for (const p of policies) {
            await c.client.delete(NETWORK_POLICIES, "default", p.metadata!.name!);
          }
        }
      } finally {
        for (const s of servers) {
          try {
            s.kill("SIGKILL");
          } catch { /* gone */ }
          await s.status;
        }
        await c.client.patchMerge(
          (await import("../../daemon/k8s/resources.ts")).NAMESPACES,
          undefined,
          "default",
          { metadata: { labels: { team: null } } },
        ).catch(() => {});
      }
    }),
});
