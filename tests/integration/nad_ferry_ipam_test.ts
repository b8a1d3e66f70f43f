// Ferry's own IPAM type for NADs (`"ipam": {"type": "ferry", "pool": …}`) on the simulated
// cluster, on the stand-in or, in `test:real`, on a real kube-apiserver: served in the daemon
// whatever `multiNetwork.whereaboutsIpam` says, a pool for networks shared by three nodes without
// an address twice, pods reaching each other on it, DEL giving the addresses back; pools that may
// not be named refused with code 7 and an Event; a full pool answered 101. Needs root.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { type SimCluster, type SimPod, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { installNetworkBlockCrd, installPoolCrds } from "../../daemon/dev/crds.ts";
import { IS_ROOT, pingOnce, run } from "../../daemon/dev/netns.ts";
import { IPPOOLS, NETWORKBLOCKS } from "../../daemon/k8s/resources.ts";
import type { IpPoolObject } from "../../daemon/ipam/ip_pools.ts";
import type { NetworkBlockObject } from "../../daemon/ipam/nad_blocks.ts";
import { networkFindings } from "../../daemon/ipam/nad_integrity.ts";
import { readClusterState } from "../../daemon/tools/ipam_check.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { eventually } from "./_cluster.ts";
import { eventOn, withNads } from "./_nads.ts";
import { unixRequest } from "../../lib/unix_http.ts";
import { STATS_PATH } from "../../lib/socket_api.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);
const opts = { ignore: !IS_ROOT || !hasNft };

/** whereabouts configs left to their plugin (the default): the `ferry` type is served anyway. */
const CONFIG = { gc: { graceSeconds: 1, intervalSeconds: 2 } };

async function net1(pod: SimPod): Promise<string[]> {
  const out = await run("ip", "-n", pod.ns.name, "-j", "-4", "addr", "show", "dev", "net1")
    .catch(() => "[]");
  const [link] = JSON.parse(out) as { addr_info: { local: string }[] }[];
  return link?.addr_info.map((a) => a.local) ?? [];
}

/**
 * An IPPool `spec`, created and read back until the server kept every field (a real server whose
 * CRD an older run installed prunes `use` until the update of `installPoolCrds` is served).
 */
async function withPool<T>(
  c: SimCluster,
  spec: IpPoolObject["spec"],
  fn: (name: string) => Promise<T>,
): Promise<T> {
  await installPoolCrds(c.client);
  const name = `fp-${crypto.randomUUID().slice(0, 6)}`;
  try {
    await eventually(
      async () => {
        await c.client.delete(IPPOOLS, undefined, name).catch(() => {});
        const made = await c.client.create<IpPoolObject>(IPPOOLS, { metadata: { name }, spec });
        return JSON.stringify(made.spec?.use) === JSON.stringify(spec?.use) &&
          made.spec?.disabled === spec?.disabled;
      },
      `IPPool ${name} stored with its spec.use and spec.disabled`,
      30_000,
      500,
    );
    return await fn(name);
  } finally {
    await c.client.delete(IPPOOLS, undefined, name).catch(() => {});
  }
}

/** A macvlan NAD on the underlay with IPAM `ipam`, removed afterwards. */
async function withNad<T>(
  c: SimCluster,
  ipam: Record<string, unknown>,
  fn: (name: string) => Promise<T>,
  extra: Record<string, unknown> = {},
): Promise<T> {
  return await withNads(c, async ({ t, create }) => {
    await installNetworkBlockCrd(c.client);
    const name = `fi-${t}`;
    await create(name, {
      cniVersion: "0.3.1",
      type: "macvlan",
      master: "eth0",
      mode: "bridge",
      ipam,
      ...extra,
    });
    return await fn(name);
  });
}

/** The blocks of pool `pool`'s space in the API now. */
async function blocksOf(c: SimCluster, pool: string): Promise<NetworkBlockObject[]> {
  const { items } = await c.client.listAll<NetworkBlockObject>(NETWORKBLOCKS, {});
  return items.filter((b) => b.spec?.network.startsWith(`ippool:${pool}/`));
}

/** The allocations the API records in pool `pool`'s blocks, as `ip pod`. */
async function recorded(c: SimCluster, pool: string): Promise<string[]> {
  return (await blocksOf(c, pool)).flatMap((b) =>
    (b.spec!.allocations ?? []).map((a) => `${a.ip} ${a.name}`)
  ).sort();
}

