/**
 * Ferry's native serving of whereabouts configs against the real whereabouts v0.9.0 plugin
 * (driven through libcni on the real kube-apiserver, see `daemon/dev/real_whereabouts.ts`): the
 * same configs hand out the same addresses, and every config whereabouts refuses Ferry refuses
 * with code 7 naming the key. Where they differ on purpose the table below says so and
 * `docs/multiple-networks.md` says why. Runs in `deno task test:real` where the plugin is built;
 * elsewhere it is skipped and says why.
 *
 * @module
 */
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { CNI_ERROR, CniError } from "../../../lib/cni/errors.ts";
import { installNetworkBlockCrd } from "../../../daemon/dev/crds.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";
import {
  RealWhereabouts,
  type WhereaboutsAdd,
  whereaboutsMissing,
} from "../../../daemon/dev/real_whereabouts.ts";
import { kubeNetworkBlockApi } from "../../../daemon/ipam/network_block_api.ts";
import { LEASES, NETWORKBLOCKS } from "../../../daemon/k8s/resources.ts";
import type { NetworkBlockObject } from "../../../daemon/ipam/nad_blocks.ts";
import { parseWhereabouts } from "../../../daemon/ipam/nad_ipam.ts";
import { NadNetworkIpam } from "../../../daemon/ipam/nad_network_ipam.ts";
import { freshCidr24 } from "./_pools.ts";
import { type KubeTarget, REAL_KUBECONFIG, withKube } from "../k8s/_target.ts";

const MISSING = await whereaboutsMissing(REAL_KUBECONFIG);
if (MISSING) console.log(`whereabouts_compat_test: skipped: ${MISSING}`);

/** A unique IPv6 /64 prefix (`fdXX:XXXX:XXXX::`) for one test run. */
function freshV6(): string {
  const r = crypto.getRandomValues(new Uint16Array(2));
  return `fd5a:${r[0].toString(16)}:${r[1].toString(16)}::`;
}

/** One good config: what both must hand out (`allowed`), pods until the range is full. */
interface GoodCase {
  name: string;
  ipam: Record<string, unknown>;
  /** Every address a pod may get (each pod one from each range, in `allowed` order of ranges). */
  allowed: string[];
  /** Addresses the real whereabouts hands out beyond `allowed` (a documented difference). */
  whereaboutsAlso?: string[];
}

function goodCases(p: string, v6: string): GoodCase[] {
  const span = (from: number, to: number, skip: number[] = []) =>
    Array.from({ length: to - from + 1 }, (_, i) => from + i).filter((n) => !skip.includes(n))
      .map((n) => `${p}.${n}`);
  const span6 = (from: number, to: number) =>
    Array.from({ length: to - from + 1 }, (_, i) => `${v6}${(from + i).toString(16)}`);
  return [
    { name: "range as a CIDR", ipam: { range: `${p}.8/29` }, allowed: span(9, 14) },
    {
      name: "range as start-endCIDR",
      ipam: { range: `${p}.19-${p}.22/28` },
      allowed: span(19, 22),
    },
    {
      name: "range as start-endCIDR from the network to the all-ones address",
      ipam: { range: `${p}.112-${p}.119/29` },
      allowed: span(113, 118),
    },
    { name: "range with host bits", ipam: { range: `${p}.139/29` }, allowed: span(137, 142) },
    {
      name: "range_start and range_end",
      ipam: { range: `${p}.32/28`, range_start: `${p}.36`, range_end: `${p}.40` },
      allowed: span(36, 40),
    },
    {
      name: "exclude: CIDRs and a single address",
      ipam: { range: `${p}.48/28`, exclude: [`${p}.48/30`, `${p}.55`, `${p}.60/31`] },
      allowed: span(52, 62, [55, 60, 61]),
    },
    {
      // whereabouts v0.9.0 hands the gateway out like any address; Ferry never does.
      name: "gateway inside the range",
      ipam: { range: `${p}.64/29`, gateway: `${p}.65` },
      allowed: span(66, 70),
      whereaboutsAlso: [`${p}.65`],
    },
    {
      name: "gateway outside the range",
      ipam: { range: `${p}.72/29`, gateway: `${p}.1` },
      allowed: span(73, 78),
    },
    { name: "IPv6 range", ipam: { range: `${v6}/125` }, allowed: span6(1, 6) },
    {
      name: "IPv6 start-end with exclude",
      ipam: { range: `${v6}12-${v6}1e/124`, exclude: [`${v6}14/126`] },
      allowed: [...span6(0x12, 0x13), ...span6(0x18, 0x1e)],
    },
    {
      name: "ipRanges: dual stack",
      ipam: { ipRanges: [{ range: `${p}.80/29` }, { range: `${v6}20/125` }] },
      allowed: [...span(81, 86), ...span6(0x21, 0x26)],
    },
    {
      name: "range plus ipRanges: two IPv4 ranges, each with its own exclude",
      ipam: {
        range: `${p}.96/29`,
        exclude: [`${p}.97`],
        ipRanges: [{ range: `${p}.104/29`, range_start: `${p}.105`, exclude: [`${p}.108`] }],
      },
      allowed: [...span(98, 102), ...span(105, 110, [108])],
    },
  ];
}

