// A whereabouts space's range belongs to the namespace that first used it: another tenant's NAD
// naming it is refused (code 7, a Warning Event), also when two nodes see the first ADDs of two
// namespaces at once. On the stand-in, or a real server in `test:real`.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import type { Event } from "kubernetes-types/core/v1.d.ts";
import { CNI_ERROR, CniError } from "../../../lib/cni/errors.ts";
import type { CniResult, NetConf } from "../../../lib/cni/schemas.ts";
import { installNetworkBlockCrd } from "../../../daemon/dev/crds.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";
import { NativeNadIpam } from "../../../daemon/drivers/nad_native_ipam.ts";
import { cidrsOverlap, parseCidr } from "../../../daemon/ipam/cidr.ts";
import type { NetworkBlockObject } from "../../../daemon/ipam/nad_blocks.ts";
import { parseWhereabouts } from "../../../daemon/ipam/nad_ipam.ts";
import { NadNetworkIpam } from "../../../daemon/ipam/nad_network_ipam.ts";
import {
  claimedRanges,
  type NetworkOwnerObject,
  ownersKey,
  type SharedSpace,
  sharedVerdict,
  spaceOfNetwork,
  SpaceOwners,
  upgradeOwner,
} from "../../../daemon/ipam/nad_space_owners.ts";
import { kubeNetworkBlockApi } from "../../../daemon/ipam/network_block_api.ts";
import { kubeNetworkOwnerApi } from "../../../daemon/ipam/network_owner_api.ts";
import { EVENTS, LEASES, NETWORKBLOCKS, NETWORKOWNERS } from "../../../daemon/k8s/resources.ts";
import { type KubeTarget, withKube } from "../k8s/_target.ts";
import { freshCidr24, until } from "./_pools.ts";

/** One simulated node: its NAD IPAM served natively, with the owners' check. */
interface Node {
  native: NativeNadIpam;
  /** ADD of pod `namespace/name` on `nad` (a NAD config); the result, or the CniError. */
  add(nad: NetConf, namespace: string, name: string, ips?: string[]): Promise<CniResult>;
}

interface Env {
  k: KubeTarget;
  /** A network_name unique to this test. */
  net: string;
  /** A /24 unlikely to be in use. */
  cidr: string;
  /** Opens node `short` (its own state directory, IPAM and owners' check). */
  node(short: string, shared?: SharedSpace[]): Promise<Node>;
  /** The Warning Events the owners' check wrote. */
  events(): Promise<Event[]>;
  /** This test's owner objects. */
  owners(): Promise<NetworkOwnerObject[]>;
}

