// Multiple networks per pod (daemon/multivif/) on the simulated cluster, on the stand-in or, in
// `test:real`, on a real kube-apiserver: NetworkAttachmentDefinitions as a Multus user writes them
// (macvlan with static IPAM, a macvlan + tuning conflist, macvlan with host-local), selected by
// both annotation forms; extra interfaces in the pod, network-status on the pod, DEL removing them
// all, and an ADD whose second network fails leaving nothing behind. Needs root and nft.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { type SimCluster, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { IS_ROOT, pingOnce, run } from "../../daemon/dev/netns.ts";
import { cniEnv, netconf, runShimAt } from "../../daemon/dev/harness.ts";
import { NETWORK_POLICIES, PODS } from "../../daemon/k8s/resources.ts";
import type { KubeObject } from "../../daemon/k8s/client.ts";
import { NETWORK_STATUS_ANNOTATION } from "../../daemon/multivif/selections.ts";
import { eventually } from "./_cluster.ts";
import { eventOn, withNads } from "./_nads.ts";
import { linkLocalOf } from "../../daemon/portsec/guard_table.ts";
import { canonicalIp } from "../../daemon/ipam/cidr.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft };

async function addrs(ns: string, dev: string): Promise<{ ips: string[]; mtu?: number }> {
  const out = await run("ip", "-n", ns, "-j", "addr", "show", "dev", dev).catch(() => "[]");
  const [link] = JSON.parse(out) as {
    mtu: number;
    addr_info: { family: string; local: string }[];
  }[];
  return {
    ips: link?.addr_info.filter((a) => a.family === "inet").map((a) => a.local) ?? [],
    mtu: link?.mtu,
  };
}

/**
 * The addresses host-local holds for NAD `name` on `node`: a NAD names no data directory, and
 * Ferry keeps host-local's files under the node's state directory.
 */
function hostLocalHeld(node: SimCluster["nodes"][number], name: string): string[] {
  const dir = `${node.socket.replace("/run/ferry.sock", "/state")}/host-local/${name}`;
  try {
    return [...Deno.readDirSync(dir)].map((f) => f.name).filter((n) => n.startsWith("192"));
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return [];
    throw e;
  }
}