async function dropBlocks(c: SimCluster, pool: string): Promise<void> {
  for (const b of await blocksOf(c, pool)) {
    await c.client.delete(NETWORKBLOCKS, undefined, b.metadata!.name!).catch(() => {});
  }
}

Deno.test({
  name:
    "a macvlan NAD naming an IPPool for networks across three nodes: distinct addresses from the pool, pods reach each other on it, ipam check clean, DEL gives every address back",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 3, config: CONFIG }, async (c) => {
      const third = 100 + Math.floor(Math.random() * 100);
      await withPool(c, {
        use: "networks",
        cidrs: [`192.168.${third}.0/26`],
        excluded: [`192.168.${third}.1-192.168.${third}.9`],
      }, async (pool) => {
        try {
          await withNad(c, { type: "ferry", pool, gateway: `192.168.${third}.1` }, async (nad) => {
            const n = 24;
            const pods = await Promise.all(
              Array.from({ length: n }, (_, i) =>
                c.addPod(c.nodes[i % 3], `fp${i}`, 60_000, {
                  annotations: { "k8s.v1.cni.cncf.io/networks": nad },
                })),
            );
            const ips: string[] = [];
            for (const pod of pods) {
              const got = await net1(pod);
              assertEquals(got.length, 1, `${pod.name} on ${pod.node.name}: net1 has ${got}`);
              const last = Number(got[0].split(".")[3]);
              assert(
                got[0].startsWith(`192.168.${third}.`) && last >= 10 && last <= 62,
                `${pod.name}: ${got[0]} is not an address the pool hands out`,
              );
              ips.push(got[0]);
            }
            assertEquals(new Set(ips).size, n, `an address twice: ${[...ips].sort().join(" ")}`);
            const unreachable: string[] = [];
            await Promise.all(pods.map(async (pod, i) => {
              for (const j of [(i + 1) % n, (i + 2) % n]) {
                if (!(await pingOnce(ips[j], pod.ns)) && !(await pingOnce(ips[j], pod.ns))) {
                  unreachable.push(`${pod.name} (${ips[i]}) -> ${pods[j].name} (${ips[j]})`);
                }
              }
            }));
            assertEquals(unreachable, [], "pods that could not reach each other on net1");
            const live = pods.map((p, i) => `${ips[i]} ${p.name}`).sort();
            await eventually(
              async () => (await recorded(c, pool)).join() === live.join(),
              "the pool's blocks record exactly the pods' addresses",
              30_000,
            );
            const state = await readClusterState(c.client);
            const mine = (state.networkBlocks ?? []).filter((b) =>
              b.spec?.network.startsWith(`ippool:${pool}/`)
            );
            assertEquals(networkFindings({ ...state, networkBlocks: mine }), []);
            // Each node's self-check covers the pool's space: checked after its sweeps, clean.
            for (const node of c.nodes) {
              let last = "";
              await eventually(
                async () => {
                  const res = await unixRequest(
                    node.socket,
                    "GET",
                    STATS_PATH,
                    undefined,
                    AbortSignal.timeout(5000),
                  );
                  const check = JSON.parse(res.body).ipamCheck as {
                    checks: number;
                    networks?: { network: string; conflicts: number; leaked: number }[];
                  };
                  last = JSON.stringify(check);
                  return check.checks >= 2 &&
                    !!check.networks?.some((n) =>
                      n.network === `ippool:${pool}/v4` && n.conflicts === 0 && n.leaked === 0
                    );
                },
                `${node.name}'s ipam check lists ippool:${pool}/v4, clean`,
                30_000,
              ).catch((e) => {
                throw new Error(`${e.message}: ${last}`);
              });
            }
            for (const pod of pods) assertEquals((await c.removePod(pod)).code, 0, pod.name);
            await eventually(
              async () => (await recorded(c, pool)).length === 0,
              "no allocation left in the pool's blocks after the DELs",
              30_000,
            );
          });
        } finally {
          await dropBlocks(c, pool);
        }
      });
    }),
});

/** ADDs a pod on `nad`; its CNI error text (the pod is not created). */
async function refused(c: SimCluster, nad: string, name: string): Promise<string> {
  return await c.addPod(c.nodes[0], name, 0, {
    annotations: { "k8s.v1.cni.cncf.io/networks": nad },
  }).then(() => "plugged", (e: Error) => e.message);
}

/** Waits for an InvalidNetworkSelection Event on pod `name` whose message has `text`. */
async function eventSays(c: SimCluster, name: string, text: string): Promise<void> {
  await eventually(
    () => eventOn(c, name, "InvalidNetworkSelection", text),
    `an InvalidNetworkSelection Event on ${name} saying ${text}`,
  );
}

