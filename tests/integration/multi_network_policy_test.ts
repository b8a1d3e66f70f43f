// MultiNetworkPolicy enforced by the node daemon on pods' additional interfaces, on the simulated
// cluster (stand-in, or a real kube-apiserver in `test:real`): a NAD bridge shared by three pods;
// a deny-all policy for that network isolates the server's net1 and leaves its eth0 alone; a rule
// by label lets one client in over net1; a pod created under the policy is closed from its first
// moment; a policy for another network changes nothing; no policy, no table in the pod. Needs
// root and nft.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { IS_ROOT, pingOnce, run, type TestNetns } from "../../daemon/dev/netns.ts";
import type { KubeObject } from "../../daemon/k8s/client.ts";
import {
  EVENTS,
  MULTI_NETWORK_POLICIES,
  NAMESPACES,
  PODS,
  type ResourceType,
} from "../../daemon/k8s/resources.ts";
import { type MultiPolicy, POLICY_FOR_ANNOTATION } from "../../daemon/policy/multi_policy.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { eventually } from "./_cluster.ts";
import { withNads } from "./_nads.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft, sanitizeResources: false, sanitizeOps: false };

/** ServiceAccounts (a tenant namespace's `default`, which pods need on a real server). */
const SERVICE_ACCOUNTS: ResourceType = {
  group: "",
  version: "v1",
  plural: "serviceaccounts",
  kind: "ServiceAccount",
  namespaced: true,
};

/** The IPv4 address of `dev` in `ns`. */
async function addressOf(ns: TestNetns, dev: string): Promise<string> {
  const [link] = JSON.parse(await run("ip", "-n", ns.name, "-j", "addr", "show", "dev", dev)) as {
    addr_info: { family: string; local: string }[];
  }[];
  return link.addr_info.find((a) => a.family === "inet")!.local;
}

/** The nftables tables inside `ns`. */
async function tablesIn(ns: TestNetns): Promise<string> {
  return await run("ip", "netns", "exec", ns.name, "nft", "list", "tables");
}