Deno.test({
  name:
    "NADs selected by both annotation forms plug extra interfaces (native macvlan, a chained conflist, host-local), network-status lists them, DEL removes them, the second of three networks failing rolls the whole ADD back",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 2 },
      (c) =>
        withNads(c, async ({ t, create: nad }) => {
          const made = [`mv-${t}`, `mvt-${t}`, `mvh-${t}`, `bad-${t}`];
          // As in the NPWG and Multus examples: macvlan on the node's uplink (here its underlay eth0).
          await nad(made[0], {
            cniVersion: "0.3.1",
            type: "macvlan",
            master: "eth0",
            mode: "bridge",
            capabilities: { ips: true },
            ipam: { type: "static" },
          });
          await nad(made[1], {
            cniVersion: "0.3.1",
            name: "mvt",
            plugins: [
              {
                type: "macvlan",
                master: "eth0",
                mode: "bridge",
                capabilities: { ips: true },
                ipam: { type: "static" },
              },
              { type: "tuning", mtu: 1400 },
            ],
          });
          await nad(made[2], {
            cniVersion: "0.3.1",
            type: "macvlan",
            master: "eth0",
            mode: "bridge",
            ipam: {
              type: "host-local",
              ranges: [[{ subnet: "192.168.80.0/24", rangeStart: "192.168.80.100" }]],
            },
          });
          await nad(made[3], { cniVersion: "0.3.1", type: "macvlan", master: "nosuchdev0" });

          const a = await c.addPod(c.nodes[0], "mna", 30_000, {
            annotations: {
              "k8s.v1.cni.cncf.io/networks": JSON.stringify([
                { name: made[0], ips: ["192.168.80.11/24"], "default-route": ["192.168.80.1"] },
                { name: made[1], interface: "data0", ips: ["192.168.81.11/24"] },
              ]),
            },
          });
          const b = await c.addPod(c.nodes[1], "mnb", 30_000, {
            annotations: { "k8s.v1.cni.cncf.io/networks": made[2] },
          });
          assertEquals((await addrs(a.ns.name, "net1")).ips, ["192.168.80.11"]);
          // default-route moved the pod's default route to net1.
          const defaults = await run("ip", "-n", a.ns.name, "-4", "route", "show", "default");
          assertEquals(defaults.trim().split("\n").map((l) => l.trim()), [
            "default via 192.168.80.1 dev net1",
          ]);
          assertEquals(await addrs(a.ns.name, "data0"), { ips: ["192.168.81.11"], mtu: 1400 });
          const bIp = (await addrs(b.ns.name, "net1")).ips[0];
          assert(bIp?.startsWith("192.168.80.1"), `b's net1 from host-local: ${bIp}`);
          // The extra networks carry traffic between the nodes (macvlan over the underlay).
          await eventually(() => pingOnce(bIp, a.ns), "a reaches b over net1");

          // network-status, default network first, written with the attachment record.
          await eventually(async () => {
            const pod = await c.client.get<Pod>(PODS, "default", a.name);
            return !!pod.metadata?.annotations?.[NETWORK_STATUS_ANNOTATION];
          }, "network-status on pod a");
          const pod = await c.client.get<Pod>(PODS, "default", a.name);
          const status = JSON.parse(pod.metadata!.annotations![NETWORK_STATUS_ANNOTATION]) as {
            name: string;
            interface: string;
            ips: string[];
            mac?: string;
            default?: boolean;
          }[];
          assertEquals(status.map((s) => [s.name, s.interface, s.ips, s.default ?? false]), [
            ["ferry", "eth0", [a.ip], true],
            [`default/${made[0]}`, "net1", ["192.168.80.11"], false],
            [`default/${made[1]}`, "data0", ["192.168.81.11"], false],
          ]);
          assert(status.every((s) => s.mac), "every interface has its MAC");

          // CHECK covers every interface: it passes, then names the extra network that broke.
          const check = () =>
            runShimAt(
              a.node.shim,
              cniEnv("CHECK", a.ns, a.containerId, "eth0", { name: a.name, uid: a.uid! }),
              netconf("1.0.0", { prevResult: a.result }),
            );
          const healthy = await check();
          assertEquals(
            healthy.code,
            0,
            `CHECK of a healthy pod: ${healthy.stdout}${healthy.stderr}`,
          );
          await run("ip", "-n", a.ns.name, "link", "del", "data0");
          const broken = await check();
          assertEquals(broken.code, 1);
          assert(String(broken.json?.msg).includes(`default/${made[1]}`), broken.stdout);

          // DEL takes the extra interfaces along (the namespace stays, as a runtime's does).
          assertEquals((await c.removePod(a)).code, 0);
          for (const dev of ["eth0", "net1", "data0"]) {
            assertEquals((await addrs(a.ns.name, dev)).ips, [], `${dev} gone`);
          }
          assertEquals((await c.removePod(b)).code, 0);
          assertEquals(hostLocalHeld(c.nodes[1], made[2]), [], "host-local released b's address");

          // A NAD replacing the default network (v1.multus-cni.io/default-network).
          const e = await c.addPod(c.nodes[1], "mne", 30_000, {
            annotations: { "v1.multus-cni.io/default-network": made[2] },
          });
          assert(e.ip.startsWith("192.168.80.1"), `eth0 from the NAD's host-local: ${e.ip}`);
          await eventually(async () => {
            const p = await c.client.get<Pod>(PODS, "default", e.name);
            const st = p.metadata?.annotations?.[NETWORK_STATUS_ANNOTATION];
            return !!st && JSON.parse(st)[0]?.name === `default/${made[2]}` &&
              JSON.parse(st)[0]?.default === true;
          }, "network-status names the replacement as the default network");
          assertEquals((await c.removePod(e)).code, 0);
          assertEquals((await addrs(e.ns.name, "eth0")).ips, []);

          // A failing second network: the ADD fails naming it, and nothing of the pod is left.
          const err = await assertRejects(() =>
            c.addPod(c.nodes[0], "mnc", 0, {
              annotations: {
                "k8s.v1.cni.cncf.io/networks": JSON.stringify([
                  { name: made[0], ips: ["192.168.80.12/24"] },
                  { name: made[3], interface: "bad0" },
                  { name: made[2] },
                ]),
              },
            })
          );
          // The second of three failed: the first was undone, the third never plugged.
          assert(String(err).includes(`default/${made[3]}`), String(err));
          assertEquals(hostLocalHeld(c.nodes[0], made[2]), []);
          // The failed ADD is said on the pod, with its CNI code (kubectl describe shows it).
          await eventually(
            () => eventOn(c, "mnc", "FailedNetworkSetup", "CNI error"),
            "a FailedNetworkSetup Event on the pod whose ADD failed",
          );
          const state = c.nodes[0].socket.replace("/run/ferry.sock", "/state");
          assertEquals(await Array.fromAsync(Deno.readDir(`${state}/attachments`)), []);
          // A bad annotation is code 7 naming the pod, with an Event on it.
          const bad = await assertRejects(() =>
            c.addPod(c.nodes[0], "mnd", 0, {
              annotations: { "k8s.v1.cni.cncf.io/networks": "Not_A_Name" },
            })
          );
          assert(String(bad).includes('"code":7') && String(bad).includes("mnd"), String(bad));
          await eventually(
            () => eventOn(c, "mnd", "InvalidNetworkSelection"),
            "an Event on the pod with the bad annotation",
          );
        }),
    ),
});

