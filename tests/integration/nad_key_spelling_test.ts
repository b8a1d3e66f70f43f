// A tenant's macvlan NAD writes its keys in another case (`Master`, `MASTER`, `maſter`), as Go's
// decoder reads them. The NAD guard reads keys that way and checks the device named there; Ferry's
// native macvlan driver must plug on that same device, never on the default route's (the node's
// uplink): a `passthru` NAD naming a device the node lacks must not take the node off its network.
// Every key the driver reads, in another case, is read as the reference plugin reads it. On a
// simulated node (its namespace, its uplink eth0 with the node's address and default route); on the
// stand-in or, in `test:real`, a real kube-apiserver. Needs root and nft.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { IS_ROOT, pingOnce, run } from "../../daemon/dev/netns.ts";
import { eventually } from "./_cluster.ts";
import { eventOn, withNads } from "./_nads.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft };

/** The pod's annotation selecting NAD `name`. */
const selecting = (name: string) => ({
  annotations: { "k8s.v1.cni.cncf.io/networks": JSON.stringify([{ name }]) },
});

/** Link `dev` in namespace `ns` with its details and addresses (`ip -j -d addr`). */
async function linkIn(ns: string, dev: string) {
  const out = await run("ip", "-n", ns, "-j", "-d", "addr", "show", "dev", dev);
  return (JSON.parse(out) as {
    ifindex: number;
    link_index?: number;
    mtu: number;
    linkinfo?: { info_kind?: string; info_data?: { mode?: string } };
    addr_info?: { local: string; prefixlen: number }[];
  }[])[0];
}

for (const key of ["Master", "MASTER", "maſter"]) {
  Deno.test({
    name:
      `a macvlan NAD naming its parent as ${key} gets no passthru on the node's uplink: the device it names is the one plugged, and the node keeps answering`,
    ...opts,
    fn: () =>
      withSimCluster(
        { kubeconfig: REAL_KUBECONFIG, nodes: 1 },
        (c) =>
          withNads(c, async ({ t, create }) => {
            const [node] = c.nodes;
            const name = `ptk-${t}`;
            await create(name, {
              cniVersion: "1.0.0",
              type: "macvlan",
              [key]: "nosuch0",
              mode: "passthru",
              ipam: { type: "static", addresses: [{ address: "192.168.230.5/24" }] },
            });
            assert(await pingOnce(node.address, c.outside), "the node answers before");
            // The guard checked nosuch0 (no such link: nothing of the node's to take), so the
            // driver plugs there or nowhere; on the uplink the node would stop answering.
            const err = String(
              await assertRejects(() => c.addPod(node, "ptk", 30_000, selecting(name))),
            );
            assert(err.includes("on nosuch0"), `the plug was tried on nosuch0 only: ${err}`);
            assert(await pingOnce(node.address, c.outside), "the node answers after");
          }),
      ),
  });
}

Deno.test({
  name:
    "a macvlan NAD with every key in another case is plugged as a Go plugin reads it: on the device it names, in its mode, with its MTU and address; naming the uplink so it is refused with code 7 and an Event",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 1 },
      (c) =>
        withNads(c, async ({ t, create }) => {
          const [node] = c.nodes;
          // spare0: a link of the node with nothing on it (a veth's end), so a tenant may take it in
          // passthru.
          const ip = (...args: string[]) => run("ip", "-n", node.ns.name, ...args);
          await ip("link", "add", "spare0", "type", "veth", "peer", "name", "spare0p");
          await ip("link", "set", "spare0", "up");
          const spelled = (parent: string) => ({
            cniVersion: "1.0.0",
            Type: "macvlan",
            MASTER: parent,
            Mode: "passthru",
            MTU: 1400,
            IPAM: { Type: "static", ADDRESSES: [{ Address: "192.168.232.5/24" }] },
          });
          try {
            await create(`spk-${t}`, spelled("spare0"));
            await create(`upk-${t}`, spelled("eth0"));
            const pod = await c.addPod(node, "spk", 30_000, selecting(`spk-${t}`));
            const net1 = await linkIn(pod.ns.name, "net1");
            const parent = await linkIn(node.ns.name, "spare0");
            assertEquals(net1.link_index, parent.ifindex, "net1 sits on spare0");
            assertEquals(net1.linkinfo?.info_data?.mode, "passthru");
            assertEquals(net1.mtu, 1400);
            assertEquals(
              net1.addr_info?.filter((a) => a.local.includes(".")).map((a) =>
                `${a.local}/${a.prefixlen}`
              ),
              ["192.168.232.5/24"],
            );
            assert(
              await pingOnce(node.address, c.outside),
              "the node answers with the pod plugged",
            );
            assertEquals((await c.removePod(pod)).code, 0);

            const err = String(
              await assertRejects(() => c.addPod(node, "upk", 30_000, selecting(`upk-${t}`))),
            );
            const why = "mode passthru gives the pod the traffic of eth0";
            assert(err.includes('"code":7') && err.includes(why), err);
            await eventually(
              () => eventOn(c, "upk", "InvalidNetworkSelection", why),
              `an Event on the pod saying ${why}`,
            );
            assert(await pingOnce(node.address, c.outside), "the node answers at the end");
          } finally {
            await ip("link", "del", "spare0").catch(() => {});
          }
        }),
    ),
});