Deno.test({
  name:
    "MultiNetworkPolicy on a NAD bridge: deny-all isolates the server's net1 (not its eth0); a rule by label lets one client in; a pod created under the policy is never open; a policy for another network does nothing; no policy, no table",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 1, multiNetworkPolicy: true },
      (c) =>
        withNads(c, async (nads) => {
          const t = nads.t;
          const nad = `mnp-${t}`;
          const other = `mnp-other-${t}`;
          const made: [typeof MULTI_NETWORK_POLICIES, string][] = [];
          const create = async (rt: typeof MULTI_NETWORK_POLICIES, obj: KubeObject) => {
            await c.client.create(rt, obj);
            made.push([rt, obj.metadata!.name!]);
          };
          const policy = (name: string, network: string, spec: MultiPolicy["spec"]) =>
            create(MULTI_NETWORK_POLICIES, {
              metadata: {
                name,
                namespace: "default",
                annotations: { [POLICY_FOR_ANNOTATION]: network },
              },
              spec,
            } as KubeObject);
          try {
            for (const [name, subnet] of [[nad, "192.168.86.0/24"], [other, "192.168.87.0/24"]]) {
              await nads.create(name, {
                cniVersion: "1.0.0",
                type: "bridge",
                bridge: `fym${name === nad ? "a" : "b"}${t}`,
                ipam: { type: "host-local", ranges: [[{ subnet }]] },
              });
            }
            const node = c.nodes[0];
            const on = { "k8s.v1.cni.cncf.io/networks": nad };
            const srv = await c.addPod(node, "srv", 30_000, {
              annotations: on,
              labels: { app: "srv" },
            });
            const ok = await c.addPod(node, "ok", 30_000, {
              annotations: on,
              labels: { role: "client" },
            });
            const no = await c.addPod(node, "no", 30_000, {
              annotations: on,
              labels: { role: "x" },
            });
            const srv1 = await addressOf(srv.ns, "net1");
            assert(await pingOnce(srv1, ok.ns) && await pingOnce(srv1, no.ns), "open before");
            assert(!(await tablesIn(srv.ns)).includes("ferry"), "no table without a policy");

            // A policy for another network leaves this one open.
            await policy(`deny-other-${t}`, other, {
              podSelector: { matchLabels: { app: "srv" } },
              policyTypes: ["Ingress"],
            });
            await new Promise((r) => setTimeout(r, 1500));
            assert(await pingOnce(srv1, no.ns), "a policy for another network changes nothing");

            // Deny-all ingress on this network: net1 closed, eth0 still open.
            await policy(`deny-${t}`, nad, {
              podSelector: { matchLabels: { app: "srv" } },
              policyTypes: ["Ingress"],
            });
            await eventually(
              async () => !(await pingOnce(srv1, ok.ns)) && !(await pingOnce(srv1, no.ns)),
              "srv's net1 isolated",
            );
            assert(await pingOnce(srv.ip, no.ns), "srv's eth0 is not this policy's");
            assert(await pingOnce(await addressOf(ok.ns, "net1"), srv.ns), "egress not isolated");

            // A rule by label: role=client gets in over net1, the other client does not.
            await policy(`from-clients-${t}`, nad, {
              podSelector: { matchLabels: { app: "srv" } },
              ingress: [{ from: [{ podSelector: { matchLabels: { role: "client" } } }] }],
            });
            await eventually(() => pingOnce(srv1, ok.ns), "ok reaches srv over net1");
            assertEquals(await pingOnce(srv1, no.ns), false, "no stays out");

            // A new server under the policies: closed to role=x from its first moment.
            const srv2 = await c.addPod(node, "srv2", 30_000, {
              annotations: on,
              labels: { app: "srv" },
            });
            const srv2Net1 = await addressOf(srv2.ns, "net1");
            for (let i = 0; i < 5; i++) {
              assertEquals(await pingOnce(srv2Net1, no.ns), false, `probe ${i} right after ADD`);
            }
            await eventually(() => pingOnce(srv2Net1, ok.ns), "ok reaches srv2 over net1");

            // The policies gone: open again, and no table left in the pods.
            for (const name of [`deny-${t}`, `from-clients-${t}`, `deny-other-${t}`]) {
              await c.client.delete(MULTI_NETWORK_POLICIES, "default", name);
            }
            made.splice(0, made.length, ...made.filter(([rt]) => rt !== MULTI_NETWORK_POLICIES));
            await eventually(() => pingOnce(srv1, no.ns), "open again");
            await eventually(
              async () => !(await tablesIn(srv.ns)).includes("ferry"),
              "the table is gone from srv",
            );
            for (const pod of [srv, ok, no, srv2]) assertEquals((await c.removePod(pod)).code, 0);
          } finally {
            for (const [rt, name] of made.reverse()) {
              await c.client.delete(rt, "default", name).catch(() => {});
            }
          }
        }),
    ),
});

// Issue #42 (1): nftables text in a forged network-status, written into the victim's peer set.
const INJECTION =
  "192.168.77.99 }; }\n  chain in-0 { accept; }\n  set pzz { type ipv4_addr; elements = { 192.168.77.98";