Deno.test({
  name:
    "50 pods with two extra networks each: every pod gets both, no address twice, DEL frees them all",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 2 },
      (c) =>
        withNads(c, async ({ t, create }) => {
          const names = [`x1-${t}`, `x2-${t}`];
          for (const [i, name] of names.entries()) {
            await create(name, {
              cniVersion: "1.0.0",
              type: "macvlan",
              master: "eth0",
              ipam: {
                type: "host-local",
                ranges: [[{ subnet: `192.168.${90 + i}.0/24` }]],
              },
            });
          }
          const pods = await Promise.all(
            Array.from({ length: 50 }, (_, i) =>
              c.addPod(c.nodes[i % 2], `x${i}`, 60_000, {
                annotations: { "k8s.v1.cni.cncf.io/networks": names.join(",") },
              })),
          );
          // host-local allocates per node (its files are the node's): no address twice on a node.
          for (const node of c.nodes) {
            const seen: string[] = [];
            for (const pod of pods.filter((p) => p.node === node)) {
              for (const dev of ["net1", "net2"]) {
                const { ips } = await addrs(pod.ns.name, dev);
                assertEquals(ips.length, 1, `${pod.name} ${dev}`);
                seen.push(ips[0]);
              }
            }
            assertEquals(seen.length, 50, node.name);
            assertEquals(new Set(seen).size, 50, `no address twice on ${node.name}`);
          }
          for (const pod of pods) assertEquals((await c.removePod(pod)).code, 0, pod.name);
          for (const name of names) {
            for (const node of c.nodes) {
              assertEquals(hostLocalHeld(node, name), [], `${name}: host-local holds nothing`);
            }
          }
        }),
    ),
});

Deno.test({
  name:
    "a NAD of type bridge is plugged natively on a second bridge: pods on it reach each other, CHECK passes, DEL cleans up",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 1 },
      (c) =>
        withNads(c, async ({ t, create }) => {
          const bridge = `fyb${t}`;
          const name = `br-${t}`;
          await create(name, {
            cniVersion: "1.0.0",
            type: "bridge",
            bridge,
            isGateway: true,
            ipam: { type: "host-local", ranges: [[{ subnet: "192.168.85.0/24" }]] },
          });
          const annotations = { "k8s.v1.cni.cncf.io/networks": name };
          const f = await c.addPod(c.nodes[0], "brf", 30_000, { annotations });
          const g = await c.addPod(c.nodes[0], "brg", 30_000, { annotations });
          const node = c.nodes[0].ns.name;
          const ports = JSON.parse(
            await run("ip", "-n", node, "-j", "link", "show", "master", bridge),
          ) as { ifname: string }[];
          assertEquals(ports.length, 2, "both pods' host ends are ports of the NAD's bridge");
          const gw = await run("ip", "-n", node, "-br", "addr", "show", bridge);
          assert(gw.includes("192.168.85.1/24"), `isGateway puts the gateway on the bridge: ${gw}`);
          const gIp = (await addrs(g.ns.name, "net1")).ips[0];
          assert(gIp?.startsWith("192.168.85."), gIp);
          assert(await pingOnce(gIp, f.ns), "f reaches g over the NAD's bridge");
          const check = await runShimAt(
            f.node.shim,
            cniEnv("CHECK", f.ns, f.containerId, "eth0", { name: f.name, uid: f.uid! }),
            netconf("1.0.0", { prevResult: f.result }),
          );
          assertEquals(check.code, 0, check.stdout);
          for (const pod of [f, g]) assertEquals((await c.removePod(pod)).code, 0);
          assertEquals(
            JSON.parse(await run("ip", "-n", node, "-j", "link", "show", "master", bridge)),
            [],
          );
          assertEquals(hostLocalHeld(c.nodes[0], name), []);
        }),
    ),
});

