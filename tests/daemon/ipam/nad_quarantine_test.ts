import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { CNI_ERROR, CniError } from "../../../lib/cni/errors.ts";
import { installNetworkBlockCrd } from "../../../daemon/dev/crds.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";
import { kubeNetworkBlockApi } from "../../../daemon/ipam/network_block_api.ts";
import { LEASES, NETWORKBLOCKS } from "../../../daemon/k8s/resources.ts";
import type { NetworkBlockObject } from "../../../daemon/ipam/nad_blocks.ts";
import { type NadIpamConfig, parseWhereabouts } from "../../../daemon/ipam/nad_ipam.ts";
import { NadNetworkIpam } from "../../../daemon/ipam/nad_network_ipam.ts";
import type { IpamClock } from "../../../daemon/ipam/quarantine.ts";
import { freshCidr24 } from "./_pools.ts";
import { withKube } from "../k8s/_target.ts";
import { ManualClock } from "./_clock.ts";

/** Opens a node's NAD IPAM (`open(short, dir, reuseDelayMs, clock)`) on the API under test. */
type Open = (
  short: string,
  dir: string,
  reuseDelayMs: number,
  clock?: IpamClock,
) => Promise<NadNetworkIpam>;

/** Runs `fn` with a space of its own; its blocks and claim Lease are removed afterwards. */
function withSpace(fn: (open: Open, net: string) => Promise<void>): Promise<void> {
  return withKube(async (k) => {
    await installNetworkBlockCrd(k.client);
    const lease = { namespace: "default", name: `ferry-nad-claims-${k.id}` };
    const api = kubeNetworkBlockApi(k.client, lease);
    const opened: NadNetworkIpam[] = [];
    try {
      await fn(async (short, stateDir, reuseDelayMs, clock) => {
        const ipam = await NadNetworkIpam.open({
          nodeName: `${short}-${k.id}`,
          api,
          stateDir,
          releaseAfterMs: 600_000,
          reuseDelayMs,
          writeDelayMs: 0,
          clock,
          logger: getLogger(["ferry", "ipam"]),
        });
        opened.push(ipam);
        return ipam;
      }, `net-${k.id}`);
    } finally {
      for (const ipam of opened) await ipam.close();
      const { items } = await k.client.listAll<NetworkBlockObject>(NETWORKBLOCKS, {});
      for (const b of items.filter((b) => b.spec?.node.endsWith(`-${k.id}`))) {
        await k.client.delete(NETWORKBLOCKS, undefined, b.metadata!.name!).catch(() => {});
      }
      await k.client.delete(LEASES, lease.namespace, lease.name).catch(() => {});
    }
  });
}

const W = "pod default/p: NetworkAttachmentDefinition default/n";
const conf = (ipam: Record<string, unknown>): NadIpamConfig =>
  parseWhereabouts({ type: "whereabouts", ...ipam }, W);
const owner = (i: number | string) => ({ containerId: `c${i}`, ifname: "net1" });
const addr = (r: { ips: { address: string }[] }) => r.ips[0].address.split("/")[0];
/** Longer than any test: the quarantine's real-time give-back timers never fire meanwhile. */
const DELAY = 600_000;

Deno.test("a /28 NAD range's rolling update (delete one pod, create one, repeated) never answers 101: each ADD waits for the address just released", async () => {
  await withSpace(async (open, net) => {
    await withTempDir(async (dir) => {
      const clock = new ManualClock();
      const ipam = await open("n1", dir, DELAY, clock);
      const c = conf({ range: freshCidr24().replace(".0/24", ".0/28"), network_name: net });
      const held = new Map<number, string>();
      for (let i = 0; i < 14; i++) held.set(i, addr(await ipam.add(c, "default/n", owner(i))));
      for (let round = 0; round < 5; round++) {
        const [gone] = ipam.addressesOf(owner(round));
        assertEquals(await ipam.release(owner(round)), [gone]);
        const released = clock.now();
        const add = ipam.add(c, "default/n", owner(100 + round), undefined, [], {
          until: clock.now() + DELAY + 60_000,
        });
        await clock.untilSleeping(1, add, `round ${round}: the new pod's ADD`);
        assertEquals(clock.sleeping, [released + DELAY], `round ${round}: waits for ${gone}`);
        clock.advanceTo(released + DELAY);
        assertEquals(addr(await add), gone, `round ${round}: the address out of quarantine`);
      }
    });
  });
});

