// The API client against the API under test (the stand-in, or a real server with
// FERRY_TEST_KUBECONFIG): every behaviour Ferry depends on, as KUBE-API-FACTS.md lists it.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { ACCEPT_METADATA, ACCEPT_METADATA_LIST } from "../../../daemon/k8s/client.ts";
import { KubeApiError } from "../../../daemon/k8s/errors.ts";
import { EVENTS, IPBLOCKS, PODS } from "../../../daemon/k8s/resources.ts";
import type { IpBlockObject } from "../../../daemon/ipam/ip_pools.ts";
import { installPoolCrds } from "../../../daemon/dev/crds.ts";
import type { WatchEvent } from "../../../daemon/k8s/watch_stream.ts";
import { removePods, testPod, withKube } from "./_target.ts";

Deno.test("create, get, merge patch and update round-trip a pod; null in a merge patch removes a key", () =>
  withKube(async ({ client, id }) => {
    const name = `p-${id}`;
    try {
      const created = await client.create<Pod>(
        PODS,
        testPod(name, `node-${id}`, { annotations: { a: "1", b: "2" } }),
      );
      assert(created.metadata?.uid);
      const patched = await client.patchMerge<Pod>(PODS, "default", name, {
        metadata: { annotations: { a: null, c: "3" } },
      });
      assertEquals(patched.metadata?.annotations, { b: "2", c: "3" });
      assert(Number(patched.metadata!.resourceVersion) > Number(created.metadata!.resourceVersion));
      const fetched = await client.get<Pod>(PODS, "default", name);
      assertEquals(fetched.metadata?.annotations, { b: "2", c: "3" });
      const updated = await client.update<Pod>(PODS, {
        ...fetched,
        metadata: { ...fetched.metadata, labels: { x: "y" } },
      });
      assertEquals(updated.metadata?.labels, { x: "y" });
      assertEquals(updated.metadata?.uid, created.metadata?.uid);
    } finally {
      await removePods(client, [name]);
    }
  }));

Deno.test("a stale update is 409 Conflict and a duplicate create is 409 AlreadyExists, told apart by reason", () =>
  withKube(async ({ client, id }) => {
    const name = `p-${id}`;
    try {
      const created = await client.create<Pod>(PODS, testPod(name, `node-${id}`));
      await client.patchMerge(PODS, "default", name, { metadata: { labels: { v: "2" } } });
      const stale = await assertRejects(() => client.update<Pod>(PODS, created), KubeApiError);
      assertEquals([stale.status, stale.reason, stale.isConflict, stale.isAlreadyExists], [
        409,
        "Conflict",
        true,
        false,
      ]);
      const dup = await assertRejects(
        () => client.create<Pod>(PODS, testPod(name, `node-${id}`)),
        KubeApiError,
      );
      assertEquals([dup.status, dup.reason, dup.isAlreadyExists, dup.isConflict], [
        409,
        "AlreadyExists",
        true,
        false,
      ]);
      const missing = await assertRejects(
        () => client.get(PODS, "default", `absent-${id}`),
        KubeApiError,
      );
      assertEquals(missing.isNotFound, true);
    } finally {
      await removePods(client, [name]);
    }
  }));

Deno.test("a merge patch naming the pod's UID applies, and one naming a replaced pod's UID is 422 on metadata.uid and changes nothing", () =>
  withKube(async ({ client, id }) => {
    const name = `p-${id}`;
    try {
      const first = await client.create<Pod>(PODS, testPod(name, `node-${id}`));
      const own = await client.patchMerge<Pod>(PODS, "default", name, {
        metadata: { uid: first.metadata!.uid, annotations: { a: "1" } },
      });
      assertEquals(own.metadata?.annotations, { a: "1" });
      // The pod is deleted and a new one takes its name: a write meant for the first is refused.
      await client.delete(PODS, "default", name, { gracePeriodSeconds: 0 });
      const second = await client.create<Pod>(PODS, testPod(name, `node-${id}`));
      const stale = await assertRejects(
        () =>
          client.patchMerge(PODS, "default", name, {
            metadata: { uid: first.metadata!.uid, annotations: { a: "2" } },
          }),
        KubeApiError,
      );
      assertEquals([stale.status, stale.isUidMismatch], [422, true]);
      const now = await client.get<Pod>(PODS, "default", name);
      assertEquals([now.metadata?.uid, now.metadata?.annotations], [
        second.metadata?.uid,
        undefined,
      ]);
    } finally {
      await removePods(client, [name]);
    }
  }));

