// One daemon per node name: the node's Lease is held by the identity kept in its state directory.
// Against the API under test: the stand-in, or the real kube-apiserver in `deno task test:real`.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import {
  NodeIdentity,
  nodeLeaseName,
  readIdentity,
} from "../../../daemon/cluster/node_identity.ts";
import { kubeLeaseApi } from "../../../daemon/k8s/lease_api.ts";
import { LEASES } from "../../../daemon/k8s/resources.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";
import { withKube } from "../k8s/_target.ts";

Deno.test("the node identity is made once and kept in the state directory", () =>
  withTempDir(async (dir) => {
    const first = await readIdentity(`${dir}/state`);
    assertEquals(await readIdentity(`${dir}/state`), first);
    assert(first !== await readIdentity(`${dir}/other`), "another state, another identity");
  }));

Deno.test("a second daemon with the same node name holds nothing while the first renews; it takes over only after the Lease expired", () =>
  withKube((k) =>
    withTempDir(async (dir) => {
      const node = `idn-${k.id}`;
      const lease = kubeLeaseApi(k.client, "default", nodeLeaseName(node));
      const changes: string[] = [];
      const start = (state: string, durationMs: number) =>
        NodeIdentity.start({
          nodeName: node,
          stateDir: `${dir}/${state}`,
          lease,
          leaseName: `default/${nodeLeaseName(node)}`,
          durationMs,
          onChange: (id) => changes.push(`${state}:${id.held}`),
          logger: getLogger(["ferry", "test"]),
        });
      try {
        const first = await start("a", 3000);
        assertEquals(first.held, true);
        // The same node's daemon restarted on the same state holds it again at once.
        first.stop();
        const again = await start("a", 3000);
        assertEquals([again.held, again.id], [true, first.id]);
        // Another state directory (another machine) with the same node name is refused.
        const second = await start("b", 3000);
        assertEquals(second.held, false);
        assert(
          second.reason!.includes(`another Ferry daemon (${first.id}) holds node ${node}`),
          second.reason,
        );
        // While the first renews, the second stays out.
        await new Promise((r) => setTimeout(r, 2500));
        assertEquals(second.held, false);
        // Once the first is gone and its Lease expired, the second takes the node over.
        again.stop();
        const deadline = Date.now() + 10_000;
        while (!second.held && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
        assertEquals(second.held, true);
        assertEquals(second.reason, undefined);
        assertEquals(changes.includes("b:true"), true, String(changes));
        // A graceful stop gives the Lease up: the next daemon holds it at once, whatever its state.
        await second.release();
        const third = await start("c", 3000);
        assertEquals(third.held, true, third.reason);
        third.stop();
      } finally {
        await k.client.delete(LEASES, "default", nodeLeaseName(node)).catch(() => {});
      }
    })
  ));

Deno.test("a holder that cannot reach the API keeps its identity until the Lease would have expired, then allocates nothing", () =>
  withTempDir(async (dir) => {
    let now = 1_000_000;
    let reachable = true;
    let stored: Record<string, unknown> | undefined;
    const api = {
      get: () => reachable ? Promise.resolve(stored as never) : Promise.reject(new Error("down")),
      create: (l: Record<string, unknown>) => {
        if (!reachable) return Promise.reject(new Error("down"));
        stored = { ...l, metadata: { resourceVersion: "1" } };
        return Promise.resolve(stored as never);
      },
      update: (l: Record<string, unknown>) => {
        if (!reachable) return Promise.reject(new Error("down"));
        stored = l;
        return Promise.resolve(stored as never);
      },
    };
    let held: boolean[] = [];
    const id = await NodeIdentity.start({
      nodeName: "n1",
      stateDir: dir,
      lease: api,
      leaseName: "kube-system/ferry-node-n1",
      durationMs: 60_000,
      onChange: (i) => held.push(i.held),
      logger: getLogger(["ferry", "test"]),
      now: () => now,
    });
    try {
      assertEquals(id.held, true);
      reachable = false;
      held = [];
      // Renewals fail: still held 59 s after the last success, not at 61 s.
      now += 59_000;
      await id.renewNow();
      assertEquals(id.held, true);
      now += 2_000;
      await id.renewNow();
      assertEquals(id.held, false);
      assert(id.reason!.includes("could not be renewed for 60 s"), id.reason);
      reachable = true;
      await id.renewNow();
      assertEquals(id.held, true);
      assertEquals(held, [false, true]);
    } finally {
      id.stop();
    }
  }));
