// The cluster controller with a fake kernel: a route (or a VXLAN peer's entries) the kernel
// refuses is reported with why, on its own, while every other route and the masquerade table are
// set; it is tried again with backoff, and at once on a Node change.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import type { Node } from "kubernetes-types/core/v1.d.ts";
import { ClusterController } from "../../../daemon/cluster/controller.ts";
import { NodeMap } from "../../../daemon/cluster/nodes.ts";
import type { RouteFailure, RouteTable } from "../../../daemon/cluster/route_table.ts";
import type { NodeRoute } from "../../../daemon/cluster/routes.ts";
import type { Nft } from "../../../daemon/cluster/masquerade.ts";
import { type EntryFailure, VxlanDevice, type VxlanPeer } from "../../../daemon/cluster/vxlan.ts";
import { ROUTE_FAILED_REASON, UnroutableReport } from "../../../daemon/cluster/unroutable.ts";
import { resolveConfig } from "../../../daemon/config/config.ts";
import type { DefaultNetwork } from "../../../daemon/service/default_network.ts";

const node = (name: string, address: string, podCIDR: string, vtepIp?: string): Node => ({
  metadata: {
    name,
    annotations: vtepIp
      ? { "ferry.dev/vtep": JSON.stringify({ mac: "0e:fe:00:00:00:0" + name.at(-1), ip: vtepIp }) }
      : undefined,
  },
  spec: { podCIDR, podCIDRs: [podCIDR] },
  status: { addresses: [{ type: "InternalIP", address }] },
});

/** Ferry's routes in a fake kernel that refuses next hops not on its segment (192.0.2.0/24). */
class SegmentRoutes implements RouteTable {
  readonly routes = new Map<string, NodeRoute>();
  attempts = 0;
  onLink = (via: string) => via.startsWith("192.0.2.");
  list(): Promise<NodeRoute[]> {
    return Promise.resolve([...this.routes.values()]);
  }
  apply(replace: NodeRoute[], remove: NodeRoute[]): Promise<RouteFailure[]> {
    this.attempts++;
    const failures: RouteFailure[] = [];
    for (const r of replace) {
      if (r.dev || this.onLink(r.via)) this.routes.set(r.dst, r);
      else {
        failures.push({
          route: r,
          op: "replace",
          reason: `route ${r.dst} via ${r.via}: ENETUNREACH`,
        });
      }
    }
    for (const r of remove) this.routes.delete(r.dst);
    return Promise.resolve(failures);
  }
}

class RecordingNft implements Nft {
  rulesets: string[] = [];
  /** The table was deleted by hand: listed as absent until the next apply. */
  deleted = false;
  lists = 0;
  apply(ruleset: string): Promise<void> {
    this.rulesets.push(ruleset);
    this.deleted = false;
    return Promise.resolve();
  }
  listJson(): Promise<string | undefined> {
    this.lists++;
    return Promise.resolve(this.deleted ? undefined : '{"nftables": []}');
  }
  remove(): Promise<void> {
    return Promise.resolve();
  }
  list(): Promise<undefined> {
    return Promise.resolve(undefined);
  }
}

const network = {
  current: { mtu: 1500 },
  subnets: () => ["10.244.1.0/24"],
  holdBack() {},
  waitFor() {},
} as unknown as DefaultNetwork;

