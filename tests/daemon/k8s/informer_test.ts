// The informer against the API under test. Tests that need the stand-in's hooks (dropped
// connections, injected failures) run only against it; the real-server suite covers the same
// ground end to end by stopping and starting the API server.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { getLogger } from "@logtape/logtape";
import { Informer, type InformerOptions } from "../../../daemon/k8s/informer.ts";
import { PODS } from "../../../daemon/k8s/resources.ts";
import type { KubeClient } from "../../../daemon/k8s/client.ts";
import { REAL_KUBECONFIG, removePods, testPod, withKube } from "./_target.ts";

const standinOnly = { ignore: !!REAL_KUBECONFIG };

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 10));
  }
}
const FAST: InformerOptions = { backoffInitialMs: 20, backoffMaxMs: 100, watchTimeoutSeconds: 60 };

/** An informer on one node's pods that records what its handlers see. */
function recordingInformer(client: KubeClient, node: string, options: InformerOptions = FAST) {
  const seen: string[] = [];
  const changed = new EventTarget();
  const note = (s: string) => {
    seen.push(s);
    changed.dispatchEvent(new Event("change"));
  };
  const informer = new Informer<Pod>(
    client,
    PODS,
    { fieldSelector: `spec.nodeName=${node}` },
    {
      upsert: (p, why) => note(`${why}:${p.metadata!.name}:${p.metadata?.labels?.v ?? "-"}`),
      remove: (p) => note(`remove:${p.metadata!.name}`),
    },
    getLogger(["ferry", "test"]),
    options,
  );
  const waitFor = (pred: (seen: string[]) => boolean, ms = 10_000) =>
    new Promise<void>((resolve, reject) => {
      if (pred(seen)) return resolve();
      const timer = setTimeout(
        () => reject(new Error(`timed out; saw ${JSON.stringify(seen)}`)),
        ms,
      );
      changed.addEventListener("change", function check() {
        if (!pred(seen)) return;
        clearTimeout(timer);
        changed.removeEventListener("change", check);
        resolve();
      });
    });
  return { informer, seen, waitFor };
}

Deno.test("the informer lists first, then follows changes of its node's pods only", () =>
  withKube(async ({ client, id }) => {
    const node = `node-${id}`;
    const names = [`a-${id}`, `b-${id}`, `other-${id}`];
    await client.create<Pod>(PODS, testPod(names[0], node));
    const { informer, seen, waitFor } = recordingInformer(client, node);
    try {
      informer.start();
      await informer.synced;
      assertEquals(seen, [`relist:${names[0]}:-`]);
      await client.create<Pod>(PODS, testPod(names[2], `elsewhere-${id}`));
      await client.create<Pod>(PODS, testPod(names[1], node));
      await client.patchMerge(PODS, "default", names[0], { metadata: { labels: { v: "2" } } });
      await client.delete(PODS, "default", names[1], { gracePeriodSeconds: 0 });
      await waitFor((s) => s.includes(`remove:${names[1]}`));
      assert(seen.includes(`event:${names[1]}:-`));
      assert(seen.includes(`event:${names[0]}:2`));
      assertEquals(seen.some((s) => s.includes(names[2])), false);
      assertEquals(informer.list().map((p) => p.metadata!.name), [names[0]]);
    } finally {
      await informer.stop();
      await removePods(client, names);
    }
  }));

Deno.test("a first list from the watch cache delivers the node's pods whole and the watch goes on from it; a re-list after 410 reads the storage page by page", () =>
  withKube(async ({ client, id, standin }) => {
    const node = `node-${id}`;
    const names = [`first-a-${id}`, `first-b-${id}`, `later-${id}`];
    for (const name of names.slice(0, 2)) await client.create<Pod>(PODS, testPod(name, node));
    const { informer, seen, waitFor } = recordingInformer(client, node, {
      ...FAST,
      pageSize: 1,
      firstListFromCache: true,
    });
    try {
      informer.start();
      await informer.synced;
      assertEquals(seen.sort(), [`relist:${names[0]}:-`, `relist:${names[1]}:-`]);
      await client.create<Pod>(PODS, testPod(names[2], node));
      await waitFor((s) => s.includes(`event:${names[2]}:-`));
      if (!standin) return;
      // One request: a list of any version is answered whole, whatever the page size.
      assertEquals([standin.stats.listsFromCache.pods, standin.stats.requests["GET pods"]], [1, 1]);
      await until(() => standin.stats.openWatches === 1);
      standin.failRequests({ watch: true, status: 503, reason: "ServiceUnavailable", times: 1e6 });
      standin.dropWatches();
      await client.patchMerge(PODS, "default", names[0], { metadata: { labels: { v: "2" } } });
      standin.expireWatchCache();
      standin.clearFaults();
      await waitFor((s) => s.includes(`relist:${names[0]}:2`));
      assertEquals([informer.stats.relists, informer.stats.lists], [1, 2]);
      assertEquals(
        [standin.stats.listsFromCache.pods, standin.stats.requests["GET pods"]],
        [1, 1 + 3],
        "the re-list reads the storage, a page per pod",
      );
    } finally {
      await informer.stop();
      await removePods(client, names);
    }
  }));