Deno.test("list pages with limit and continue, and field and label selectors pick the node's pods", () =>
  withKube(async ({ client, id }) => {
    const names = Array.from({ length: 5 }, (_, i) => `p${i}-${id}`);
    try {
      for (const [i, name] of names.entries()) {
        await client.create<Pod>(
          PODS,
          testPod(name, i < 3 ? `node-a-${id}` : `node-b-${id}`, {
            labels: { run: id, idx: String(i) },
          }),
        );
      }
      const first = await client.list<Pod>(PODS, {
        namespace: "default",
        labelSelector: `run=${id}`,
        limit: 2,
      });
      assertEquals(first.items.length, 2);
      assert(first.continue, "a first page of 2 out of 5 has a continue token");
      const all = await client.listAll<Pod>(PODS, {
        namespace: "default",
        labelSelector: `run=${id}`,
        pageSize: 2,
      });
      assertEquals(all.items.map((p) => p.metadata!.name).sort(), [...names].sort());
      const onA = await client.listAll<Pod>(PODS, { fieldSelector: `spec.nodeName=node-a-${id}` });
      assertEquals(onA.items.map((p) => p.metadata!.name).sort(), names.slice(0, 3).sort());
      const byName = await client.listAll<Pod>(PODS, {
        namespace: "default",
        fieldSelector: `metadata.name=${names[4]}`,
      });
      assertEquals(byName.items.length, 1);
      const setBased = await client.listAll<Pod>(PODS, {
        namespace: "default",
        labelSelector: `run=${id},idx in (1,3)`,
      });
      assertEquals(setBased.items.map((p) => p.metadata!.labels!.idx).sort(), ["1", "3"]);
      const bad = await assertRejects(
        () => client.list(PODS, { fieldSelector: "spec.bogus=1" }),
        KubeApiError,
      );
      assertEquals(bad.status, 400);
    } finally {
      await removePods(client, names);
    }
  }));

async function nextEvents<T>(
  events: AsyncGenerator<WatchEvent<T>>,
  n: number,
  filter = (_e: WatchEvent<T>) => true,
) {
  const got: WatchEvent<T>[] = [];
  for await (const ev of events) {
    if (!filter(ev)) continue;
    got.push(ev);
    if (got.length === n) break;
  }
  return got;
}

Deno.test("a watch from a list's resourceVersion sees every later change of the selected pods", () =>
  withKube(async ({ client, id }) => {
    const node = `node-${id}`;
    const names = [`w1-${id}`, `w2-${id}`];
    const abort = new AbortController();
    try {
      await client.create<Pod>(PODS, testPod(names[0], node));
      const { resourceVersion } = await client.listAll<Pod>(PODS, {
        fieldSelector: `spec.nodeName=${node}`,
      });
      const events = await client.watch<Pod>(PODS, {
        fieldSelector: `spec.nodeName=${node}`,
        resourceVersion,
        signal: abort.signal,
      });
      await client.create<Pod>(PODS, testPod(names[1], node));
      await client.patchMerge(PODS, "default", names[0], { metadata: { labels: { seen: "yes" } } });
      await client.delete(PODS, "default", names[1], { gracePeriodSeconds: 0 });
      const got = await nextEvents(events, 4, (e) => e.type !== "BOOKMARK");
      assertEquals(
        got.map((e) => [e.type, e.object.metadata!.name, !!e.object.metadata!.deletionTimestamp]),
        [
          ["ADDED", names[1], false],
          ["MODIFIED", names[0], false],
          // A pod's deletion, even with grace 0, is a MODIFIED (marked) and then a DELETED.
          ["MODIFIED", names[1], true],
          ["DELETED", names[1], true],
        ],
      );
    } finally {
      abort.abort();
      await removePods(client, names);
    }
  }));