/** One config whereabouts refuses (or, `whereaboutsAccepts`, takes where Ferry refuses). */
interface BadCase {
  name: string;
  ipam: Record<string, unknown>;
  /** The key Ferry's error names (`ipam.<key>`). */
  key: string;
  /**
   * The real plugin serves it: the words of docs/multiple-networks.md's row that says why Ferry
   * does not.
   */
  whereaboutsAccepts?: string;
}

function badCases(p: string, v6: string): BadCase[] {
  const r = `${p}.128/29`;
  return [
    { name: "range not an address", ipam: { range: "banana" }, key: "range" },
    { name: "range without a prefix length", ipam: { range: `${p}.128` }, key: "range" },
    { name: "range with prefix /33", ipam: { range: `${p}.128/33` }, key: "range" },
    { name: "start-end with a bad start", ipam: { range: `${p}.300-${p}.130/29` }, key: "range" },
    { name: "start-end with a bad CIDR", ipam: { range: `${p}.129-garbage` }, key: "range" },
    {
      name: "start-end whose start is outside its CIDR",
      ipam: { range: `10.0.0.1-${p}.130/29` },
      key: "range",
    },
    {
      name: "an ipRanges entry not a CIDR",
      ipam: { ipRanges: [{ range: r }, { range: "nope" }] },
      key: "ipRanges[1].range",
    },
    { name: "ipRanges not a list", ipam: { ipRanges: { range: r } }, key: "ipRanges" },
    { name: "gateway not an address", ipam: { range: r, gateway: "nope" }, key: "gateway" },
    {
      name: "range_start not an address",
      ipam: { range: r, range_start: "x" },
      key: "range_start",
      whereaboutsAccepts: "a `range_start` or `range_end` that is not an address",
    },
    {
      name: "no range at all",
      ipam: {},
      key: "range",
      whereaboutsAccepts: "a config without `range`, `ipRanges` or `addresses`",
    },
    {
      name: "range_end without range",
      ipam: { range_end: `${p}.130` },
      key: "range_end",
      whereaboutsAccepts: "`range_start`/`range_end` without `range`",
    },
    {
      name: "range_start at the network address",
      ipam: { range: r, range_start: `${p}.128` },
      key: "range_start",
      whereaboutsAccepts: "a `range_start` or `range_end` at the network or all-ones address",
    },
    { name: "range_end a number", ipam: { range: r, range_end: 7 }, key: "range_end" },
    { name: "exclude entry not a CIDR", ipam: { range: r, exclude: ["nope"] }, key: "exclude[0]" },
    { name: "exclude not a list", ipam: { range: r, exclude: `${p}.129` }, key: "exclude" },
    { name: "a /32 range", ipam: { range: `${p}.128/32` }, key: "range" },
    { name: "a /31 range", ipam: { range: `${p}.128/31` }, key: "range" },
    {
      name: "enable_overlapping_ranges not a boolean",
      ipam: { range: r, enable_overlapping_ranges: "yes" },
      key: "enable_overlapping_ranges",
    },
    { name: "network_name not a string", ipam: { range: r, network_name: 5 }, key: "network_name" },
    {
      name: "addresses entry not a CIDR",
      ipam: { range: r, addresses: [{ address: "nope" }] },
      key: "addresses[0].address",
    },
    // Taken by whereabouts, refused by Ferry (docs/multiple-networks.md says why).
    {
      name: "range_start outside the range",
      ipam: { range: r, range_start: `${p}.200` },
      key: "range_start",
      whereaboutsAccepts: "a `range_start` or `range_end` outside the range",
    },
    {
      name: "range_end before range_start",
      ipam: { range: r, range_start: `${p}.133`, range_end: `${p}.130` },
      key: "range_end",
      whereaboutsAccepts: "a `range_end` before `range_start`",
    },
    {
      name: "exclude of the other family",
      ipam: { range: r, exclude: [`${v6}/120`] },
      key: "exclude[0]",
      whereaboutsAccepts: "an `exclude` entry of the other family",
    },
    {
      name: "gateway of no range's family",
      ipam: { range: r, gateway: `${v6}1` },
      key: "gateway",
      whereaboutsAccepts: "a `gateway` of no range's family",
    },
  ];
}