Deno.test("the informer keeps and hands on what its transform leaves of listed and watched objects", () =>
  withKube(async ({ client, id }) => {
    const node = `node-${id}`;
    const names = [`t1-${id}`, `t2-${id}`];
    const handed: Pod[] = [];
    const transform = (p: Pod): Pod => ({
      metadata: {
        name: p.metadata?.name,
        namespace: p.metadata?.namespace,
        resourceVersion: p.metadata?.resourceVersion,
      },
    });
    const informer = new Informer<Pod>(
      client,
      PODS,
      { fieldSelector: `spec.nodeName=${node}` },
      { upsert: (p) => handed.push(p), remove: (p) => handed.push(p) },
      getLogger(["ferry", "test"]),
      { ...FAST, transform },
    );
    try {
      await client.create<Pod>(PODS, testPod(names[0], node));
      informer.start();
      await informer.synced;
      await client.create<Pod>(PODS, testPod(names[1], node));
      await client.delete(PODS, "default", names[1], { gracePeriodSeconds: 0 });
      await until(() => handed.length >= 4);
      // Listed (t1), watched (t2 added, marked, deleted): all as the transform left them.
      assertEquals(
        handed.map((p) => [p.metadata?.name, Object.keys(p), Object.keys(p.metadata!)]),
        [
          [names[0], ["metadata"], ["name", "namespace", "resourceVersion"]],
          ...[1, 2, 3].map(
            () => [names[1], ["metadata"], ["name", "namespace", "resourceVersion"]],
          ),
        ],
      );
      assertEquals(informer.list(), [transform(await client.get<Pod>(PODS, "default", names[0]))]);
    } finally {
      await informer.stop();
      await removePods(client, names);
    }
  }));

Deno.test({
  name:
    "after a dropped connection the informer watches again from where it was, without re-listing",
  ...standinOnly,
  fn: () =>
    withKube(async ({ client, id, standin }) => {
      const node = `node-${id}`;
      const { informer, waitFor } = recordingInformer(client, node);
      try {
        informer.start();
        await informer.synced;
        await until(() => standin!.stats.openWatches === 1);
        standin!.dropWatches();
        await client.create<Pod>(PODS, testPod(`late-${id}`, node));
        await waitFor((s) => s.includes(`event:late-${id}:-`));
        assertEquals(informer.stats.lists, 1);
        assert(informer.stats.watches >= 2);
        assertEquals(standin!.stats.openWatches, 1);
      } finally {
        await informer.stop();
        await removePods(client, [`late-${id}`]);
      }
    }),
});

Deno.test({
  name:
    "a 410 makes the informer re-list and deliver what changed while it was blind, deletions included",
  ...standinOnly,
  fn: () =>
    withKube(async ({ client, id, standin }) => {
      const node = `node-${id}`;
      const [keep, change, gone, born] = ["keep", "change", "gone", "born"].map((n) =>
        `${n}-${id}`
      );
      for (const n of [keep, change, gone]) await client.create<Pod>(PODS, testPod(n, node));
      const { informer, seen, waitFor } = recordingInformer(client, node);
      try {
        informer.start();
        await informer.synced;
        await until(() => standin!.stats.openWatches === 1);
        standin!.failRequests({
          watch: true,
          status: 503,
          reason: "ServiceUnavailable",
          times: 1_000_000,
        });
        standin!.dropWatches();
        await client.patchMerge(PODS, "default", change, { metadata: { labels: { v: "blind" } } });
        await client.delete(PODS, "default", gone, { gracePeriodSeconds: 0 });
        await client.create<Pod>(PODS, testPod(born, node));
        standin!.expireWatchCache();
        standin!.clearFaults();
        await waitFor((s) =>
          s.includes(`remove:${gone}`) && s.includes(`relist:${born}:-`) &&
          s.includes(`relist:${change}:blind`)
        );
        assertEquals(informer.stats.relists, 1);
        assertEquals(
          seen.filter((s) => s.includes(keep)),
          [`relist:${keep}:-`],
          "unchanged pods are not re-delivered",
        );
        assertEquals(
          informer.list().map((p) => p.metadata!.name).sort(),
          [born, change, keep].sort(),
        );
      } finally {
        await informer.stop();
        await removePods(client, [keep, change, gone, born]);
      }
    }),
});