Deno.test("metadata-only lists, watches, gets and patches answer PartialObjectMetadata: the pod's metadata, no spec or status, selectors still applied", () =>
  withKube(async ({ client, id }) => {
    const node = `node-${id}`;
    const names = [`m1-${id}`, `m2-${id}`, `elsewhere-${id}`];
    const abort = new AbortController();
    type Viewed = Omit<Pod, "kind" | "apiVersion"> & { kind?: string; apiVersion?: string };
    const isMetadata = (o: Viewed) =>
      o.kind === "PartialObjectMetadata" && o.apiVersion === "meta.k8s.io/v1" &&
      o.spec === undefined && o.status === undefined;
    try {
      await client.create<Pod>(PODS, testPod(names[0], node, { labels: { l: "1" } }));
      await client.create<Pod>(PODS, testPod(names[2], `other-${id}`));
      const listed = await client.listAll<Viewed>(PODS, {
        fieldSelector: `spec.nodeName=${node}`,
        metadataOnly: true,
        pageSize: 1,
      });
      assertEquals(listed.items.map((p) => [p.metadata?.name, p.metadata?.labels, isMetadata(p)]), [
        [names[0], { l: "1" }, true],
      ]);
      assert(listed.items[0].metadata?.uid && listed.items[0].metadata?.resourceVersion);
      const events = await client.watch<Viewed>(PODS, {
        fieldSelector: `spec.nodeName=${node}`,
        resourceVersion: listed.resourceVersion,
        metadataOnly: true,
        signal: abort.signal,
      });
      await client.create<Pod>(PODS, testPod(names[1], node));
      const patched = await client.patchMerge<Viewed>(PODS, "default", names[0], {
        metadata: { annotations: { a: "1" } },
      }, { metadataOnly: true });
      assert(
        isMetadata(patched),
        `a metadata-only patch answers metadata: ${JSON.stringify(patched)}`,
      );
      assertEquals(patched.metadata?.annotations, { a: "1" });
      const read = await client.get<Viewed>(PODS, "default", names[0], { metadataOnly: true });
      assert(isMetadata(read), `a metadata-only get answers metadata: ${JSON.stringify(read)}`);
      assertEquals(read.metadata?.uid, patched.metadata?.uid);
      await client.patchMerge(PODS, "default", names[2], { metadata: { annotations: { a: "1" } } });
      await client.delete(PODS, "default", names[1], { gracePeriodSeconds: 0 });
      const got = await nextEvents(events, 4, (e) => e.type !== "BOOKMARK");
      assertEquals(
        got.map((e) => [e.type, e.object.metadata?.name, isMetadata(e.object)]),
        [
          ["ADDED", names[1], true],
          ["MODIFIED", names[0], true],
          ["MODIFIED", names[1], true],
          ["DELETED", names[1], true],
        ],
      );
      assertEquals(got[1].object.metadata?.annotations, { a: "1" });
      assert(got[2].object.metadata?.deletionTimestamp, "the deletion's mark is in the metadata");
    } finally {
      abort.abort();
      await removePods(client, names);
    }
  }));

Deno.test("a metadata view that does not fit the answer is 406: a list as one object's metadata, an object as a list", () =>
  withKube(async ({ client, transport, id }) => {
    const name = `v-${id}`;
    try {
      await client.create<Pod>(PODS, testPod(name, `node-${id}`));
      const asObject = await assertRejects(
        () => transport.json({ method: "GET", path: "/api/v1/pods", accept: ACCEPT_METADATA }),
        KubeApiError,
      );
      const asList = await assertRejects(
        () =>
          transport.json({
            method: "GET",
            path: `/api/v1/namespaces/default/pods/${name}`,
            accept: ACCEPT_METADATA_LIST,
          }),
        KubeApiError,
      );
      assertEquals([asObject.status, asObject.reason, asList.status, asList.reason], [
        406,
        "NotAcceptable",
        406,
        "NotAcceptable",
      ]);
    } finally {
      await removePods(client, [name]);
    }
  }));

Deno.test("bookmarks arrive once pods outside the selector change, carrying only a resourceVersion", () =>
  withKube(async ({ client, id }) => {
    const abort = new AbortController();
    const others = Array.from({ length: 3 }, (_, i) => `other${i}-${id}`);
    try {
      const { resourceVersion } = await client.listAll<Pod>(PODS, {
        fieldSelector: `spec.nodeName=quiet-${id}`,
      });
      const events = await client.watch<Pod>(PODS, {
        fieldSelector: `spec.nodeName=quiet-${id}`,
        resourceVersion,
        allowWatchBookmarks: true,
        timeoutSeconds: 120,
        signal: abort.signal,
      });
      const creating = (async () => {
        for (const name of others) {
          await client.create<Pod>(PODS, testPod(name, `busy-${id}`));
          await new Promise((r) => setTimeout(r, 200));
        }
      })();
      // The real server sends bookmarks about once a minute; the stand-in far more often.
      const [bookmark] = await nextEvents(events, 1);
      await creating;
      assertEquals(bookmark.type, "BOOKMARK");
      assert(Number(bookmark.object.metadata!.resourceVersion) > Number(resourceVersion));
      // A bookmark names no object: its metadata holds the resourceVersion (and zero values).
      assertEquals(bookmark.object.metadata!.name, undefined);
      assertEquals(bookmark.object.metadata!.uid, undefined);
    } finally {
      abort.abort();
      await removePods(client, others);
    }
  }));