Deno.test({
  name:
    "a tenant's NAD cannot take Ferry's bridge or pod range, nor write host-local files outside Ferry's state: refused with code 7, an Event on the pod, nothing left on the bridge",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 1 },
      (c) =>
        withNads(c, async ({ t, create }) => {
          const [node] = c.nodes;
          // The probe's NAD: Ferry's own bridge, a range inside the node's pod range, a gateway.
          const hijack = `hj-${t}`;
          await create(hijack, {
            cniVersion: "1.0.0",
            type: "bridge",
            bridge: "ferry0",
            isGateway: true,
            ipam: { type: "host-local", ranges: [[{ subnet: node.podCIDR }]] },
          });
          const writes = `wr-${t}`;
          const target = `/tmp/ferry-nad-target-${t}`;
          await create(writes, {
            cniVersion: "1.0.0",
            type: "bridge",
            bridge: `fyw${t}`,
            ipam: {
              type: "host-local",
              dataDir: target,
              ranges: [[{ subnet: "192.168.86.0/24" }]],
            },
          });
          // The bridge's addresses, less the link-local one the kernel derives from its MAC once
          // a port brings it up (the bridge's MAC is set, so that address never changes).
          const bridgeAddrs = async () => {
            const [link] = JSON.parse(
              await run("ip", "-n", node.ns.name, "-j", "addr", "show", "ferry0"),
            ) as { address: string; addr_info: { local: string; prefixlen: number }[] }[];
            const own = canonicalIp(linkLocalOf(link.address));
            return link.addr_info.filter((x) => canonicalIp(x.local) !== own)
              .map((x) => `${x.local}/${x.prefixlen}`).sort();
          };
          const before = await bridgeAddrs();
          for (
            const [name, pod, why] of [
              [hijack, "hja", "its bridge ferry0 is a device of Ferry's own network"],
              [
                writes,
                "wra",
                `host-local's dataDir "${target}" is outside Ferry's state directory`,
              ],
            ]
          ) {
            const err = await assertRejects(() =>
              c.addPod(node, pod, 0, { annotations: { "k8s.v1.cni.cncf.io/networks": name } })
            );
            assert(String(err).includes('"code":7'), String(err));
            assert(
              String(err).includes(`NetworkAttachmentDefinition default/${name} refused`),
              String(err),
            );
            // The shim's answer is JSON: its quotes are escaped.
            assert(
              JSON.parse(
                String(err).slice(String(err).indexOf("{"), String(err).lastIndexOf("}") + 1),
              ).msg.includes(why),
              String(err),
            );
            await eventually(
              () => eventOn(c, pod, "InvalidNetworkSelection", why),
              `an Event on ${pod} saying why`,
            );
          }
          assertEquals(
            await Deno.stat(target).then(() => true, () => false),
            false,
            "nothing written",
          );
          assertEquals(
            await bridgeAddrs(),
            before,
            "no address put on Ferry's bridge",
          );
          const log = await Deno.readTextFile(node.log);
          assert(
            log.includes(`NetworkAttachmentDefinition default/${hijack} refused`),
            "the log names the NAD",
          );
        }),
    ),
});