/** Runs `fn` on the API under test; what the test made there is removed afterwards. */
function withOwners(fn: (env: Env) => Promise<void>): Promise<void> {
  return withKube(async (k) => {
    await installNetworkBlockCrd(k.client);
    const claims = { namespace: "default", name: `ferry-nad-claims-${k.id}` };
    const ownerClaims = { namespace: "default", name: `ferry-nad-owner-claims-${k.id}` };
    const net = `own-${k.id}`;
    const cidr = freshCidr24();
    const opened: NadNetworkIpam[] = [];
    const dirs: string[] = [];
    const mine = (network?: string) => !!network && network.startsWith(`${net}`);
    // This test's: of its network_names, or of the unnamed spaces inside its /24.
    const unnamed = (network?: string, range?: string) =>
      (network === "v4" || !!network?.startsWith("range-")) && !!range &&
      cidrsOverlap(parseCidr(range), parseCidr(cidr));
    const owners = async () =>
      (await k.client.listAll<NetworkOwnerObject>(NETWORKOWNERS, {})).items.filter((o) =>
        mine(o.spec?.network) || unnamed(o.spec?.network, o.spec?.cidr)
      );
    const eventNs = new Set<string>();
    try {
      await fn({
        k,
        net,
        cidr,
        async node(short, shared = []) {
          const stateDir = await Deno.makeTempDir({ prefix: "ferry-owners-" });
          dirs.push(stateDir);
          const blocks = kubeNetworkBlockApi(k.client, claims);
          const ownersCheck = new SpaceOwners({
            api: kubeNetworkOwnerApi(k.client, ownerClaims),
            shared,
            blocks: (network) => blocks.list({ network }),
            refused: (pod, message) => {
              eventNs.add(pod.namespace);
              void k.client.createEvent(
                { kind: "Pod", apiVersion: "v1", namespace: pod.namespace, name: pod.name },
                { type: "Warning", reason: "NetworkRangeOwned", message, component: "ferry" },
              ).catch(() => {});
            },
            logger: getLogger(["ferry", "ipam"]),
          });
          const native = new NativeNadIpam(async () => {
            const ipam = await NadNetworkIpam.open({
              nodeName: `${short}-${k.id}`,
              api: blocks,
              stateDir,
              releaseAfterMs: 600_000,
              writeDelayMs: 0,
              logger: getLogger(["ferry", "ipam"]),
            });
            opened.push(ipam);
            return ipam;
          }, { whereabouts: true, owners: ownersCheck });
          let n = 0;
          return {
            native,
            add: (nad, namespace, name, ips) =>
              native.add({
                conf: ips ? { ...nad, runtimeConfig: { ips } } : nad,
                key: { containerId: `${short}-${name}-${n++}`, ifname: "net1" },
                args: { K8S_POD_NAMESPACE: namespace, K8S_POD_NAME: name },
              }),
          };
        },
        async events() {
          const out: Event[] = [];
          for (const namespace of eventNs) {
            const { items } = await k.client.listAll<Event>(EVENTS, { namespace });
            out.push(...items.filter((e) => e.reason === "NetworkRangeOwned"));
          }
          return out;
        },
        owners,
      });
    } finally {
      for (const ipam of opened) await ipam.close();
      for (const o of await owners()) {
        await k.client.delete(NETWORKOWNERS, undefined, o.metadata!.name!).catch(() => {});
      }
      const { items } = await k.client.listAll<NetworkBlockObject>(NETWORKBLOCKS, {});
      for (
        const b of items.filter((b) =>
          mine(b.spec?.network) || unnamed(b.spec?.network, b.spec?.cidr)
        )
      ) {
        await k.client.delete(NETWORKBLOCKS, undefined, b.metadata!.name!).catch(() => {});
      }
      for (const lease of [claims, ownerClaims]) {
        await k.client.delete(LEASES, lease.namespace, lease.name).catch(() => {});
      }
      for (const dir of dirs) await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  });
}

/** The tenants: namespaces every API server has (a real one refuses Events elsewhere). */
const A = "default";
const B = "kube-public";
const C = "kube-node-lease";

/** A macvlan NAD config with whereabouts IPAM `ipam`. */
function nad(name: string, ipam: Record<string, unknown>): NetConf {
  return {
    cniVersion: "1.0.0",
    name,
    type: "macvlan",
    ipam: { type: "whereabouts", ...ipam },
  } as NetConf;
}

/** The CniError `p` rejects with (fails when it resolves or throws something else). */
async function refusal(p: Promise<unknown>, what: string): Promise<CniError> {
  const e = await p.then(() => undefined, (e) => e);
  assert(e instanceof CniError, `${what}: expected a CNI error, got ${e ?? "success"}`);
  return e;
}

const address = (r: CniResult) => r.ips![0].address.split("/")[0];
/** The `.n` of the /24 `cidr`. */
const at = (cidr: string, n: number) => cidr.replace(/\.0\/24$/, `.${n}`);

Deno.test("a NAD of another namespace naming a whereabouts space's network_name and range is refused with code 7, dynamic and static, and the owner's pods keep every address", async () => {
  await withOwners(async ({ net, cidr, node, events, owners }) => {
    const n1 = await node("n1");
    const n2 = await node("n2");
    // The range: six addresses.
    const range = cidr.replace(/\.0\/24$/, ".0/29");
    const a = nad("storage", { range, network_name: net });
    const b = nad("squat", { range, network_name: net });
    const first = await n1.add(a, A, "a0");
    const dynamic = await refusal(n2.add(b, B, "b0"), "B's pod, dynamic");
    assertEquals(dynamic.code, CNI_ERROR.INVALID_CONFIG, dynamic.message);
    for (const part of [`"${net}/v4"`, range, `namespace ${A}`, B, "network squat"]) {
      assert(dynamic.message.includes(part), `the refusal names ${part}: ${dynamic.message}`);
    }
    // A chosen address of A's range, from a node that holds none of it, and one that does.
    for (const [n, which] of [[n2, "n2"], [n1, "n1"]] as const) {
      const e = await refusal(n.add(b, B, "b1", [`${at(cidr, 5)}/29`]), `static ${which}`);
      assertEquals(e.code, CNI_ERROR.INVALID_CONFIG, e.message);
      assert(e.message.includes(`namespace ${A}`), e.message);
    }
    // A NAD of B with another range of A's network_name, its static address inside A's range.
    const side = nad("side", { range: cidr.replace(/\.0\/24$/, ".128/25"), network_name: net });
    const e = await refusal(n2.add(side, B, "b2", [`${at(cidr, 3)}/24`]), "static");
    assertEquals(e.code, CNI_ERROR.INVALID_CONFIG, e.message);
    // A's pods get the five other addresses, on either node, one of them its planned static one.
    const got = [address(first)];
    // Planned as .5, unless A's first pod was given .5 dynamically (then .4).
    const planned = at(cidr, address(first) === at(cidr, 5) ? 4 : 5);
    got.push(address(await n1.add(a, A, "a-static", [`${planned}/29`])));
    for (let i = 1; i <= 4; i++) {
      got.push(address(await (i % 2 ? n2 : n1).add(a, A, `a${i}`)));
    }
    assertEquals(got.sort(), [1, 2, 3, 4, 5, 6].map((i) => at(cidr, i)).sort());
    // A's range is A's; the other range B's NAD named (nobody's before) is B's.
    const recorded = (await owners()).map((o) => [o.spec!.cidr, o.spec!.namespace]).sort();
    assertEquals(recorded, [[range, A], [
      cidr.replace(/\.0\/24$/, ".128/25"),
      B,
    ]]);
    // Each refusal said on B's pod, naming the conflict.
    let said: Event[] = [];
    await until(async () =>
      (said = await events()).some((ev) =>
        ev.involvedObject?.name === "b0" && ev.type === "Warning" &&
        (ev.message ?? "").includes(`namespace ${A}`) && (ev.message ?? "").includes(range)
      )
    ).catch(() => {
      throw new Error(
        `no Warning Event on ${B}/b0 naming the owner; seen: ${
          JSON.stringify(said.map((e) => e.message))
        }`,
      );
    });
  });
});

Deno.test("a NAD without network_name (whereabouts or ferry type) whose range overlaps another namespace's is refused; one inside a range of its own namespace is not", async () => {
  await withOwners(async ({ cidr, node }) => {
    const n1 = await node("n1");
    // Unnamed ranges share the space "v4" cluster-wide: a test's /24 of its own.
    const a = nad("a", { range: cidr.replace(/\.0\/24$/, ".64/26") });
    await n1.add(a, A, "a0");
    const wider = nad("wide", { range: cidr });
    const e = await refusal(n1.add(wider, B, "b0"), "B's /24 over A's /26");
    assertEquals(e.code, CNI_ERROR.INVALID_CONFIG, e.message);
    assert(e.message.includes(`namespace ${A}`), e.message);
    // Ferry's own type giving a range shares the unnamed space: the same owner.
    const ferry = {
      ...wider,
      ipam: { type: "ferry", range: cidr.replace(/\.0\/24$/, ".64/28") },
    } as NetConf;
    const f = await refusal(n1.add(ferry, B, "b2"), "B's ferry-type range inside A's");
    assertEquals(f.code, CNI_ERROR.INVALID_CONFIG, f.message);
    assert(f.message.includes(`namespace ${A}`), f.message);
    const beside = nad("beside", { range: cidr.replace(/\.0\/24$/, ".128/26") });
    await n1.add(beside, B, "b1"); // a range no one owns
    const inner = nad("inner", { range: cidr.replace(/\.0\/24$/, ".64/27") });
    await n1.add(inner, A, "a1");
  });
});

// enable_overlapping_ranges false puts a NAD's range in a space of its own
// (`<network_name>/range-<cidr>`): the owners' check must not depend on it, or B's NAD naming A's
// network_name and range with the flag false is served A's addresses by an allocator that does not
// see A's (one address on two tenants' pods).
for (const variant of ["dynamic", "static"] as const) {
  Deno.test(`a NAD of another namespace naming a network_name and range with enable_overlapping_ranges false is refused (${variant}) and never gets the owner's address`, async () => {
    await withOwners(async ({ net, cidr, node, events }) => {
      const n1 = await node("n1");
      const n2 = await node("n2");
      const range = cidr.replace(/\.0\/24$/, ".0/29");
      const a = nad("storage", { range, network_name: net });
      const b = nad("squat", { range, network_name: net, enable_overlapping_ranges: false });
      const first = address(await n1.add(a, A, "a0"));
      const got =
        await (variant === "static" ? n2.add(b, B, "b0", [`${first}/29`]) : n2.add(b, B, "b0"))
          .then((r) => address(r), (e) => e);
      assert(got instanceof CniError, `B's pod was served ${got} of A's ${range} (A has ${first})`);
      assertEquals(got.code, CNI_ERROR.INVALID_CONFIG, got.message);
      assert(got.message.includes(`namespace ${A}`), got.message);
      await until(async () => (await events()).length > 0, 10_000); // the Warning Event
    });
  });
}

Deno.test("without network_name, the flag false against an unnamed or ferry-type range of another namespace is refused, and the other way round", async () => {
  await withOwners(async ({ cidr, node }) => {
    const n1 = await node("n1");
    const sub = (n: number) => cidr.replace(/\.0\/24$/, `.${n}/27`);
    await n1.add(nad("a", { range: sub(0) }), A, "a0");
    for (const b of [nad("b", { range: sub(0), enable_overlapping_ranges: false })]) {
      const e = await refusal(n1.add(b, B, "b0"), "B's flag false over A's unnamed range");
      assertEquals(e.code, CNI_ERROR.INVALID_CONFIG, e.message);
    }
    // A's range without the flag; B's unnamed and ferry-type ranges over it.
    await n1.add(nad("a", { range: sub(64), enable_overlapping_ranges: false }), A, "a1");
    const ferry = {
      ...nad("f", {}),
      ipam: { type: "ferry", range: cidr.replace(/\.0\/24$/, ".64/28") },
    } as NetConf;
    for (const b of [nad("b", { range: sub(64) }), ferry]) {
      const e = await refusal(n1.add(b, B, "b1"), `B's ${b.ipam!.type} over A's flag false`);
      assertEquals(e.code, CNI_ERROR.INVALID_CONFIG, e.message);
      assert(e.message.includes(`namespace ${A}`), e.message);
    }
  });
});

Deno.test("two spaces never serve one range, in one namespace too: a range overlapping one of another space of its network is refused, the same space is served", async () => {
  await withOwners(async ({ net, cidr, node }) => {
    const n1 = await node("n1");
    const n2 = await node("n2");
    const range = cidr.replace(/\.0\/24$/, ".0/29");
    const shared = nad("a", { range, network_name: net });
    const apart = nad("b", { range, network_name: net, enable_overlapping_ranges: false });
    const held = [address(await n1.add(shared, A, "a0"))];
    // The flag false: the same addresses from a space that does not see A's pod's.
    const e = await refusal(n2.add(apart, A, "a1"), "the flag false over the same range");
    assertEquals(e.code, CNI_ERROR.INVALID_CONFIG, e.message);
    assert(e.message.includes(`"${net}/v4"`), e.message);
    // A wider range of the same space is served, and never hands out a held address.
    const wide = nad("w", { range: cidr.replace(/\.0\/24$/, ".0/28"), network_name: net });
    held.push(address(await n2.add(wide, A, "a2")));
    assertEquals(new Set(held).size, 2);
    // Without the flag, the space is the range: the same range shares it, another one overlapping
    // it does not (whichever came first), on another part of the /24.
    const r1 = cidr.replace(/\.0\/24$/, ".128/28");
    const one = nad("o", { range: r1, network_name: net, enable_overlapping_ranges: false });
    const got = [address(await n1.add(one, A, "o0")), address(await n2.add(one, A, "o1"))];
    assertEquals(new Set(got).size, 2);
    const inner = nad("i", {
      range: cidr.replace(/\.0\/24$/, ".128/29"),
      network_name: net,
      enable_overlapping_ranges: false,
    });
    for (const other of [inner, nad("d", { range: r1, network_name: net })]) {
      const f = await refusal(n1.add(other, A, "x"), "another space over the flag-false range");
      assertEquals(f.code, CNI_ERROR.INVALID_CONFIG, f.message);
    }
  });
});

Deno.test("namespaces a shared space lists are refused a range recorded in another space of it", async () => {
  await withOwners(async ({ net, cidr, node }) => {
    const n1 = await node("n1");
    const a = nad("a", { range: cidr, network_name: net });
    await n1.add(a, A, "a0"); // recorded: A's, in space <net>/v4
    const n2 = await node("n2", [{ network: net, namespaces: [A, B] }]);
    await n2.add(a, B, "b0"); // the operator shares it: the same space serves B
    const apart = nad("b", { range: cidr, network_name: net, enable_overlapping_ranges: false });
    const e = await refusal(n2.add(apart, B, "b1"), "the flag false in a shared space");
    assertEquals(e.code, CNI_ERROR.INVALID_CONFIG, e.message);
  });
});

Deno.test("a space multiNetwork.sharedWhereaboutsSpaces lists serves every namespace it names, and refuses the others naming the entry", async () => {
  await withOwners(async ({ net, cidr, node, owners }) => {
    const shared: SharedSpace[] = [{ network: net, namespaces: [A, B] }];
    const n1 = await node("n1", shared);
    const n2 = await node("n2", shared);
    const conf = nad("storage", { range: cidr, network_name: net });
    const a = await n1.add(conf, A, "a0");
    const b = await n2.add(conf, B, "b0");
    const b2 = await n1.add(conf, B, "b1", [`${at(cidr, 77)}/24`]);
    assertEquals(new Set([address(a), address(b), address(b2)]).size, 3);
    const e = await refusal(n2.add(conf, C, "c0"), "an unlisted namespace");
    assertEquals(e.code, CNI_ERROR.INVALID_CONFIG, e.message);
    assert(e.message.includes("sharedWhereaboutsSpaces"), e.message);
    assert(e.message.includes(`${A}, ${B}`), e.message);
    assertEquals(await owners(), [], "a listed space records no owner");
  });
});

Deno.test("two namespaces' first ADDs racing on two nodes end with exactly one owner, the other refused with code 7", async () => {
  await withOwners(async ({ net, node, owners }) => {
    const n1 = await node("n1");
    const n2 = await node("n2");
    // The same range, and overlapping ranges of different CIDRs (settled on the claim counter).
    for (let round = 0; round < 6; round++) {
      const cidr = freshCidr24();
      const name = `${net}-r${round}`;
      const wide = round % 2 === 1;
      const a = nad("a", { range: cidr, network_name: name });
      const b = nad("b", { range: wide ? cidr.replace(/\/24$/, "/23") : cidr, network_name: name });
      const outcomes = await Promise.allSettled([
        n1.add(a, A, `a${round}`),
        n2.add(b, B, `b${round}`),
      ]);
      const won = outcomes.filter((o) => o.status === "fulfilled");
      const lost = outcomes.flatMap((o) => o.status === "rejected" ? [o.reason] : []);
      assertEquals(won.length, 1, `round ${round}: ${JSON.stringify(lost.map(String))}`);
      assert(
        lost[0] instanceof CniError && lost[0].code === CNI_ERROR.INVALID_CONFIG,
        String(lost[0]),
      );
      const winner = outcomes[0].status === "fulfilled" ? A : B;
      const recorded = (await owners()).filter((o) => o.spec!.network === `${name}/v4`);
      assertEquals(recorded.map((o) => o.spec!.namespace), [winner], `round ${round}`);
      // The loser stays refused, the winner keeps being served.
      const again = await refusal(
        (winner === A ? n2 : n1).add(
          winner === A ? b : a,
          winner === A ? B : A,
          `x${round}`,
        ),
        "the loser again",
      );
      assertEquals(again.code, CNI_ERROR.INVALID_CONFIG, again.message);
      await (winner === A ? n2 : n1).add(
        winner === A ? a : b,
        winner,
        `y${round}`,
      );
    }
  });
});

Deno.test("two namespaces' first ADDs of one range, with and without enable_overlapping_ranges, racing on two nodes: one served, the other refused", async () => {
  await withOwners(async ({ net, node }) => {
    const n1 = await node("n1");
    const n2 = await node("n2");
    for (let round = 0; round < 4; round++) {
      const cidr = freshCidr24();
      const name = `${net}-x${round}`;
      const a = nad("a", { range: cidr, network_name: name });
      const b = nad("b", { range: cidr, network_name: name, enable_overlapping_ranges: false });
      const outcomes = await Promise.allSettled([
        n1.add(a, A, `a${round}`),
        n2.add(b, B, `b${round}`),
      ]);
      const lost = outcomes.flatMap((o) => o.status === "rejected" ? [o.reason] : []);
      assertEquals(lost.length, 1, `round ${round}: both served`);
      assert(
        lost[0] instanceof CniError && lost[0].code === CNI_ERROR.INVALID_CONFIG,
        String(lost[0]),
      );
    }
  });
});

Deno.test("a range in use before owners were recorded belongs to the namespace its blocks' allocations name", async () => {
  await withOwners(async ({ k, net, cidr, node, owners }) => {
    const config = parseWhereabouts({ type: "whereabouts", range: cidr, network_name: net }, "w");
    // Allocations made without the check (an older Ferry), recorded in the space's blocks.
    await withTempDir(async (stateDir) => {
      const old = await NadNetworkIpam.open({
        nodeName: `old-${k.id}`,
        api: kubeNetworkBlockApi(k.client, {
          namespace: "default",
          name: `ferry-nad-claims-${k.id}`,
        }),
        stateDir,
        releaseAfterMs: 600_000,
        writeDelayMs: 0,
        logger: getLogger(["ferry", "ipam"]),
      });
      for (let i = 0; i < 3; i++) {
        await old.add(config, "n", { containerId: `old${i}`, ifname: "net1" }, {
          namespace: A,
          name: `a${i}`,
          uid: `u${i}`,
        });
      }
      await old.flush();
      await old.close();
    });
    const n1 = await node("n1");
    const e = await refusal(
      n1.add(nad("b", { range: cidr, network_name: net }), B, "b0"),
      "B after the upgrade",
    );
    assertEquals(e.code, CNI_ERROR.INVALID_CONFIG, e.message);
    assert(e.message.includes(`namespace ${A}`), e.message);
    await n1.add(nad("a", { range: cidr, network_name: net }), A, "a9");
    assertEquals((await owners()).map((o) => o.spec!.namespace), [A]);
  });
});

Deno.test("the ranges an ADD claims, the config's verdict and an upgraded range's owner (pure)", () => {
  const c = parseWhereabouts(
    { type: "whereabouts", range: "10.0.0.0/24", network_name: "blue" },
    "w",
  );
  assertEquals(
    claimedRanges(c, ["10.0.0.9/24", "10.9.0.1/24", "bad"]).map((r) =>
      `${r.space} ${r.cidr.network.value}/${r.cidr.prefix}`
    ),
    ["blue/v4 167772160/24", `blue/v4 ${(10n << 24n) + (9n << 16n) + 1n}/32`],
  );
  const apart = parseWhereabouts(
    {
      type: "whereabouts",
      range: "10.0.0.0/24",
      network_name: "blue",
      enable_overlapping_ranges: false,
    },
    "w",
  );
  assertEquals(claimedRanges(apart, []).map((r) => r.space), ["blue/range-10.0.0.0/24"]);
  assertEquals(ownersKey("blue", parseCidr("10.0.0.0/24")), "blue/v4");
  assertEquals(ownersKey("", parseCidr("fd00::/120")), "v6");
  for (
    const [space, key, yes] of [
      ["blue/v4", "blue/v4", true],
      ["blue/range-10.0.0.0/24", "blue/v4", true],
      ["range-10.0.0.0/24", "v4", true],
      ["blue/range-fd00::/120", "blue/v6", true],
      ["blue/range-fd00::/120", "blue/v4", false],
      ["range-10.0.0.0/24", "blue/v4", false],
      ["blue/range-10.0.0.0/24", "v4", false],
      ["bluer/range-10.0.0.0/24", "blue/v4", false],
      ["blue/range-10.0.0.1/24", "blue/v4", false],
      ["blue/v6", "blue/v4", false],
    ] as const
  ) assertEquals(spaceOfNetwork(space, key), yes, `${space} of ${key}`);
  const shared = [{ network: "blue", range: "10.0.0.0/16", namespaces: ["a", "b"] }];
  assertEquals(sharedVerdict(shared, "blue", parseCidr("10.0.1.0/24"), "a"), { covered: true });
  assertEquals(sharedVerdict(shared, "red", parseCidr("10.0.1.0/24"), "c"), { covered: false });
  assertEquals(sharedVerdict(shared, "blue", parseCidr("10.0.0.0/8"), "a"), { covered: false });
  assertEquals(sharedVerdict(shared, "blue", parseCidr("10.0.1.0/24"), "c").refused, shared[0]);
  assertEquals(
    upgradeOwner([
      { ip: "10.0.0.1", namespace: "b" },
      { ip: "10.0.0.2", namespace: "a" },
      { ip: "10.0.0.3", namespace: "a" },
      { ip: "10.1.0.3", namespace: "c" },
      { ip: "10.1.0.4", namespace: "c" },
      { ip: "10.1.0.5", namespace: "c" },
    ], parseCidr("10.0.0.0/24")),
    "a",
  );
  assertEquals(upgradeOwner([], parseCidr("10.0.0.0/24")), undefined);
});