Deno.test("a NAD ADD whose deadline comes before its full range's quarantine ends gets 101 naming the quarantine", async () => {
  await withSpace(async (open, net) => {
    await withTempDir(async (dir) => {
      const clock = new ManualClock();
      const ipam = await open("n1", dir, DELAY, clock);
      const c = conf({ range: freshCidr24().replace(".0/24", ".0/30"), network_name: net });
      for (let i = 0; i < 2; i++) await ipam.add(c, "default/n", owner(i));
      await ipam.release(owner(0));
      const err = await assertRejects(
        () => ipam.add(c, "default/n", owner(9), undefined, [], { until: clock.now() + 1000 }),
        CniError,
      );
      assertEquals(err.code, CNI_ERROR.ADDRESSES_EXHAUSTED);
      assert(err.message.includes("network default/n"), err.message);
      assert(err.message.includes("reuse quarantine"), err.message);
      assert(err.message.includes("deadline"), err.message);
    });
  });
});

Deno.test("a pod's static NAD address released on its node moments ago is waited for until its quarantine ends, then reserved", async () => {
  await withSpace(async (open, net) => {
    await withTempDir(async (dir) => {
      const clock = new ManualClock();
      const ipam = await open("n1", dir, DELAY, clock);
      const cidr = freshCidr24().replace(".0/24", ".0/28");
      const c = conf({ range: cidr, network_name: net });
      const fixed = `${cidr.split(".").slice(0, 3).join(".")}.5`;
      await ipam.add(c, "default/n", owner("old"), undefined, [`${fixed}/28`]);
      await ipam.release(owner("old"));
      const released = clock.now();
      // Past the deadline: code 11, the next ADD gets it.
      const early = await assertRejects(
        () =>
          ipam.add(c, "default/n", owner("new"), undefined, [`${fixed}/28`], {
            until: released + 1000,
          }),
        CniError,
      );
      assertEquals(early.code, CNI_ERROR.TRY_AGAIN_LATER);
      assert(early.message.includes(`static address ${fixed}`), early.message);
      assert(early.message.includes("reuse quarantine"), early.message);
      const add = ipam.add(c, "default/n", owner("new"), undefined, [`${fixed}/28`], {
        until: released + DELAY + 60_000,
      });
      await clock.untilSleeping(1, add, "the ADD of a static address in quarantine");
      assertEquals(clock.sleeping, [released + DELAY]);
      clock.advanceTo(released + DELAY);
      assertEquals(addr(await add), fixed);
    });
  });
});

Deno.test("an ADD on a node whose NAD range is full waits for another node to give back its quarantined address, and gets it", async () => {
  await withSpace(async (open, net) => {
    await withTempDir(async (a) =>
      await withTempDir(async (b) => {
        // Real time, a quarantine of 1 s: node 1 gives its emptied single-address block back when
        // it ends; node 2's ADD, finding the range full, waits for that.
        const [n1, n2] = [await open("n1", a, 1000), await open("n2", b, 1000)];
        const c = conf({ range: freshCidr24().replace(".0/24", ".0/30"), network_name: net });
        const first = addr(await n1.add(c, "default/n", owner(1)));
        await n2.add(c, "default/n", owner(2));
        await n1.release(owner(1));
        const got = await n2.add(c, "default/n", owner(3), undefined, [], {
          until: Date.now() + 30_000,
        });
        assertEquals(addr(got), first);
      })
    );
  });
});
