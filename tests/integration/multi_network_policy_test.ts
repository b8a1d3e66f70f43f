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
  MULTI_NETWORK_POLICIES,
  NETWORK_ATTACHMENT_DEFINITIONS,
} from "../../daemon/k8s/resources.ts";
import { type MultiPolicy, POLICY_FOR_ANNOTATION } from "../../daemon/policy/multi_policy.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { eventually } from "./_cluster.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft, sanitizeResources: false, sanitizeOps: false };

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
      async (c) => {
        const t = crypto.randomUUID().slice(0, 6);
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
            await create(NETWORK_ATTACHMENT_DEFINITIONS, {
              metadata: { name, namespace: "default" },
              spec: {
                config: JSON.stringify({
                  cniVersion: "1.0.0",
                  type: "bridge",
                  bridge: `fym${name === nad ? "a" : "b"}${t}`,
                  ipam: { type: "host-local", ranges: [[{ subnet }]] },
                }),
              },
            } as KubeObject);
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
          const no = await c.addPod(node, "no", 30_000, { annotations: on, labels: { role: "x" } });
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
      },
    ),
});