Deno.test({
  name:
    "a NAD cannot give a pod another pod's address in another spelling (selection cni-args ips, IPv4-mapped static address): code 7, and the real pod keeps its address and neighbour entry",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 1 },
      (c) =>
        withNads(c, async ({ t, create }) => {
          const [node] = c.nodes;
          const victim = await c.addPod(node, "vic", 30_000);
          const prefix = node.podCIDR.split("/")[1];
          const victimMac = async () =>
            (JSON.parse(await run("ip", "-n", victim.ns.name, "-j", "link", "show", "eth0")) as {
              address: string;
            }[])[0].address;
          // Issue #42 item 3: a native bridge NAD with static IPAM, on a bridge of its own.
          const viaArgs = `ia-${t}`;
          await create(viaArgs, {
            cniVersion: "1.0.0",
            type: "bridge",
            bridge: `fyi${t}`,
            ipam: { type: "static" },
          });
          const mapped = `im-${t}`;
          await create(mapped, {
            cniVersion: "1.0.0",
            type: "bridge",
            bridge: `fyj${t}`,
            ipam: {
              type: "static",
              addresses: [{ address: `::ffff:${victim.ip}/${96 + +prefix}` }],
            },
          });
          for (
            const [pod, selection, key] of [
              [
                "ima",
                [{ name: viaArgs, "cni-args": { ips: [`${victim.ip}/${prefix}`] } }],
                `args.cni.ips[0] ${victim.ip}/${prefix}`,
              ],
              ["imb", [{ name: mapped }], `ipam.addresses[0].address ::ffff:${victim.ip}`],
            ] as const
          ) {
            const err = await assertRejects(() =>
              c.addPod(node, pod, 0, {
                annotations: { "k8s.v1.cni.cncf.io/networks": JSON.stringify(selection) },
              })
            );
            assert(String(err).includes('"code":7'), `${pod}: code 7: ${err}`);
            assert(
              String(err).includes(`its ${key}`) &&
                String(err).includes("overlaps Ferry's pod range"),
              `${pod}: the refusal names the key and the overlap: ${err}`,
            );
            await eventually(
              () => eventOn(c, pod, "InvalidNetworkSelection", "overlaps Ferry's pod range"),
              `an Event on ${pod} saying why`,
            );
          }
          // The victim still answers at its address, and the node's neighbour entry is its MAC.
          await eventually(() => pingOnce(victim.ip, node.ns), "the node reaches the victim");
          const neigh = await run("ip", "-n", node.ns.name, "-j", "neigh", "show", victim.ip);
          const entries = JSON.parse(neigh) as { lladdr?: string }[];
          assertEquals(
            entries.map((e) => e.lladdr),
            [await victimMac()],
            "the node's neighbour entry for the victim's address is the victim's MAC",
          );
          assertEquals((await c.removePod(victim)).code, 0);
        }),
    ),
});

Deno.test({
  name:
    "a NAD cannot take Ferry's devices by MAC, altname or a pod's host veth (host-device hwaddr and device, macvlan master): code 7, and every device stays on the node",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 1, config: { routing: { mode: "vxlan" } } },
      (c) =>
        withNads(c, async ({ t, create }) => {
          const [node] = c.nodes;
          const victim = await c.addPod(node, "dvic", 30_000);
          const links = async (...args: string[]) =>
            JSON.parse(await run("ip", "-n", node.ns.name, "-j", "link", "show", ...args)) as {
              ifname: string;
              address: string;
            }[];
          const [vxlan] = await links("dev", "ferry.vxlan");
          const [veth] = await links("master", "ferry0");
          assert(vxlan && veth, "the node has Ferry's VXLAN device and the victim's host veth");
          const altname = `fyalt-${t}`;
          await run(
            "ip",
            "-n",
            node.ns.name,
            "link",
            "property",
            "add",
            "dev",
            "ferry0",
            "altname",
            altname,
          );
          // Issue #42 item 5: host-device by hwaddr moves a VXLAN device; by name, a pod's veth.
          const cases: [string, Record<string, unknown>, string][] = [
            [
              `hm-${t}`,
              { type: "host-device", hwaddr: vxlan.address.toUpperCase() },
              `its hwaddr ${vxlan.address.toUpperCase()} is the MAC of ferry.vxlan`,
            ],
            [
              `hv-${t}`,
              { type: "host-device", device: veth.ifname },
              `its device ${veth.ifname} is a device of Ferry's own network`,
            ],
            [
              `ma-${t}`,
              { type: "macvlan", master: altname, mode: "bridge" },
              `its master ${altname} is an altname of ferry0`,
            ],
          ];
          for (const [name, config, why] of cases) {
            await create(name, { cniVersion: "1.0.0", ...config });
            const pod = `p${name.slice(0, 2)}`;
            const err = await assertRejects(() =>
              c.addPod(node, pod, 0, { annotations: { "k8s.v1.cni.cncf.io/networks": name } })
            );
            assert(String(err).includes('"code":7'), `${name}: code 7: ${err}`);
            assert(String(err).includes(why), `${name}: ${why}: ${err}`);
            await eventually(
              () => eventOn(c, pod, "InvalidNetworkSelection", why),
              `an Event on ${pod} saying why`,
            );
          }
          assertEquals((await links("dev", "ferry.vxlan")).length, 1, "the VXLAN device stays");
          assertEquals(
            (await links("master", "ferry0")).map((l) => l.ifname),
            [veth.ifname],
            "the victim's veth stays on Ferry's bridge",
          );
          await eventually(() => pingOnce(victim.ip, node.ns), "the node reaches the victim");
          assertEquals((await c.removePod(victim)).code, 0);
        }),
    ),
});

