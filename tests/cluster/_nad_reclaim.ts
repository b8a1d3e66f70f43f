/**
 * A deleted node's blocks of a NAD network reclaimed (#44) on the real cluster: a macvlan NAD whose
 * IPAM is Ferry's own `ferry` type naming an IPPool for networks (a /28: every address is a
 * single-address `NetworkBlock`), filled whole by pods on the three nodes. The step that drains and
 * deletes a node calls {@link fillPoolNad} before, {@link poolNadReclaimed} after the deletion and
 * {@link poolNadBack} once the node is added back.
 *
 * The `ferry` type is used rather than a natively served whereabouts NAD: it is served in every
 * mode, so no change of Ferry's ConfigMap and no restart of the DaemonSet (two rollouts) is needed
 * inside the node-deletion step; the whereabouts NAD across the three nodes has its own step.
 *
 * @module
 */
import { assert, assertEquals } from "deno-std/assert/mod.js";
import {
  exec,
  kubectl,
  kubectlJson,
  NODES,
  type PodInfo,
  pods,
  REPO,
  until,
} from "./_realcluster.ts";
import { AGNHOST, apply, ipamCheck, NS, reaches, ready } from "./_suite.ts";
import { ferryCli } from "./_operator_cli.ts";
import { cidrContains, parseCidr, parseIp } from "../../daemon/ipam/cidr.ts";

/** The pool's range: 14 addresses (its network and all-ones addresses are never handed out). */
const RANGE = "192.168.181.0/28";
const POOL = "suite-nad-reclaim";
const NAD = "underlay-pool";
/** The DaemonSet of NAD servers (one per node) and the pause pods that fill the rest of the /28. */
const SERVERS = "nadpool";
const FILL = "nadpool-fill";
const AGAIN = "nadpool-again";

/** What the node about to be deleted holds of the NAD network. */
export interface PoolNadFill {
  /** Its `NetworkBlock`s in the pool's range (`name cidr`). */
  blocks: string[];
  /** The addresses its pods got on the NAD (from `network-status`). */
  addresses: string[];
}

/** The NAD's addresses of a pod, from its `network-status`. */
async function nadAddresses(pod: string): Promise<string[]> {
  const p = await kubectlJson<{ metadata: { annotations?: Record<string, string> } }>(
    "get",
    "pod",
    "-n",
    NS,
    pod,
  );
  const status = JSON.parse(
    p.metadata.annotations?.["k8s.v1.cni.cncf.io/network-status"] ?? "[]",
  ) as { name: string; ips?: string[] }[];
  return status.find((s) => s.name === `${NS}/${NAD}`)?.ips ?? [];
}

/** The `NetworkBlock`s of `node` in the pool's range, as `name cidr`. */
async function blocksOf(node: string): Promise<string[]> {
  const range = parseCidr(RANGE);
  const { items } = await kubectlJson<
    { items: { metadata: { name: string }; spec?: { node: string; cidr: string } }[] }
  >("get", "networkblocks");
  return items.filter((b) =>
    b.spec?.node === node && cidrContains(range, parseCidr(b.spec.cidr).network)
  ).map((b) => `${b.metadata.name} ${b.spec!.cidr}`).sort();
}

/** A pause pod on `node` attached to the NAD. */
function pausePod(name: string, app: string, node: string) {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: NS,
      labels: { app },
      annotations: { "k8s.v1.cni.cncf.io/networks": NAD },
    },
    spec: {
      nodeName: node,
      terminationGracePeriodSeconds: 1,
      containers: [{ name: "c", image: "registry.k8s.io/pause:3.9" }],
    },
  };
}

/** The NAD's address of every pod of `pods`, checked to be one address in the range each. */
async function addressesOf(pods: PodInfo[]): Promise<Map<string, string>> {
  const range = parseCidr(RANGE);
  const got = new Map<string, string>();
  for (const p of pods) {
    const ips = await nadAddresses(p.name);
    assertEquals(ips.length, 1, `${p.name}'s addresses on ${NAD}: ${JSON.stringify(ips)}`);
    assert(cidrContains(range, parseIp(ips[0])), `${p.name} got ${ips[0]}, outside ${RANGE}`);
    got.set(p.name, ips[0]);
  }
  return got;
}

/**
 * The pool, the NAD, a NAD server on every node (a DaemonSet: a drain leaves it, so the node's
 * blocks stay held until the node is deleted) and pause pods filling the rest of the /28 from all
 * three nodes; every address served once. Returns what `gone` holds.
 */