Deno.test("an old resourceVersion gets an in-stream 410 ERROR on watch and HTTP 410 on an exact list", () =>
  withKube(async ({ client, id, expireList, expireWatch }) => {
    const name = `c-${id}`;
    try {
      const { resourceVersion: old } = await client.list<Pod>(PODS, {
        namespace: "default",
        limit: 1,
      });
      await client.create<Pod>(PODS, testPod(name, `node-${id}`));
      await client.patchMerge(PODS, "default", name, { metadata: { labels: { n: "1" } } });
      await expireList(old);
      await expireWatch(old);
      const events = await client.watch<Pod>(PODS, { namespace: "default", resourceVersion: old });
      const [err] = await nextEvents(events, 1);
      assertEquals(err.type, "ERROR");
      const status = err.object as unknown as { code: number; reason: string; kind: string };
      assertEquals([status.kind, status.code, status.reason], ["Status", 410, "Expired"]);
      const gone = await assertRejects(
        () =>
          client.list(PODS, {
            namespace: "default",
            resourceVersion: old,
            resourceVersionMatch: "Exact",
          }),
        KubeApiError,
      );
      assertEquals([gone.status, gone.reason, gone.isGone], [410, "Expired", true]);
    } finally {
      await removePods(client, [name]);
    }
  }));

Deno.test("deleting a pod bound to a node only marks it terminating until deleted with grace 0", () =>
  withKube(async ({ client, id }) => {
    const name = `g-${id}`;
    try {
      await client.create<Pod>(PODS, testPod(name, `node-${id}`));
      await client.delete(PODS, "default", name);
      const marked = await client.get<Pod>(PODS, "default", name);
      assert(marked.metadata?.deletionTimestamp, "a deletionTimestamp is set");
      assertEquals(marked.metadata?.deletionGracePeriodSeconds, 30);
      await client.delete(PODS, "default", name, { gracePeriodSeconds: 0 });
      const gone = await assertRejects(() => client.get(PODS, "default", name), KubeApiError);
      assertEquals(gone.isNotFound, true);
    } finally {
      await removePods(client, [name]);
    }
  }));

Deno.test("an Event about a pod names it so that describe shows it", () =>
  withKube(async ({ client, id }) => {
    const name = `e-${id}`;
    try {
      const pod = await client.create<Pod>(PODS, testPod(name, `node-${id}`));
      const ev = await client.createEvent(
        { kind: "Pod", apiVersion: "v1", namespace: "default", name, uid: pod.metadata!.uid },
        {
          type: "Normal",
          reason: "Plugged",
          message: "eth0 10.0.0.2/32",
          component: "ferry",
          host: `node-${id}`,
        },
      );
      const listed = await client.listAll<{ involvedObject: { uid: string }; reason: string }>(
        EVENTS,
        {
          namespace: "default",
          fieldSelector: `involvedObject.name=${name}`,
        },
      );
      assertEquals(listed.items.map((e) => [e.reason, e.involvedObject.uid]), [[
        "Plugged",
        pod.metadata!.uid,
      ]]);
      await client.delete(EVENTS, "default", ev.metadata!.name!);
    } finally {
      await removePods(client, [name]);
    }
  }));

Deno.test("a delete whose uid or resourceVersion precondition no longer holds is 409 Conflict and deletes nothing", () =>
  withKube(async ({ client, id }) => {
    await installPoolCrds(client);
    const name = `10-${id}-precondition`.toLowerCase();
    const created = await client.create<IpBlockObject>(IPBLOCKS, {
      metadata: { name },
      spec: { pool: "none", cidr: "192.0.2.0/30", node: `n-${id}` },
    });
    try {
      const changed = await client.update<IpBlockObject>(IPBLOCKS, {
        ...created,
        metadata: { ...created.metadata, labels: { changed: "yes" } },
      });
      for (
        const preconditions of [
          { resourceVersion: created.metadata!.resourceVersion },
          { uid: "00000000-0000-0000-0000-000000000000" },
        ]
      ) {
        const e = await assertRejects(
          () => client.delete(IPBLOCKS, undefined, name, { preconditions }),
          KubeApiError,
        );
        assert(e.isConflict, e.message);
      }
      await client.get(IPBLOCKS, undefined, name);
      await client.delete(IPBLOCKS, undefined, name, {
        preconditions: {
          uid: changed.metadata!.uid,
          resourceVersion: changed.metadata!.resourceVersion,
        },
      });
      const gone = await assertRejects(() => client.get(IPBLOCKS, undefined, name), KubeApiError);
      assert(gone.isNotFound);
    } finally {
      await client.delete(IPBLOCKS, undefined, name).catch(() => {});
    }
  }));