Deno.test({
  name:
    "a pod scraping its node's metrics port sees no other tenant's pod, NetworkPolicy or NAD names; a scraper with the detail token sees them, a wrong token gets 401",
  ...opts,
  fn: async () => {
    const tokenFile = await Deno.makeTempFile({ prefix: "ferry-metrics-token-" });
    await Deno.writeTextFile(tokenFile, "scraper-secret\n");
    const port = 19668;
    try {
      await withSimCluster(
        {
          kubeconfig: REAL_KUBECONFIG,
          nodes: 1,
          config: {
            server: {
              metricsHost: "0.0.0.0",
              metricsPort: port,
              metricsDetailTokenFile: tokenFile,
            },
          },
        },
        (c) =>
          withNads(c, async ({ t, create }) => {
            const [node] = c.nodes;
            const nad = `secret-net-${t}`;
            await create(nad, {
              cniVersion: "1.0.0",
              type: "macvlan",
              master: "eth0",
              mode: "bridge",
              capabilities: { ips: true },
              ipam: { type: "static" },
            });
            // Tenant a: a pod on a NAD, isolated by a policy. Tenant b: a pod that scrapes.
            const victim = await c.addPod(node, "mtv", 30_000, {
              labels: { app: `mtv-${t}` },
              annotations: {
                "k8s.v1.cni.cncf.io/networks": JSON.stringify([
                  { name: nad, ips: ["192.168.78.11/24"] },
                ]),
              },
            });
            const attacker = await c.addPod(node, "mta", 30_000, { labels: { app: `mta-${t}` } });
            const policy = `s1-${t}`;
            await c.client.create(NETWORK_POLICIES, {
              metadata: { name: policy, namespace: "default" },
              spec: {
                podSelector: { matchLabels: { app: `mtv-${t}` } },
                ingress: [{ from: [{ podSelector: { matchLabels: { app: `mta-${t}` } } }] }],
              },
            } as KubeObject);

            try {
              const gateway =
                (await run("ip", "-n", attacker.ns.name, "-4", "route", "show", "default"))
                  .split(" ")[2];
              /** `/metrics` from inside the attacker's pod, as any container can fetch it. */
              const scrape = async (authorization?: string) => {
                const out = await new Deno.Command("ip", {
                  args: [
                    "netns",
                    "exec",
                    attacker.ns.name,
                    "curl",
                    "-s",
                    "-m",
                    "10",
                    "-w",
                    "\n%{http_code}",
                    ...(authorization ? ["-H", `Authorization: ${authorization}`] : []),
                    `http://${gateway}:${port}/metrics`,
                  ],
                  stdout: "piped",
                  stderr: "piped",
                }).output();
                const text = new TextDecoder().decode(out.stdout);
                const nl = text.lastIndexOf("\n");
                return { status: Number(text.slice(nl + 1)), text: text.slice(0, nl) };
              };
              const names = [nad, policy, victim.name];
              // The scraper with the token sees the NAD, the policy and the pod once the policy's
              // counters are read (every 10 s).
              let last = { status: 0, text: "" };
              await eventually(
                async () => {
                  last = await scrape("Bearer scraper-secret");
                  return last.status === 200 && names.every((n) => last.text.includes(n));
                },
                "the token's holder sees the NAD, policy and pod names",
                60_000,
              ).catch((e) => {
                throw new Error(`${e.message}; last scrape: ${last.status}\n${last.text}`);
              });
              const anonymous = await scrape();
              assertEquals(anonymous.status, 200, anonymous.text);
              assert(anonymous.text.includes("ferry_attachments"), anonymous.text);
              for (const n of names) {
                assert(
                  !anonymous.text.includes(n),
                  `${n} is not shown to a pod:\n${anonymous.text}`,
                );
              }
              const wrong = await scrape("Bearer scraper-secreT");
              assertEquals([wrong.status, wrong.text], [401, "unauthorized\n"]);
            } finally {
              await c.client.delete(NETWORK_POLICIES, "default", policy).catch(() => {});
            }
            assertEquals((await c.removePod(attacker)).code, 0);
            assertEquals((await c.removePod(victim)).code, 0);
          }),
      );
    } finally {
      await Deno.remove(tokenFile).catch(() => {});
    }
  },
});