Deno.test({
  name:
    "a NAD naming a pool that does not exist, a pool of the default network or a disabled pool is refused with code 7 naming ipam.pool and an Event; a full pool answers 101 naming network and range",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 1, config: CONFIG }, async (c) => {
      const third = 100 + Math.floor(Math.random() * 100);
      // A pool of the default network's pods (no spec.use), one disabled, one of 2 addresses.
      await withPool(c, { cidrs: [`192.168.${third}.0/28`] }, (podPool) =>
        withPool(
          c,
          { use: "networks", disabled: true, cidrs: [`192.168.${third}.16/28`] },
          (off) =>
            withPool(
              c,
              { use: "networks", cidrs: [`192.168.${third}.32/30`] },
              async (small) => {
                try {
                  const cases: [string, string][] = [
                    [`nx-${podPool}`, `IPPool nx-${podPool} does not exist`],
                    [podPool, "pool of the default network's pods"],
                    [off, "is disabled"],
                  ];
                  for (const [i, [pool, why]] of cases.entries()) {
                    await withNad(c, { type: "ferry", pool }, async (nad) => {
                      const e = await refused(c, nad, `bad${i}`);
                      assert(e.includes('"code":7'), `${pool}: ${e}`);
                      assert(e.includes("ipam.pool:") && e.includes(why), `${pool}: ${e}`);
                      await eventSays(c, `bad${i}`, why);
                    });
                  }
                  // A range over a pool for networks: two spaces would share its addresses.
                  await withNad(
                    c,
                    { type: "ferry", range: `192.168.${third}.32/29` },
                    async (nad) => {
                      const e = await refused(c, nad, "overpool");
                      assert(e.includes('"code":7') && e.includes("ipam.range:"), e);
                      assert(e.includes(`overlaps IPPool ${small}`), e);
                    },
                  );
                  await withNad(c, { type: "ferry", pool: small }, async (nad) => {
                    const annotations = { "k8s.v1.cni.cncf.io/networks": nad };
                    const a = await c.addPod(c.nodes[0], "full0", 30_000, { annotations });
                    const b = await c.addPod(c.nodes[0], "full1", 30_000, { annotations });
                    assertEquals(
                      [...await net1(a), ...await net1(b)].sort(),
                      [`192.168.${third}.33`, `192.168.${third}.34`],
                    );
                    const e = await refused(c, nad, "full2");
                    assert(e.includes('"code":101'), e);
                    assert(
                      e.includes(`default/${nad}`) || e.includes(nad),
                      `the network is named: ${e}`,
                    );
                    assert(e.includes(`192.168.${third}.32/30`), `the range is named: ${e}`);
                    for (const p of [a, b]) assertEquals((await c.removePod(p)).code, 0);
                  });
                  const { items } = await c.client.listAll<NetworkBlockObject>(NETWORKBLOCKS, {});
                  assertEquals(
                    items.filter((x) =>
                      [podPool, off, `nx-${podPool}`].some((p) =>
                        x.spec?.network.startsWith(`ippool:${p}/`)
                      )
                    ),
                    [],
                    "no block claimed for a refused ADD",
                  );
                } finally {
                  await dropBlocks(c, small);
                }
              },
            ),
        ));
    }),
});