Deno.test({
  name:
    "the informer turns unhealthy when the API stays down past the deadline, and healthy when it is back",
  ...standinOnly,
  fn: () =>
    withKube(async ({ client, id, standin }) => {
      const { informer } = recordingInformer(client, `node-${id}`, {
        ...FAST,
        unhealthyAfterMs: 300,
      });
      try {
        informer.start();
        await informer.synced;
        assertEquals(informer.healthy, true);
        await until(() => standin!.stats.openWatches === 1);
        standin!.failRequests({ status: 503, reason: "ServiceUnavailable", times: 1_000_000 });
        standin!.dropWatches();
        await new Promise((r) => setTimeout(r, 600));
        assertEquals(informer.healthy, false);
        standin!.clearFaults();
        await until(() => informer.healthy);
      } finally {
        await informer.stop();
      }
    }),
});

Deno.test({
  name:
    "a watch that does not open within the request timeout counts as a failure, and the informer recovers",
  ...standinOnly,
  fn: () =>
    withKube(async ({ client, id, standin }) => {
      const { informer } = recordingInformer(client, `node-${id}`, {
        ...FAST,
        unhealthyAfterMs: 300,
        requestTimeoutMs: 200,
      });
      try {
        informer.start();
        await informer.synced;
        await until(() => standin!.stats.openWatches === 1);
        standin!.delayResponses(60_000);
        standin!.dropWatches();
        await until(() => !informer.healthy);
        standin!.delayResponses(0);
        await until(() => informer.healthy);
        assert(informer.stats.failures >= 1);
      } finally {
        standin!.delayResponses(0);
        await informer.stop();
      }
    }),
});

Deno.test("a periodic resync re-delivers the cache to the handlers", () =>
  withKube(async ({ client, id }) => {
    const node = `node-${id}`;
    await client.create<Pod>(PODS, testPod(`r-${id}`, node));
    const { informer, waitFor } = recordingInformer(client, node, { ...FAST, resyncMs: 100 });
    try {
      informer.start();
      await waitFor((s) => s.filter((x) => x === `resync:r-${id}:-`).length >= 2);
    } finally {
      await informer.stop();
      await removePods(client, [`r-${id}`]);
    }
  }));

Deno.test("an informer that keeps no objects hands them whole to its handlers, keeps only their identity, and does not resync", () =>
  withKube(async ({ client, id }) => {
    const node = `node-${id}`;
    const name = `k-${id}`;
    await client.create<Pod>(PODS, testPod(name, node, { labels: { v: "1" } }));
    const { informer, seen, waitFor } = recordingInformer(client, node, {
      ...FAST,
      keepObjects: false,
      resyncMs: 50,
    });
    try {
      informer.start();
      await informer.synced;
      await client.patchMerge(PODS, "default", name, { metadata: { labels: { v: "2" } } });
      await waitFor((s) => s.includes(`event:${name}:2`));
      assertEquals(seen[0], `relist:${name}:1`, "the listed pod, labels and all");
      const [kept] = informer.list();
      const now = await client.get<Pod>(PODS, "default", name);
      assertEquals(kept, {
        metadata: { name, namespace: "default", resourceVersion: now.metadata!.resourceVersion },
      });
      await new Promise((r) => setTimeout(r, 300));
      assertEquals(seen.filter((x) => x.startsWith("resync:")), [], "nothing but stubs to resync");
    } finally {
      await informer.stop();
      await removePods(client, [name]);
    }
  }));

Deno.test("a resource the server does not serve is empty to an informer that allows it, which stays healthy; to any other it is a failure", () =>
  withKube(async ({ client }) => {
    const none = {
      group: "nothing.ferry.dev",
      version: "v1",
      plural: "nothings",
      kind: "Nothing",
      namespaced: true,
    };
    const handlers = { upsert: () => {}, remove: () => {} };
    const log = getLogger(["ferry", "test"]);
    const optional = new Informer(client, none, {}, handlers, log, {
      ...FAST,
      missingIsEmpty: true,
    });
    const required = new Informer(client, none, {}, handlers, log, FAST);
    optional.start();
    required.start();
    try {
      await until(() => optional.isSynced);
      assertEquals(optional.list(), []);
      assert(optional.healthy);
      await new Promise((r) => setTimeout(r, 500));
      assertEquals(required.isSynced, false);
      assert(required.stats.failures > 0);
    } finally {
      await optional.stop();
      await required.stop();
    }
  }));
