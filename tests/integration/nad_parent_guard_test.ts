// A tenant's macvlan NAD on a simulated node (its namespace, its uplink eth0 with the node's
// address and default route, the router `outside` on that segment), as the attacker writes it:
// `passthru` and `source` on a link the node uses are refused with code 7 and an Event, and the
// node keeps its address and traffic; a MAC the pod picks that is multicast, universally
// administered or already on the segment (the node's, the router's, another pod's) is refused, a
// fresh locally administered one is the pod's; what the operator's config allows per parent
// device. On the stand-in or, in `test:real`, a real kube-apiserver. Needs root and nft.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { waitReady, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { IS_ROOT, pingOnce, run } from "../../daemon/dev/netns.ts";
import { eventually } from "./_cluster.ts";
import { eventOn, withNads } from "./_nads.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft };

/** The MAC of `dev` in namespace `ns`, or undefined when it has no such link. */
async function macOf(ns: string, dev: string): Promise<string | undefined> {
  const out = await run("ip", "-n", ns, "-j", "link", "show", "dev", dev).catch(() => "[]");
  return (JSON.parse(out) as { address?: string }[])[0]?.address;
}

Deno.test({
  name:
    "a tenant's macvlan gets no passthru or source on a link the node uses and no MAC already on its segment, unless the operator lists the device; the node keeps its address",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 1 },
      (c) =>
        withNads(c, async ({ t, create }) => {
          const [node] = c.nodes;
          const nad = async (name: string, config: Record<string, unknown>) => {
            await create(`${name}-${t}`, { cniVersion: "1.0.0", type: "macvlan", ...config });
            return `${name}-${t}`;
          };
          // eth1: a second link of the node with an address of its own, its peer in `outside`.
          const peer = `fyp${t}`;
          await run(
            "ip",
            "-n",
            node.ns.name,
            "link",
            "add",
            "eth1",
            "type",
            "veth",
            "peer",
            "name",
            peer,
          );
          await run("ip", "-n", node.ns.name, "link", "set", peer, "netns", c.outside.name);
          await run("ip", "-n", node.ns.name, "addr", "add", "192.168.231.1/24", "dev", "eth1");
          await run("ip", "-n", c.outside.name, "addr", "add", "192.168.231.2/24", "dev", peer);
          await run("ip", "-n", node.ns.name, "link", "set", "eth1", "up");
          await run("ip", "-n", c.outside.name, "link", "set", peer, "up");
          try {
            const staticIp = { type: "static", addresses: [{ address: "192.168.230.5/24" }] };
            const passthru = await nad("pt", { master: "eth0", mode: "passthru", ipam: staticIp });
            const byDefault = await nad("ptd", { mode: "passthru", ipam: staticIp });
            const source = await nad("src", { master: "eth0", mode: "source", ipam: staticIp });
            const passthru1 = await nad("pt1", {
              master: "eth1",
              mode: "passthru",
              ipam: staticIp,
            });
            const withMac = await nad("mac", {
              master: "eth0",
              mode: "bridge",
              capabilities: { mac: true, ips: true },
              ipam: { type: "static" },
            });
            // The router on eth0's segment is in the node's neighbour table once the node has used it.
            assert(
              await pingOnce(c.internet, node.ns),
              "the node reaches the outside through eth0",
            );
            const router = (await macOf(c.outside.name, "eth0"))!;
            const nodeMac = (await macOf(node.ns.name, "eth0"))!;
            const nodeAnswers = () => pingOnce(node.address, c.outside);
            const netsOf = (name: string, mac?: string, ip = "192.168.230.10/24") => ({
              annotations: {
                "k8s.v1.cni.cncf.io/networks": JSON.stringify([
                  { name, ...(mac ? { mac, ips: [ip] } : {}) },
                ]),
              },
            });
            const refusedAdd = async (pod: string, name: string, text: string, mac?: string) => {
              const err = String(
                await assertRejects(() => c.addPod(node, pod, 0, netsOf(name, mac))),
              );
              assert(err.includes('"code":7') && err.includes(text), `${pod}: ${err}`);
              await eventually(
                () => eventOn(c, pod, "InvalidNetworkSelection", text),
                `an Event on ${pod} saying ${text}`,
              );
            };

            // passthru and source on the uplink (named, or the default route's device), passthru
            // on eth1 (it holds an address): code 7, an Event, and the node keeps answering.
            await refusedAdd("pt", passthru, "mode passthru gives the pod the traffic of eth0");
            assert(
              await nodeAnswers(),
              "the node answers on its address after the refused passthru",
            );
            await refusedAdd("ptd", byDefault, "traffic of eth0, which the node uses");
            await refusedAdd("src", source, "mode source gives the pod the traffic of eth0");
            await refusedAdd("pt1", passthru1, "traffic of eth1, which the node uses: eth1 holds");
            assert(await nodeAnswers(), "the node answers on its address");
            assert(await pingOnce("192.168.231.1", c.outside), "the node answers on eth1");

            // MACs: the router's, the node's, multicast, universally administered are refused.
            await refusedAdd("mrt", withMac, "is in eth0's neighbour table", router);
            await refusedAdd("mnd", withMac, "is the MAC of the node's link eth0", nodeMac);
            await refusedAdd("mmc", withMac, "is a multicast MAC", "01:00:5e:00:00:42");
            await refusedAdd("mua", withMac, "is not locally administered", "00:16:3e:00:00:42");
            // A fresh locally administered MAC is the pod's; another pod may not take it after.
            const fresh = "02:f0:0d:" + t.slice(0, 2) + ":" + t.slice(2, 4) + ":" + t.slice(4, 6);
            const a = await c.addPod(node, "mok", 0, netsOf(withMac, fresh));
            assertEquals(await macOf(a.ns.name, "net1"), fresh);
            await refusedAdd(
              "mdup",
              withMac,
              `is the MAC of an interface of pod default/${a.name}`,
              fresh,
            );
            assertEquals((await c.removePod(a)).code, 0);
            assert(await nodeAnswers(), "the node answers on its address at the end");

            // The operator lists eth1 for passthru and eth0 for any MAC.
            await c.reconfigure(node, {
              multiNetwork: { passthruParents: ["eth1"], anyMacParents: ["eth0"] },
            });
            await waitReady(node);
            const p = await c.addPod(node, "pta", 30_000, netsOf(passthru1));
            assert(await macOf(p.ns.name, "net1"), "the listed device's passthru is plugged");
            const u = await c.addPod(node, "mua2", 30_000, netsOf(withMac, "00:16:3e:00:00:43"));
            assertEquals(await macOf(u.ns.name, "net1"), "00:16:3e:00:00:43");
            await refusedAdd("pt2", passthru, "traffic of eth0, which the node uses");
            await refusedAdd("mmc2", withMac, "is a multicast MAC", "01:00:5e:00:00:43");
            assertEquals((await c.removePod(u)).code, 0);
            assertEquals((await c.removePod(p)).code, 0);
            await eventually(
              () => pingOnce("192.168.231.1", c.outside),
              "eth1 is the node's again",
            );
          } finally {
            await run("ip", "-n", node.ns.name, "link", "del", "eth1").catch(() => {});
          }
        }),
    ),
});