Deno.test({
  name:
    "issue #42: a tenant's forged network-status neither writes text into nor opens another tenant's isolated pod; an invalid MultiNetworkPolicy isolates only, said by an Event, and the daemon goes on",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 1, multiNetworkPolicy: true },
      (c) =>
        withNads(c, async (nads) => {
          const t = nads.t;
          const nad = `vnet-${t}`;
          const tenantB = `prb3b-${t}`;
          const cleanups: (() => Promise<unknown>)[] = [];
          const policy = async (name: string, spec: unknown) => {
            await c.client.create(MULTI_NETWORK_POLICIES, {
              metadata: {
                name,
                namespace: "default",
                annotations: { [POLICY_FOR_ANNOTATION]: nad },
              },
              spec,
            } as KubeObject);
            cleanups.push(() => c.client.delete(MULTI_NETWORK_POLICIES, "default", name));
          };
          try {
            await nads.create(nad, {
              cniVersion: "1.0.0",
              type: "bridge",
              bridge: `fyx${t}`,
              ipam: { type: "host-local", ranges: [[{ subnet: "192.168.77.0/24" }]] },
            });
            const node = c.nodes[0];
            const on = { "k8s.v1.cni.cncf.io/networks": nad };
            const v1 = await c.addPod(node, "v1", 30_000, {
              annotations: on,
              labels: { app: "v" },
            });
            const ok = await c.addPod(node, "ok", 30_000, {
              annotations: on,
              labels: { role: "client" },
            });
            const no = await c.addPod(node, "no", 30_000, {
              annotations: on,
              labels: { role: "x" },
            });
            const v1Net1 = await addressOf(v1.ns, "net1");
            const noNet1 = await addressOf(no.ns, "net1");
            // role=client pods of every namespace (so tenant B's pods are selected by label).
            await policy(`clients-only-${t}`, {
              podSelector: { matchLabels: { app: "v" } },
              policyTypes: ["Ingress"],
              ingress: [{
                from: [{ namespaceSelector: {}, podSelector: { matchLabels: { role: "client" } } }],
              }],
            });
            await eventually(
              async () => !(await pingOnce(v1Net1, no.ns)) && await pingOnce(v1Net1, ok.ns),
              "v1's net1 admits role=client only",
            );

            // Tenant B: pods labelled role=client in its own namespace, one never scheduled, one
            // bound to a node no Ferry runs, both claiming the victim's network with nftables text
            // and with the blocked pod's address.
            await c.client.create(NAMESPACES, { metadata: { name: tenantB } } as KubeObject);
            cleanups.push(() => c.client.delete(NAMESPACES, "", tenantB));
            // A real server's pods need their namespace's ServiceAccount (its controller may not
            // run here); the stand-in takes it as any object.
            await c.client.create(SERVICE_ACCOUNTS, {
              metadata: { name: "default", namespace: tenantB },
            } as KubeObject).catch(() => {});
            const status = JSON.stringify([{ name: `default/${nad}`, ips: [INJECTION, noNet1] }]);
            for (const [name, nodeName] of [["never-runs", ""], ["bound", `nowhere-${t}`]]) {
              await c.client.create(PODS, {
                metadata: {
                  name,
                  namespace: tenantB,
                  labels: { role: "client" },
                  annotations: { "k8s.v1.cni.cncf.io/network-status": status },
                },
                spec: {
                  ...(nodeName ? { nodeName } : {}),
                  containers: [{
                    name: "c",
                    image: "registry.k8s.io/pause:3.9",
                    ports: [{ name: "http", containerPort: 8080 }],
                  }],
                },
              } as KubeObject);
              cleanups.push(() => c.client.delete(PODS, tenantB, name));
            }
            // The pass after the forged pods (a pod created now is written by it).
            const probe = await c.addPod(node, "probe", 30_000, { annotations: on, labels: {} });
            for (let i = 0; i < 3; i++) {
              assertEquals(await pingOnce(v1Net1, no.ns), false, `no stays out (probe ${i})`);
            }
            assert(await pingOnce(v1Net1, ok.ns), "ok still gets in");
            const ruleset = await run("ip", "netns", "exec", v1.ns.name, "nft", "list", "ruleset");
            for (const text of ["192.168.77.99", "192.168.77.98", "pzz", "{ accept; }", noNet1]) {
              assert(!ruleset.includes(text), `${text} reached v1's table:\n${ruleset}`);
            }

            // Issue #42 (2): a policy the CRD's schema takes but Ferry cannot enforce as written
            // (an IPv6 CIDR that is none): isolating only, an Event on it, the daemon serving.
            const bad = `bad-${t}`;
            await policy(bad, {
              podSelector: { matchLabels: { app: "v" } },
              ingress: [{ from: [{ ipBlock: { cidr: "fd00:::1/64" } }] }],
            });
            const v2 = await c.addPod(node, "v2", 30_000, {
              annotations: on,
              labels: { app: "v" },
            });
            const v2Net1 = await addressOf(v2.ns, "net1");
            assertEquals(await pingOnce(v2Net1, no.ns), false, "v2 isolated from its first moment");
            await eventually(() => pingOnce(v2Net1, ok.ns), "the valid policy still admits ok");
            assertEquals(await pingOnce(v1Net1, no.ns), false, "v1 still isolated");
            await eventually(async () => {
              const events = await c.client.list(EVENTS, { namespace: "default" });
              return events.items.some((e) =>
                (e as { involvedObject?: { name?: string }; reason?: string }).involvedObject
                    ?.name === bad && (e as { reason?: string }).reason === "InvalidPolicy"
              );
            }, `a Warning Event InvalidPolicy on ${bad}`);
            const log = await Deno.readTextFile(node.log);
            assert(!log.includes("Uncaught"), "the daemon never died");
            for (const pod of [v1, ok, no, probe, v2]) {
              assertEquals((await c.removePod(pod)).code, 0);
            }
          } finally {
            for (const undo of cleanups.reverse()) await undo().catch(() => {});
          }
        }),
    ),
});
