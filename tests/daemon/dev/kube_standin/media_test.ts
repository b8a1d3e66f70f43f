import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { answerView, checkView, viewed } from "../../../../daemon/dev/kube_standin/media.ts";
import { ApiFailure } from "../../../../daemon/dev/kube_standin/object_store.ts";
import { KubeStandin } from "../../../../daemon/dev/kube_standin/server.ts";
import { KubeClient } from "../../../../daemon/k8s/client.ts";
import { HttpTransport } from "../../../../daemon/k8s/transport.ts";
import { PODS } from "../../../../daemon/k8s/resources.ts";
import type { WatchEvent } from "../../../../daemon/k8s/watch_stream.ts";

Deno.test("the first media range naming a view decides: metadata, a metadata list, or the whole object", () => {
  assertEquals(answerView(null), "whole");
  assertEquals(answerView("application/json"), "whole");
  assertEquals(
    answerView("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"),
    "metadata",
  );
  assertEquals(
    answerView("application/json; as=PartialObjectMetadataList; g=meta.k8s.io; v=v1"),
    "metadataList",
  );
  assertEquals(
    answerView("application/json,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"),
    "metadata",
  );
});

Deno.test("a view the stand-in does not serve is 406, whatever follows it", () => {
  for (
    const accept of [
      "application/json;as=Table;g=meta.k8s.io;v=v1,application/json",
      "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v2",
      "application/json;as=PartialObjectMetadata",
    ]
  ) {
    const e = assertThrows(() => answerView(accept), ApiFailure);
    assertEquals([e.code, e.reason], [406, "NotAcceptable"]);
  }
});

Deno.test("a view must fit the answer: one object's metadata for objects and watches, a metadata list for lists", () => {
  checkView("metadata", false, "Pod");
  checkView("metadataList", true, "Pod");
  checkView("whole", true, "Pod");
  for (const [view, isList] of [["metadata", true], ["metadataList", false]] as const) {
    const e = assertThrows(() => checkView(view, isList, "Pod"), ApiFailure);
    assertEquals(e.code, 406);
  }
  const pod: Pod = { metadata: { name: "p", uid: "u" }, spec: { containers: [] } };
  assertEquals(viewed(pod, "whole"), pod);
  assertEquals(viewed(pod, "metadata"), {
    kind: "PartialObjectMetadata",
    apiVersion: "meta.k8s.io/v1",
    metadata: { name: "p", uid: "u" },
  });
});

Deno.test("a metadata-only watch's bookmarks are PartialObjectMetadata too, as the real server sends them", async () => {
  const api = await KubeStandin.start({ bookmarkIntervalMs: 50 });
  const transport = new HttpTransport({ server: api.url });
  const client = new KubeClient(transport);
  const abort = new AbortController();
  try {
    const { resourceVersion } = await client.list(PODS, { fieldSelector: "spec.nodeName=quiet" });
    const events = await client.watch<Pod>(PODS, {
      fieldSelector: "spec.nodeName=quiet",
      resourceVersion,
      allowWatchBookmarks: true,
      metadataOnly: true,
      signal: abort.signal,
    });
    await client.create<Pod>(PODS, {
      metadata: { name: "busy", namespace: "default" },
      spec: { nodeName: "busy", containers: [{ name: "c", image: "busybox" }] },
    });
    let bookmark: WatchEvent<{ kind?: string; apiVersion?: string }> | undefined;
    for await (const ev of events) {
      bookmark = ev;
      break;
    }
    assertEquals(
      [bookmark?.type, bookmark?.object.kind, bookmark?.object.apiVersion],
      ["BOOKMARK", "PartialObjectMetadata", "meta.k8s.io/v1"],
    );
    assertEquals(api.stats.metadataOnly, { "WATCH pods": 1 });
  } finally {
    abort.abort();
    while (api.stats.openWatches > 0) await new Promise((r) => setTimeout(r, 10));
    transport.close();
    await api.stop();
  }
});
