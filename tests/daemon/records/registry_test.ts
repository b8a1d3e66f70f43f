import { assertEquals, assertRejects } from "deno-std/assert/mod.js";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import {
  ATTACHMENTS_ANNOTATION,
  PodRegistry,
  slimPod,
  stripPod,
} from "../../../daemon/records/registry.ts";
import { CniError } from "../../../lib/cni/errors.ts";

const pod = (name: string, uid: string, extra: Record<string, unknown> = {}): Pod => ({
  metadata: { name, namespace: "default", uid, resourceVersion: "1", ...extra },
  spec: { nodeName: "n1", containers: [] },
});
const ref = (name: string, uid?: string) => ({
  namespace: "default",
  name,
  ...(uid ? { uid } : {}),
});

Deno.test("an ADD waiting for its pod is woken by the watch, not by polling", async () => {
  const registry = new PodRegistry();
  const waiting = registry.waitFor(ref("web-0"), AbortSignal.timeout(5000));
  assertEquals(registry.waiting, 1);
  registry.upsert(pod("web-0", "u1"));
  assertEquals((await waiting).uid, "u1");
  assertEquals(registry.waiting, 0);
});

Deno.test("waiting ends with the signal's reason when the pod never appears, and leaves no waiter", async () => {
  const registry = new PodRegistry();
  const abort = new AbortController();
  const waiting = registry.waitFor(ref("ghost"), abort.signal);
  abort.abort(new Error("timed out"));
  await assertRejects(() => waiting, Error, "timed out");
  assertEquals(registry.waiting, 0);
});

Deno.test("an older incarnation of the pod (another UID) does not satisfy a wait for the new one", async () => {
  const registry = new PodRegistry();
  registry.upsert(pod("web-0", "old"));
  const waiting = registry.waitFor(ref("web-0", "new"), AbortSignal.timeout(5000));
  assertEquals(registry.waiting, 1);
  registry.upsert(pod("web-0", "new"));
  assertEquals((await waiting).uid, "new");
});

Deno.test("a terminating pod gets no new sandbox: try again later (11)", async () => {
  const registry = new PodRegistry();
  registry.upsert(pod("web-0", "u1", { deletionTimestamp: "2026-01-01T00:00:00Z" }));
  const err = await assertRejects(
    () => registry.waitFor(ref("web-0"), AbortSignal.timeout(1000)),
    CniError,
  );
  assertEquals(err.code, 11);
});

Deno.test("removal forgets only the incarnation with that UID", () => {
  const registry = new PodRegistry();
  registry.upsert(pod("web-0", "new"));
  registry.remove(pod("web-0", "old"));
  assertEquals(registry.get("default", "web-0")?.uid, "new");
  registry.remove(pod("web-0", "new"));
  assertEquals(registry.get("default", "web-0"), undefined);
});

Deno.test("the container ID comes from the pod's annotation after a restart and survives updates", () => {
  const registry = new PodRegistry();
  const annotations = {
    [ATTACHMENTS_ANNOTATION]: JSON.stringify({ containerId: "c1", interfaces: [] }),
  };
  registry.upsert(pod("web-0", "u1", { annotations }));
  assertEquals(registry.containerIdOf(ref("web-0")), "c1");
  registry.setContainerId(ref("web-0"), "c2");
  registry.upsert(pod("web-0", "u1", { annotations }));
  assertEquals(registry.containerIdOf(ref("web-0")), "c2");
  registry.upsert(pod("web-0", "u2"));
  assertEquals(registry.containerIdOf(ref("web-0")), undefined);
});

Deno.test("the pod watch keeps what the registry reads of a pod and drops the rest", () => {
  const kept = {
    name: "web-0",
    namespace: "app",
    uid: "u1",
    resourceVersion: "9",
    labels: { app: "web" },
    annotations: { "k8s.v1.cni.cncf.io/networks": "blue", [ATTACHMENTS_ANNOTATION]: "{}" },
    deletionTimestamp: "2026-11-25T00:00:00Z",
  };
  const full: Pod = {
    metadata: {
      ...kept,
      ownerReferences: [{ apiVersion: "apps/v1", kind: "StatefulSet", name: "web", uid: "s1" }],
      managedFields: [{ manager: "kubelet", operation: "Update", fieldsType: "FieldsV1" }],
      creationTimestamp: "2026-11-24T00:00:00Z",
    },
    spec: { nodeName: "n1", containers: [{ name: "c", image: "busybox" }] },
    status: { phase: "Running", podIP: "10.0.0.5" },
  };
  const slim = slimPod(full);
  assertEquals(stripPod(slim), stripPod(full));
  assertEquals(stripPod(slim).terminating, true);
  assertEquals(JSON.parse(JSON.stringify(slim)), { metadata: kept });
});