/** Ferry's NAD IPAM of two nodes on the API under test (blocks, claims removed afterwards). */
async function withFerryNodes<T>(
  k: KubeTarget,
  fn: (nodes: NadNetworkIpam[]) => Promise<T>,
): Promise<T> {
  await installNetworkBlockCrd(k.client);
  const lease = { namespace: "default", name: `ferry-nad-claims-${k.id}` };
  const api = kubeNetworkBlockApi(k.client, lease);
  const ours = async () =>
    (await k.client.listAll<NetworkBlockObject>(NETWORKBLOCKS, {})).items.filter((b) =>
      b.spec?.node.endsWith(`-${k.id}`)
    );
  return await withTempDir((a) =>
    withTempDir(async (b) => {
      const nodes: NadNetworkIpam[] = [];
      try {
        for (const [i, dir] of [a, b].entries()) {
          nodes.push(
            await NadNetworkIpam.open({
              nodeName: `wc${i}-${k.id}`,
              api,
              stateDir: dir,
              releaseAfterMs: 600_000,
              logger: getLogger(["ferry", "ipam"]),
            }),
          );
        }
        return await fn(nodes);
      } finally {
        for (const n of nodes) await n.close();
        for (const blk of await ours()) {
          await k.client.delete(NETWORKBLOCKS, undefined, blk.metadata!.name!).catch(() => {});
        }
        await k.client.delete(LEASES, lease.namespace, lease.name).catch(() => {});
      }
    })
  );
}

/** Adds pods until one is refused (at most `limit`); the addresses of those that got theirs. */
async function exhaust(
  add: (pod: string) => Promise<WhereaboutsAdd>,
  limit: number,
): Promise<{ ips: string[]; pods: string[]; refusal: string }> {
  const ips: string[] = [];
  const pods: string[] = [];
  for (let i = 0; i < limit; i++) {
    const r = await add(`p${i}`);
    if (!r.ok) return { ips, pods, refusal: r.error };
    ips.push(...r.ips);
    pods.push(`p${i}`);
  }
  return { ips, pods, refusal: "" };
}

const sorted = (xs: string[]) => [...xs].sort();