Deno.test({
  name:
    "a pod's static address on a pool NAD must lie in the pool it names and not be its gateway: another pool's address (held by a pod there) or the gateway is refused with code 7, one in the pool is served; a host-local NAD over a pool for networks is refused with code 7 naming the pool",
  ...opts,
  fn: () =>
    withSimCluster({ kubeconfig: REAL_KUBECONFIG, nodes: 1, config: CONFIG }, async (c) => {
      const third = 100 + Math.floor(Math.random() * 100);
      // The victim tenant's pool (2 addresses) and the attacker's own pool beside it.
      await withPool(c, { use: "networks", cidrs: [`192.168.${third}.32/30`] }, (theirs) =>
        withPool(c, { use: "networks", cidrs: [`192.168.${third}.48/28`] }, async (mine) => {
          try {
            await withNad(c, { type: "ferry", pool: theirs }, (victimNad) =>
              withNad(
                c,
                { type: "ferry", pool: mine, gateway: `192.168.${third}.49` },
                async (evilNad) => {
                  const onTheirs = { "k8s.v1.cni.cncf.io/networks": victimNad };
                  const victim = await c.addPod(c.nodes[0], "victim", 30_000, {
                    annotations: onTheirs,
                  });
                  const [victimIp] = await net1(victim);
                  assert(victimIp?.startsWith(`192.168.${third}.3`), `victim got ${victimIp}`);
                  const asking = (name: string, ip: string) =>
                    c.addPod(c.nodes[0], name, 0, {
                      annotations: {
                        "k8s.v1.cni.cncf.io/networks": JSON.stringify([{
                          name: evilNad,
                          ips: [ip],
                        }]),
                      },
                    }).then(async (p) =>
                      `plugged with ${await net1(p)}`, (e: Error) =>
                      e.message);
                  const stolen = await asking("evil0", `${victimIp}/30`);
                  assert(
                    stolen.includes('"code":7') && stolen.includes("outside the IPPool"),
                    `another pool's address held by ${victim.name} (${victimIp}): ${stolen}`,
                  );
                  const gw = await asking("evil1", `192.168.${third}.49/28`);
                  assert(
                    gw.includes('"code":7') && gw.includes("gateway"),
                    `the pool NAD's gateway as a static address: ${gw}`,
                  );
                  const own = await asking("own0", `192.168.${third}.55/28`);
                  assertEquals(
                    own,
                    `plugged with 192.168.${third}.55`,
                    "a static address in the pool the NAD names",
                  );
                  // Blocks are written a moment after their changes (the writer's delay).
                  await eventually(
                    async () => (await recorded(c, theirs)).length > 0,
                    "the victim's allocation written to its pool's block",
                  );
                  assertEquals(
                    (await recorded(c, theirs)).map((x) => x.split(" ")[0]),
                    [victimIp],
                    "the victim's pool records its address once",
                  );
                  // Another IPAM over the pool's CIDR would hand out its pods' addresses again.
                  await withNad(c, {
                    type: "host-local",
                    ranges: [[{ subnet: `192.168.${third}.32/30` }]],
                  }, async (overNad) => {
                    const e = await refused(c, overNad, "evil2");
                    assert(
                      e.includes('"code":7') && e.includes(`overlaps IPPool ${theirs}`),
                      `host-local over IPPool ${theirs} (its pod holds ${victimIp}): ${e}`,
                    );
                  });
                },
                { capabilities: { ips: true } },
              ));
          } finally {
            await dropBlocks(c, theirs);
            await dropBlocks(c, mine);
          }
        }));
    }),
});

Deno.test({
  name:
    "a deleted node's blocks of a pool NAD are reclaimed in kubernetes IPAM mode with whereabouts left to its plugin: the Lease holder deletes them though they would stay empty for blockReleaseSeconds",
  ...opts,
  fn: () =>
    withSimCluster({
      kubeconfig: REAL_KUBECONFIG,
      nodes: 2,
      config: { ...CONFIG, gc: { ...CONFIG.gc, reclaimIntervalSeconds: 1 } },
    }, async (c) => {
      const third = 100 + Math.floor(Math.random() * 100);
      // A /24: blocks of two addresses, which a node keeps empty for ipam.blockReleaseSeconds.
      await withPool(c, { use: "networks", cidrs: [`192.168.${third}.0/24`] }, async (pool) => {
        try {
          await withNad(c, { type: "ferry", pool }, async (nad) => {
            const gone = c.nodes[1];
            const pod = await c.addPod(gone, "fr-gone", 60_000, {
              annotations: { "k8s.v1.cni.cncf.io/networks": nad },
            });
            const of = async () =>
              (await blocksOf(c, pool)).filter((b) => b.spec?.node === gone.name).map((b) =>
                b.spec!.cidr
              );
            const held = await of();
            assert(held.length > 0, `${gone.name} claimed no block for ${pod.name}`);
            assertEquals((await c.removePod(pod)).code, 0, `DEL of ${pod.name}`);
            await c.deleteNode(gone);
            let left: string[] = [];
            // On the real API server, a daemon of a cluster torn down before may still hold the
            // reclaim Lease for three default intervals (30 s) from its last renewal.
            await eventually(
              async () => (left = await of()).length === 0,
              `the blocks of the deleted node ${gone.name} (${held.join(", ")}) reclaimed`,
              45_000,
            ).catch((e) => {
              throw new Error(`${e.message}; still there: ${left.join(", ")}`);
            });
          });
        } finally {
          await dropBlocks(c, pool);
        }
      });
    }),
});