Deno.test({
  name:
    "an ADD repeated after a restart that cut the first one short before its additional networks plugs them: the answer never lacks an interface the pod selects",
  ...opts,
  fn: () =>
    withSimCluster(
      { kubeconfig: REAL_KUBECONFIG, nodes: 1 },
      (c) =>
        withNads(c, async ({ t, create }) => {
          const name = `cut-${t}`;
          await create(name, {
            cniVersion: "1.0.0",
            type: "macvlan",
            master: "eth0",
            ipam: { type: "host-local", ranges: [[{ subnet: "192.168.87.0/24" }]] },
          });
          const node = c.nodes[0];
          const pod = await c.addPod(node, "cut", 30_000, {
            annotations: { "k8s.v1.cni.cncf.io/networks": name },
          });
          assertEquals((await addrs(pod.ns.name, "net1")).ips.length, 1, "net1 after the ADD");
          // What a daemon killed between recording the default interface and plugging the NAD
          // leaves: eth0's record and no trace of net1 (its record, its interface, its address).
          await c.killDaemon(node);
          const state = node.socket.replace("/run/ferry.sock", "/state");
          await Deno.remove(`${state}/attachments/${pod.containerId}--net1.json`);
          await run("ip", "-n", pod.ns.name, "link", "del", "net1");
          for (const ip of hostLocalHeld(node, name)) {
            await Deno.remove(`${state}/host-local/${name}/${ip}`);
          }
          await c.startDaemon(node);
          let again = await runShimAt(
            node.shim,
            cniEnv("ADD", pod.ns, pod.containerId, "eth0", { name: pod.name, uid: pod.uid! }),
            netconf(),
          );
          for (const until = Date.now() + 30_000; again.json?.code === 11 && Date.now() < until;) {
            await new Promise((r) => setTimeout(r, 200));
            again = await runShimAt(
              node.shim,
              cniEnv("ADD", pod.ns, pod.containerId, "eth0", { name: pod.name, uid: pod.uid! }),
              netconf(),
            );
          }
          assertEquals(again.code, 0, `the repeated ADD: ${again.stdout}${again.stderr}`);
          const net1 = await addrs(pod.ns.name, "net1");
          assertEquals(net1.ips.length, 1, "the repeated ADD plugged the pod's NAD again");
          assertEquals(hostLocalHeld(node, name), net1.ips, "host-local holds net1's address");
          const eth0 = (again.json as { ips: { address: string }[] }).ips[0].address.split("/")[0];
          assertEquals(
            (await addrs(pod.ns.name, "eth0")).ips,
            [eth0],
            "the answer names the address eth0 has",
          );
          assertEquals((await c.removePod(pod)).code, 0);
          assertEquals(hostLocalHeld(node, name), [], "DEL gave net1's address back");
        }),
    ),
});
