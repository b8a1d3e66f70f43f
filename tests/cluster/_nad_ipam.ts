/**
 * Cluster-wide IPAM for NADs (#44) on the real cluster: a macvlan NAD on the underlay whose
 * `"type": "whereabouts"` config Ferry serves natively (`multiNetwork.whereaboutsIpam: native`, set
 * through Ferry's ConfigMap and restored), pods on every node with distinct addresses of its range
 * reaching each other on it, `ipam check` clean, and a /28 shared by three nodes serving all 14 of
 * its addresses.
 *
 * @module
 */
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { exec, kubectl, kubectlJson, NODES, REPO, until } from "./_realcluster.ts";
import { apply, ferryReady, ipamCheck, NS, reaches, ready, server } from "./_suite.ts";
import { ferryCli } from "./_operator_cli.ts";
import { cidrContains, parseCidr, parseIp } from "../../daemon/ipam/cidr.ts";

/** The NAD's range: 14 addresses (whereabouts hands out the second to the last but one). */
const RANGE = "192.168.179.0/28";
const NAD = "underlay-wb";

/** Ferry's config file in its ConfigMap. */
async function ferryConfig(): Promise<string> {
  return (await kubectlJson<{ data: Record<string, string> }>(
    "get",
    "configmap",
    "-n",
    "kube-system",
    "ferry-config",
  )).data["config.json"];
}

/** Writes Ferry's config file and restarts the daemons (they read it at start). */
async function setFerryConfig(text: string): Promise<void> {
  await kubectl(
    "patch",
    "-n",
    "kube-system",
    "configmap/ferry-config",
    "--type=merge",
    "-p",
    JSON.stringify({ data: { "config.json": text } }),
  );
  await kubectl("rollout", "restart", "-n", "kube-system", "ds/ferry");
  await ferryReady();
}

/** Runs `fn` with `multiNetwork.whereaboutsIpam: native`, then puts the config back. */
async function withNativeWhereabouts(fn: () => Promise<void>): Promise<void> {
  const before = await ferryConfig();
  const config = JSON.parse(before) as { multiNetwork?: Record<string, unknown> };
  config.multiNetwork = { ...config.multiNetwork, whereaboutsIpam: "native" };
  await setFerryConfig(JSON.stringify(config, null, 2));
  try {
    await fn();
  } finally {
    await setFerryConfig(before);
  }
}

/** The addresses a pod got on the NAD, from its `network-status`. */
async function nadAddresses(pod: string): Promise<string[]> {
  const p = await kubectlJson<{ metadata: { annotations: Record<string, string> } }>(
    "get",
    "pod",
    "-n",
    NS,
    pod,
  );
  const status = JSON.parse(
    p.metadata.annotations["k8s.v1.cni.cncf.io/network-status"] ?? "[]",
  ) as {
    name: string;
    ips?: string[];
  }[];
  return status.find((s) => s.name === `${NS}/${NAD}`)?.ips ?? [];
}

/** A pause pod on `node` attached to the NAD (the range's fillers). */
function filler(name: string, node: string) {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: NS,
      labels: { app: "wb-filler" },
      annotations: { "k8s.v1.cni.cncf.io/networks": NAD },
    },
    spec: {
      nodeName: node,
      terminationGracePeriodSeconds: 1,
      containers: [{ name: "c", image: "registry.k8s.io/pause:3.9" }],
    },
  };
}

/**
 * Pods on every node on a natively served whereabouts NAD: distinct addresses of its range,
 * reaching each other on it; `ipam check` clean; all 14 addresses of the /28 served across three
 * nodes.
 */
export async function nativeWhereaboutsAcrossNodes(): Promise<void> {
  await kubectl("apply", "-f", `${REPO}deploy/base/crds/network-attachment-definitions.yaml`);
  await until(
    async () =>
      (await exec("kubectl", ["get", "network-attachment-definitions", "-n", NS])).code === 0,
    "the NAD CRD served",
  );
  await withNativeWhereabouts(async () => {
    await apply({
      apiVersion: "k8s.cni.cncf.io/v1",
      kind: "NetworkAttachmentDefinition",
      metadata: { name: NAD, namespace: NS },
      spec: {
        config: JSON.stringify({
          cniVersion: "1.0.0",
          type: "macvlan",
          master: "eth0",
          mode: "bridge",
          ipam: { type: "whereabouts", range: RANGE },
        }),
      },
    });
    const names = NODES.map((_, i) => `wb${i + 1}`);
    for (const [i, node] of NODES.entries()) {
      await apply(server(names[i], node, { "k8s.v1.cni.cncf.io/networks": NAD }));
    }
    await ready(`app in (${names.join(",")})`, NODES.length);
    const range = parseCidr(RANGE);
    const got = new Map<string, string>();
    for (const name of names) {
      const ips = await nadAddresses(name);
      assertEquals(ips.length, 1, `${name}'s addresses on ${NAD}: ${JSON.stringify(ips)}`);
      assert(cidrContains(range, parseIp(ips[0])), `${name} got ${ips[0]}, outside ${RANGE}`);
      got.set(name, ips[0]);
    }
    assertEquals(
      new Set(got.values()).size,
      names.length,
      `an address handed out twice: ${JSON.stringify([...got])}`,
    );
    // Each pod reaches the next node's pod on the NAD's address.
    for (const [i, name] of names.entries()) {
      const to = names[(i + 1) % names.length];
      await reaches(name, got.get(to)!, (t) => t === to);
    }
    await ipamCheck();
    const viaCli = await ferryCli("ipam", "check");
    assertEquals(viaCli.code, 0, `kubectl ferry ipam check: ${viaCli.out}${viaCli.err}`);

    // The rest of the /28 (14 addresses) filled from all three nodes: every address served once.
    const fillers = Array.from({ length: 14 - names.length }, (_, i) => `wb-fill${i}`);
    for (const [i, name] of fillers.entries()) await apply(filler(name, NODES[i % NODES.length]));
    const all = await ready("app=wb-filler", fillers.length);
    const every = [...got.values()];
    for (const p of all) every.push(...await nadAddresses(p.name));
    assertEquals(new Set(every).size, 14, `the /28's addresses served: ${every.sort().join(" ")}`);
    await ipamCheck();
    await kubectl("delete", "pod", "-n", NS, ...names, ...fillers, "--wait=true");
    await kubectl("delete", "network-attachment-definitions", "-n", NS, NAD);
  });
  await ipamCheck();
}