export async function fillPoolNad(gone: string): Promise<PoolNadFill> {
  await kubectl("apply", "-f", `${REPO}deploy/base/crds/network-attachment-definitions.yaml`);
  await until(
    async () =>
      (await exec("kubectl", ["get", "network-attachment-definitions", "-n", NS])).code === 0,
    "the NAD CRD served",
  );
  await apply({
    apiVersion: "ferry.dev/v1",
    kind: "IPPool",
    metadata: { name: POOL },
    spec: { cidrs: [RANGE], use: "networks" },
  });
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
        ipam: { type: "ferry", pool: POOL },
      }),
    },
  });
  await apply({
    apiVersion: "apps/v1",
    kind: "DaemonSet",
    metadata: { name: SERVERS, namespace: NS },
    spec: {
      selector: { matchLabels: { app: SERVERS } },
      template: {
        metadata: {
          labels: { app: SERVERS },
          annotations: { "k8s.v1.cni.cncf.io/networks": NAD },
        },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [{ name: "c", image: AGNHOST, args: ["netexec", "--http-port=8080"] }],
        },
      },
    },
  });
  const fillers = Array.from({ length: 14 - NODES.length }, (_, i) => `${FILL}${i}`);
  for (const [i, name] of fillers.entries()) {
    await apply(pausePod(name, FILL, NODES[i % NODES.length]));
  }
  const all = [...await ready(`app=${SERVERS}`, NODES.length), ...await ready(`app=${FILL}`, 11)];
  const got = await addressesOf(all);
  assertEquals(
    new Set(got.values()).size,
    14,
    `the /28's addresses served once each: ${JSON.stringify([...got])}`,
  );
  const addresses = all.filter((p) => p.node === gone).map((p) => got.get(p.name)!).sort();
  const blocks = await blocksOf(gone);
  assert(
    addresses.length > 0 && blocks.length >= addresses.length,
    `${gone} holds blocks for its NAD pods' addresses ${addresses.join(" ")}: ${blocks.join(", ")}`,
  );
  await ipamCheck();
  return { blocks, addresses };
}

/**
 * After `gone` is drained and deleted: its NAD blocks are gone, the remaining nodes' NAD servers
 * reach each other on the NAD, and new NAD pods on the remaining nodes get exactly the addresses
 * `gone` held (the rest of the /28 is taken). The new pods are deleted again, so that the node
 * added back finds room.
 */
export async function poolNadReclaimed(gone: string, held: PoolNadFill): Promise<void> {
  let left: string[] = [];
  await until(
    async () => (left = await blocksOf(gone)).length === 0,
    `the NAD blocks of ${gone} (${held.blocks.join(", ")}) reclaimed`,
    120_000,
  ).catch((e) => {
    throw new Error(`${e.message}; still there: ${left.join(", ")}`);
  });
  const rest = NODES.filter((n) => n !== gone);
  const servers = await ready(`app=${SERVERS}`, rest.length);
  const at = await addressesOf(servers);
  for (const [i, s] of servers.entries()) {
    const to = servers[(i + 1) % servers.length];
    await reaches(s.name, at.get(to.name)!, (t) => t === to.name);
  }
  // The space gone held, handed out again on the remaining nodes.
  const again = held.addresses.map((_, i) => `${AGAIN}${i}`);
  for (const [i, name] of again.entries()) await apply(pausePod(name, AGAIN, rest[i % 2]));
  const reused = await addressesOf(await ready(`app=${AGAIN}`, again.length));
  assertEquals(
    [...reused.values()].sort(),
    held.addresses,
    `new NAD pods on ${rest.join(", ")} got other than the addresses ${gone} held`,
  );
  await ipamCheck();
  await kubectl("delete", "pod", "-n", NS, "-l", `app=${AGAIN}`, "--wait=true");
}

/**
 * After `gone` is added back: its NAD server gets an address of the /28 no other pod has and is
 * reached on it; `ipam check` (the suite's and `kubectl ferry`'s) is clean; the NAD's objects are
 * removed.
 */
export async function poolNadBack(gone: string): Promise<void> {
  const servers = await ready(`app=${SERVERS}`, NODES.length);
  const fillers = await pods(NS, `app=${FILL}`);
  const at = await addressesOf([...servers, ...fillers]);
  assertEquals(
    new Set(at.values()).size,
    at.size,
    `an address of ${NAD} handed out twice: ${JSON.stringify([...at])}`,
  );
  const back = servers.find((p) => p.node === gone);
  if (!back) {
    throw new Error(`no NAD server on ${gone} once added back: ${JSON.stringify(servers)}`);
  }
  assert((await blocksOf(gone)).length > 0, `${gone} claimed no NAD block once added back`);
  const from = servers.find((p) => p.node === NODES[0])!;
  await reaches(from.name, at.get(back.name)!, (t) => t === back.name);
  await ipamCheck();
  const viaCli = await ferryCli("ipam", "check");
  assertEquals(viaCli.code, 0, `kubectl ferry ipam check: ${viaCli.out}${viaCli.err}`);
  await kubectl("delete", "daemonset", "-n", NS, SERVERS, "--wait=true");
  await kubectl("delete", "pod", "-n", NS, "-l", `app in (${SERVERS},${FILL})`, "--wait=true");
  await kubectl("delete", "network-attachment-definitions", "-n", NS, NAD);
  await kubectl("delete", "ippools", POOL);
}