Deno.test({
  name: "whereabouts v0.9.0 and Ferry hand out the same addresses for the same configs: " +
    "CIDR and start-end ranges, range_start/end, exclude, gateway, IPv6, ipRanges",
  ignore: MISSING !== undefined,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withKube(async (k) => {
      const p = freshCidr24().replace(".0/24", "");
      const v6 = freshV6();
      const wab = await RealWhereabouts.open(k.client, k.transport, k.kubeconfig, `wabc-${k.id}`);
      const docs = await Deno.readTextFile(
        new URL("../../../docs/multiple-networks.md", import.meta.url),
      );
      try {
        for (const [n, c] of goodCases(p, v6).entries()) {
          // Each case is a space of its own on both sides (whereabouts keys its pools by range).
          const ipam = { ...c.ipam, network_name: `wc${n}-${k.id}` };
          const limit = c.allowed.length + 3;
          const real = await exhaust((pod) => wab.add(ipam, pod), limit);
          const ferry = await withFerryNodes(k, async (nodes) => {
            const config = parseWhereabouts({ type: "whereabouts", ...ipam }, `case ${c.name}`);
            let i = 0;
            return await exhaust(async (pod) => {
              try {
                const r = await nodes[i++ % 2].add(config, "default/wabc", {
                  containerId: pod,
                  ifname: "net1",
                });
                return { ok: true, ips: r.ips.map((x) => x.address.split("/")[0]) };
              } catch (e) {
                if (!(e instanceof CniError)) throw e;
                assertEquals(e.code, CNI_ERROR.ADDRESSES_EXHAUSTED, `${c.name}: ${e.message}`);
                return { ok: false, error: e.message };
              }
            }, limit);
          });
          const expectReal = sorted([...c.allowed, ...(c.whereaboutsAlso ?? [])]);
          if (c.whereaboutsAlso) {
            assert(
              docs.includes("| a `gateway` inside the range | hands the gateway out"),
              `${c.name}: docs/multiple-networks.md does not list the difference`,
            );
          }
          assertEquals(
            sorted(real.ips),
            expectReal,
            `${c.name}: whereabouts handed out ${real.ips.join(" ")} (refused: ${real.refusal})`,
          );
          assertEquals(
            sorted(ferry.ips),
            sorted(c.allowed),
            `${c.name}: Ferry handed out ${ferry.ips.join(" ")} (refused: ${ferry.refusal})`,
          );
          assert(real.refusal !== "", `${c.name}: whereabouts never said the range was full`);
          assert(ferry.refusal !== "", `${c.name}: Ferry never said the range was full`);
          for (const pod of real.pods) await wab.del(ipam, pod);
        }
      } finally {
        await wab.close();
      }
    });
  },
});

Deno.test({
  name: "every config whereabouts v0.9.0 refuses Ferry refuses with code 7 naming the key; " +
    "the ones only Ferry refuses are the documented ones",
  ignore: MISSING !== undefined,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withKube(async (k) => {
      const p = freshCidr24().replace(".0/24", "");
      const v6 = freshV6();
      const wab = await RealWhereabouts.open(k.client, k.transport, k.kubeconfig, `wabc-${k.id}`);
      const docs = await Deno.readTextFile(
        new URL("../../../docs/multiple-networks.md", import.meta.url),
      );
      const wrong: string[] = [];
      const check = (ok: boolean, what: string) => ok || wrong.push(what);
      try {
        for (const [n, c] of badCases(p, v6).entries()) {
          const ipam = { ...c.ipam, network_name: c.ipam.network_name ?? `wb${n}-${k.id}` };
          const real = await wab.add(ipam, `b${n}`);
          if (real.ok) await wab.del(ipam, `b${n}`);
          if (c.whereaboutsAccepts) {
            check(
              real.ok,
              `${c.name}: whereabouts was expected to take it: ${!real.ok && real.error}`,
            );
            check(
              docs.includes(c.whereaboutsAccepts),
              `${c.name}: docs/multiple-networks.md does not say "${c.whereaboutsAccepts}"`,
            );
          } else {
            check(!real.ok, `${c.name}: whereabouts took it (${real.ok && real.ips.join(" ")})`);
          }
          let err: unknown;
          try {
            parseWhereabouts({ type: "whereabouts", ...ipam }, "pod default/p: NAD default/n");
          } catch (e) {
            err = e;
          }
          if (!(err instanceof CniError)) {
            check(false, `${c.name}: Ferry took it (${err})`);
            continue;
          }
          check(
            err.code === CNI_ERROR.INVALID_CONFIG,
            `${c.name}: code ${err.code}: ${err.message}`,
          );
          check(
            err.message.includes(`ipam.${c.key}:`),
            `${c.name}: Ferry's error does not name ipam.${c.key}: ${err.message}` +
              (real.ok ? "" : ` (whereabouts: ${real.error})`),
          );
        }
        assertEquals(wrong, [], `\n${wrong.join("\n")}`);
      } finally {
        await wab.close();
      }
    });
  },
});
