import { assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { type Attachment, AttachmentStore } from "../../../daemon/records/attachment_store.ts";
import { PodGc, type PodGcDeps } from "../../../daemon/gc/pod_gc.ts";
import { PodRegistry } from "../../../daemon/records/registry.ts";
import { withTempDir } from "../../../daemon/dev/netns.ts";

const pod = (name: string, uid: string): Pod => ({
  metadata: { name, namespace: "default", uid, resourceVersion: "1" },
  spec: { nodeName: "n1", containers: [] },
});

function record(name: string, uid: string, opts: { ageMs?: number; netns?: string } = {}) {
  return {
    containerId: `c-${name}-${uid}`,
    ifname: "eth0",
    netns: opts.netns ?? "/proc/self/ns/net",
    network: "ferry",
    driver: "bridge",
    pod: { namespace: "default", name, uid },
    result: { cniVersion: "1.1.0", ips: [{ address: `10.0.0.${uid.length}/24` }] },
    createdAt: new Date(Date.now() - (opts.ageMs ?? 120_000)).toISOString(),
  } as Attachment;
}

interface Env {
  store: AttachmentStore;
  registry: PodRegistry;
  gc: PodGc;
  events: string[];
  released: string[];
  setSynced(v: boolean): void;
  /** Whether the loop's release holds the container's lock now (it runs `stale` under it). */
  locked(): boolean;
}

async function withGc(
  overrides: Partial<PodGcDeps>,
  fn: (env: Env) => Promise<void>,
): Promise<void> {
  await withTempDir(async (dir) => {
    const store = await AttachmentStore.open(dir);
    const registry = new PodRegistry();
    const events: string[] = [];
    const released: string[] = [];
    let synced = true;
    let locked = false;
    const gc = new PodGc({
      store,
      registry,
      synced: () => synced,
      release: async (key, stale) => {
        locked = true;
        try {
          const r = store.get(key);
          if (!r || !(await stale(r))) return undefined;
          await store.delete(key);
          released.push(r.containerId);
          return r;
        } finally {
          locked = false;
        }
      },
      netnsGone: (path) => Promise.resolve(path.startsWith("/gone/")),
      event: (p, type, reason) => Promise.resolve(void events.push(`${type} ${reason} ${p.name}`)),
      graceMs: 60_000,
      intervalMs: 0,
      maxRetries: 2,
      logger: getLogger(["ferry", "gc"]),
      ...overrides,
    });
    registry.onRemove((p) => gc.podDeleted(p));
    try {
      await fn({
        store,
        registry,
        gc,
        events,
        released,
        setSynced: (v) => (synced = v),
        locked: () => locked,
      });
    } finally {
      await gc.close();
    }
  });
}

Deno.test("a deleted pod's attachments are released with an Event; a live pod's stay", () =>
  withGc({}, async ({ store, registry, gc, events, released }) => {
    await store.put(record("a", "u1"));
    await store.put(record("b", "u2"));
    registry.upsert(pod("a", "u1"));
    registry.upsert(pod("b", "u2"));
    registry.remove(pod("a", "u1"));
    await gc.idle();
    assertEquals(released, ["c-a-u1"]);
    assertEquals(events, ["Normal IPAddressGarbageCollected a"]);
    assertEquals(store.list().map((r) => r.containerId), ["c-b-u2"]);
    assertEquals(await gc.sweep(), 0, "the live pod is not stale");
  }));

Deno.test("an attachment younger than the grace period is released only once it has passed", () =>
  withGc({ graceMs: 300 }, async ({ store, registry, gc, released }) => {
    await store.put(record("a", "u1", { ageMs: 0 }));
    registry.upsert(pod("a", "u1"));
    registry.remove(pod("a", "u1"));
    await gc.idle();
    assertEquals(released, [], "too young");
    await new Promise((r) => setTimeout(r, 500));
    await gc.idle();
    assertEquals(released, ["c-a-u1"]);
  }));

Deno.test("a pod replaced by another of the same name loses only the old pod's attachments", () =>
  withGc({}, async ({ store, registry, gc, released }) => {
    await store.put(record("a", "old"));
    await store.put(record("a", "new"));
    registry.upsert(pod("a", "new"));
    assertEquals(await gc.sweep(), 1);
    await gc.idle();
    assertEquals(released, ["c-a-old"]);
  }));

Deno.test("the sweep finds pods deleted while nobody watched, and does nothing while the cache is not synced", () =>
  withGc({}, async ({ store, gc, released, setSynced }) => {
    await store.put(record("gone", "u9"));
    setSynced(false);
    assertEquals(await gc.sweep(), 0);
    await gc.idle();
    assertEquals(released, []);
    assertEquals(gc.stats().sweepsSkipped, 1);
    setSynced(true);
    assertEquals(await gc.sweep(), 1);
    await gc.idle();
    assertEquals(released, ["c-gone-u9"]);
  }));

Deno.test("an attachment whose namespace is gone is released even though its pod lives", () =>
  withGc({}, async ({ store, registry, gc, released }) => {
    await store.put(record("a", "u1", { netns: "/gone/cni-1" }));
    registry.upsert(pod("a", "u1"));
    assertEquals(await gc.sweep(), 1);
    await gc.idle();
    assertEquals(released, ["c-a-u1"]);
  }));

Deno.test("a release that keeps failing is given up after its retries, with a Warning Event", () =>
  withGc({
    release: () => Promise.reject(new Error("plumbing broke")),
  }, async ({ store, registry, gc, events }) => {
    await store.put(record("a", "u1"));
    registry.upsert(pod("a", "u1"));
    registry.remove(pod("a", "u1"));
    for (let i = 0; i < 100 && gc.stats().failed === 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    assertEquals(gc.stats().failed, 1);
    assertEquals(events, ["Warning IPAddressGarbageCollectionFailed a"]);
    assertEquals(store.list().length, 1, "nothing was released");
  }));

Deno.test("a pod the cache lacks but the API server has with its UID keeps its attachments; gone or replaced there, they are released", () => {
  // The cache's first list comes from the API server's watch cache, which may lag its storage:
  // the server itself is asked before a deleted or replaced pod's attachments are released.
  const inApi = new Map<string, string>([["lagging", "u1"], ["renamed", "other"]]);
  const asked: string[] = [];
  let askedUnderLock = false;
  let env: { locked(): boolean } | undefined;
  return withGc({
    podUid: (p) => {
      asked.push(p.name);
      // Asked before the container's lock is taken: a slow server must not hold up its DEL.
      askedUnderLock ||= env!.locked();
      return Promise.resolve(inApi.get(p.name));
    },
  }, async (e) => {
    env = e;
    const { store, gc, released, events } = e;
    await store.put(record("lagging", "u1"));
    await store.put(record("renamed", "u2"));
    await store.put(record("gone", "u3"));
    assertEquals(await gc.sweep(), 3, "the cache has none of them");
    await gc.idle();
    assertEquals(released.sort(), ["c-gone-u3", "c-renamed-u2"]);
    assertEquals(store.list().map((r) => r.containerId), ["c-lagging-u1"]);
    assertEquals(asked.sort(), ["gone", "lagging", "renamed"]);
    assertEquals(askedUnderLock, false);
    assertEquals(events.length, 2, "no Event for the pod that was kept");
  });
});

Deno.test("a release whose pod the API server cannot confirm gone is retried, and nothing is released meanwhile", () =>
  withGc({
    podUid: () => Promise.reject(new Error("API unreachable")),
  }, async ({ store, gc, released }) => {
    await store.put(record("a", "u1"));
    assertEquals(await gc.sweep(), 1);
    for (let i = 0; i < 100 && gc.stats().failed === 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    assertEquals(gc.stats().failed, 1);
    assertEquals(released, []);
    assertEquals(store.list().length, 1);
  }));