async function until(probe: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

function setup(
  mode: "host-gw" | "vxlan",
  retry: { initialMs: number; maxMs: number },
  vxlan?: VxlanDevice,
  nodesSynced: () => boolean = () => true,
  resyncMs?: number,
) {
  const nodes = new NodeMap();
  const vtep = (ip: string) => mode === "vxlan" ? ip : undefined;
  nodes.upsert(node("n1", "192.0.2.11", "10.244.1.0/24", vtep("192.0.2.11")));
  nodes.upsert(node("n2", "192.0.2.12", "10.244.2.0/24", vtep("192.0.2.12")));
  nodes.upsert(node("n3", "192.0.2.13", "10.244.3.0/24", vtep("192.0.2.13")));
  const routes = new SegmentRoutes();
  const nft = new RecordingNft();
  const events: string[] = [];
  const config = resolveConfig({
    nodeName: "n1",
    ipam: { mode: "kubernetes" },
    routing: { mode },
    masquerade: { enabled: true },
  });
  const controller = new ClusterController({
    config,
    network,
    nodes,
    nodesSynced,
    routes,
    nft,
    vxlan,
    publishVtep: () => Promise.resolve(),
    nodeEvent: (node, type, reason, message) => events.push(`${node} ${type} ${reason} ${message}`),
    retry,
    resyncMs,
    logger: getLogger(["ferry", "cluster"]),
  });
  return { nodes, routes, nft, events, controller };
}

Deno.test("host-gw: a route the kernel refuses is reported with why, every other route and masquerade are set, and it is retried with backoff until it goes in", async () => {
  const { nodes, routes, nft, events, controller } = setup("host-gw", {
    initialMs: 5,
    maxMs: 20,
  });
  // A fourth node whose address is not on this node's segment (another zone, a typo).
  nodes.upsert(node("n4", "198.18.9.11", "10.244.4.0/24"));
  controller.start();
  try {
    await controller.idle();
    const stats = controller.stats();
    assertEquals([...routes.routes.keys()].sort(), ["10.244.2.0/24", "10.244.3.0/24"]);
    assertEquals(stats.routes, 2);
    assertEquals(stats.masquerading, true, "masquerade is set whatever the routes");
    assertEquals(nft.rulesets.length, 1);
    assertEquals(stats.lastError, undefined);
    assertEquals(stats.unroutable, [{
      node: "n4",
      dst: "10.244.4.0/24",
      via: "198.18.9.11",
      reason: "route 10.244.4.0/24 via 198.18.9.11: ENETUNREACH",
      refused: true,
    }]);
    assert(stats.degraded?.includes("n4 10.244.4.0/24"), stats.degraded);
    assertEquals(stats.retryDelayMs, 5, "the first retry is pending");
    // Tried again without any change, with growing delays.
    await until(() => routes.attempts >= 4, "the refused route was tried 3 more times");
    assertEquals(events.length, 1, `one Event for one reason, not one per retry: ${events}`);
    assert(events[0].startsWith(`n4 Warning ${ROUTE_FAILED_REASON} pod range 10.244.4.0/24`));
    // The kernel now accepts it (the underlay was fixed): the next retry sets it.
    routes.onLink = () => true;
    await until(() => routes.routes.has("10.244.4.0/24"), "the retry set the route");
    await controller.idle();
    assertEquals(controller.stats().unroutable, []);
    assertEquals(controller.stats().degraded, undefined);
    assertEquals(controller.stats().routes, 3);
  } finally {
    controller.stop();
  }
});

Deno.test("host-gw: a route deleted by hand while no node changes is put back by the periodic sync", async () => {
  const { routes, nft, controller } = setup(
    "host-gw",
    { initialMs: 60_000, maxMs: 60_000 },
    undefined,
    undefined,
    20,
  );
  controller.start();
  try {
    await controller.idle();
    assertEquals(controller.stats().routes, 2);
    // Found on the real cluster: without a periodic sync it stayed gone until a Node changed.
    routes.routes.delete("10.244.2.0/24");
    await until(() => routes.routes.has("10.244.2.0/24"), "the periodic sync put the route back");
    assertEquals(routes.routes.get("10.244.2.0/24"), { dst: "10.244.2.0/24", via: "192.0.2.12" });
    await controller.idle();
    assertEquals(controller.stats().routes, 2);
    assertEquals(nft.rulesets.length, 1, "an unchanged masquerade table is not written again");
  } finally {
    controller.stop();
  }
});

Deno.test("host-gw: a node re-addressed onto the segment gets its route at once on the Node change", async () => {
  const { nodes, routes, controller } = setup("host-gw", { initialMs: 60_000, maxMs: 60_000 });
  nodes.upsert(node("n4", "198.18.9.11", "10.244.4.0/24"));
  controller.start();
  try {
    await controller.idle();
    assertEquals(controller.stats().unroutable.map((u) => u.dst), ["10.244.4.0/24"]);
    nodes.upsert(node("n4", "192.0.2.14", "10.244.4.0/24"));
    await controller.idle();
    assertEquals(routes.routes.get("10.244.4.0/24"), { dst: "10.244.4.0/24", via: "192.0.2.14" });
    assertEquals(controller.stats().unroutable, []);
  } finally {
    controller.stop();
  }
});

Deno.test("vxlan: a peer whose entries the kernel refuses is reported; the other peers' entries, the routes and masquerade are set", async () => {
  const set = new Map<string, VxlanPeer>();
  let tries = 0;
  const entries = {
    neighbours: () => Promise.resolve(new Map([...set].map(([g, p]) => [g, p.mac]))),
    apply(_device: string, peers: VxlanPeer[]): Promise<EntryFailure[]> {
      tries++;
      set.clear();
      const failures: EntryFailure[] = [];
      for (const p of peers) {
        if (p.ip.includes(":")) {
          failures.push({ peer: p, reason: `fdb ${p.mac} → ${p.ip}: EAFNOSUPPORT` });
        } else set.set(p.gateway, p);
      }
      return Promise.resolve(failures);
    },
  };
  const device = new VxlanDevice(
    { batch: () => Promise.resolve("") },
    { device: "ferry.vxlan", vni: 1, port: 8472 },
    entries,
  );
  const { nodes, routes, nft, events, controller } = setup(
    "vxlan",
    { initialMs: 5, maxMs: 20 },
    device,
  );
  // A node whose published endpoint the IPv4 overlay cannot carry (re-addressed to IPv6).
  nodes.upsert(node("n4", "2001:db8::14", "10.244.4.0/24", "2001:db8::14"));
  controller.start();
  try {
    await controller.idle();
    assertEquals([...set.keys()].sort(), ["10.244.2.0", "10.244.3.0"]);
    assertEquals(routes.routes.size, 3);
    assertEquals(nft.rulesets.length, 1, "masquerade set");
    const stats = controller.stats();
    assertEquals(stats.lastError, undefined);
    assertEquals(stats.unroutable, [{
      node: "n4",
      dst: "10.244.4.0/24",
      via: "2001:db8::14",
      reason: "fdb 0e:fe:00:00:00:04 → 2001:db8::14: EAFNOSUPPORT",
      refused: true,
    }]);
    await until(() => tries >= 3, "the refused entries were tried again");
    assertEquals(events.length, 1, String(events));
    nodes.upsert(node("n4", "192.0.2.14", "10.244.4.0/24", "192.0.2.14"));
    await until(() => set.has("10.244.4.0"), "the re-addressed peer's entries are set");
    await controller.idle();
    assertEquals(controller.stats().unroutable, []);
  } finally {
    controller.stop();
  }
});

Deno.test("unroutable ranges: each reason said once, one Event per node and reason within the rate limit, routed-again ranges said once", () => {
  const report = new UnroutableReport(2);
  const u = (node: string, dst: string, reason = "ENETUNREACH") => ({
    node,
    dst,
    reason,
    refused: true,
  });
  let news = report.update(
    [u("a", "10.0.1.0/24"), u("a", "10.0.2.0/24"), u("b", "10.0.3.0/24")],
    0,
  );
  assertEquals(news.fresh.length, 3);
  assertEquals(
    news.events.map((e) => e.node),
    ["a", "b"],
    "node a's second range, same reason: no second Event",
  );
  news = report.update([u("a", "10.0.1.0/24"), u("a", "10.0.2.0/24"), u("b", "10.0.3.0/24")], 1);
  assertEquals([news.fresh, news.events], [[], []], "nothing new: nothing said");
  news = report.update([u("a", "10.0.1.0/24", "EINVAL"), u("b", "10.0.3.0/24")], 2);
  assertEquals(news.fresh.map((f) => f.reason), ["EINVAL"]);
  assertEquals(news.resolved, ["a 10.0.2.0/24"]);
  assertEquals(news.events, [], "two Events this minute already");
  news = report.update([u("a", "10.0.1.0/24", "EINVAL"), u("b", "10.0.3.0/24")], 61_000);
  assertEquals(news.events.map((e) => e.node), ["a"], "a new reason, in a new minute");
  news = report.update([{ node: "c", dst: "fd00:3::/64", reason: "IPv4 only" }], 62_000);
  assertEquals([news.fresh.length, news.events], [1, []], "planning's: logged, no Event");
});

Deno.test("a range planning cannot route (no address of its family) is listed, but neither degrades readiness, nor is said on the Node, nor retried", async () => {
  const { nodes, events, controller } = setup("host-gw", { initialMs: 60_000, maxMs: 60_000 });
  nodes.upsert(node("n5", "192.0.2.15", "fd00:5::/64"));
  controller.start();
  await controller.idle();
  assertEquals(controller.stats().unroutable, [
    { node: "n5", dst: "fd00:5::/64", reason: "the node has no IPv6 InternalIP" },
  ]);
  assertEquals(controller.stats().degraded, undefined);
  assertEquals(events, []);
  assertEquals(controller.stats().retryDelayMs, undefined, "no retry pending");
  controller.stop();
});

Deno.test("routes and masquerade follow once the node watch has listed, even when its first list changes nothing (a restarted daemon)", async () => {
  let listed = false;
  const { routes, nft, controller } = setup(
    "host-gw",
    { initialMs: 5, maxMs: 20 },
    undefined,
    () => listed,
  );
  controller.start();
  try {
    await controller.idle();
    assertEquals(controller.stats().routes, 0, "nothing routed before the first list");
    assertEquals(nft.rulesets.length, 0, "no masquerade before the first list");
    // The first list arrives with the nodes the map already had: no change, no kick from it.
    listed = true;
    await until(() => controller.stats().masquerading, "masquerade set without another change");
    await controller.idle();
    assertEquals([...routes.routes.keys()].sort(), ["10.244.2.0/24", "10.244.3.0/24"]);
  } finally {
    controller.stop();
  }
});

Deno.test("the masquerade table deleted behind the daemon's back is written again at the next periodic re-check; an intact one is only looked at", async () => {
  const { nft, controller } = setup(
    "host-gw",
    { initialMs: 5, maxMs: 20 },
    undefined,
    () => true,
    20,
  );
  controller.start();
  try {
    await until(() => controller.stats().masquerading, "masquerade set");
    await until(() => nft.lists >= 3, "three periodic re-checks");
    assertEquals(nft.rulesets.length, 1, "an intact table is not written again");
    nft.deleted = true;
    await until(() => nft.rulesets.length === 2, "the deleted table written again");
    assertEquals(nft.rulesets[1], nft.rulesets[0], "the same ruleset");
  } finally {
    controller.stop();
  }
});
