/**
 * The stand-in's watches, as a kube-apiserver streams them (see `server.ts`'s module doc for
 * what is modelled): one JSON event a line, bookmarks, the in-stream ERROR, closed at
 * `timeoutSeconds` or when a test drops the connections.
 *
 * @module
 */
import type { KubeObject } from "../../k8s/client.ts";
import type { ResourceType } from "../../k8s/resources.ts";
import { type AnswerView, checkView, viewed } from "./media.ts";
import { ApiFailure, type Change, type ObjectStore, resourceId } from "./object_store.ts";
import { matchesSelectors } from "./selectors.ts";
import { selectorsOf } from "./list.ts";

/** An open watch, as the server keeps it (to drop it). */
export interface OpenWatch {
  /** Ends the stream: as a dropped connection when `error`. */
  close(error?: boolean): void;
}

/** What a watch reads and where it registers. */
export interface WatchContext {
  /** The storage. */
  store: ObjectStore;
  /** The count of open watches. */
  stats: { openWatches: number };
  /** The open watches (a test drops them all). */
  watches: Set<OpenWatch>;
  /** How often the watch considers sending a bookmark (ms). */
  bookmarkIntervalMs: number;
  /** Where a stalled watch cache stopped (undefined: it follows the storage). */
  heldAt(): number | undefined;
  /** Called back when a stalled cache resumes: each watch then sends what it held back. */
  resumed: Set<() => void>;
}

/**
 * A watch: from a resourceVersion (the in-stream 410 ERROR when it is older than the watch cache)
 * or with synthetic ADDED events, objects moving in and out of the selectors, bookmarks when the
 * type has newer events, `timeoutSeconds`; what a stalled cache holds back is sent once it resumes.
 */
export function watchResponse(
  ctx: WatchContext,
  route: { rt: ResourceType; namespace?: string },
  url: URL,
  view: AnswerView,
): Response {
  const { rt, namespace } = route;
  checkView(view, false, rt.kind);
  const [fields, labels] = selectorsOf(rt, url);
  const rvParam = url.searchParams.get("resourceVersion");
  const bookmarks = url.searchParams.get("allowWatchBookmarks") === "true";
  const timeoutSeconds = Number(url.searchParams.get("timeoutSeconds") ?? "1800");
  const inScope = (o: KubeObject | undefined) =>
    !!o && (!namespace || o.metadata?.namespace === namespace) &&
    matchesSelectors(o as Record<string, unknown>, fields, labels);
  const toEvent = (c: Change): { type: string; object: KubeObject } | undefined => {
    const now = inScope(c.object), before = inScope(c.previous);
    const object = viewed(c.object, view);
    if (c.type === "DELETED") return before ? { type: "DELETED", object } : undefined;
    if (now && before) return { type: "MODIFIED", object };
    if (now) return { type: "ADDED", object };
    if (before) return { type: "DELETED", object };
    return undefined;
  };
  const encoder = new TextEncoder();
  const watches = ctx.watches;
  const store = ctx.store;
  const stats = ctx.stats;
  const interval = ctx.bookmarkIntervalMs;
  // A stalled watch cache (stallWatchCache) holds back what is newer than where it stopped.
  const heldAt = () => ctx.heldAt();
  const resumed = ctx.resumed;
  let cleanup = () => {};
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      let closed = false;
      let lastSent = 0;
      const send = (ev: { type: string; object: unknown }) => {
        if (!closed) controller.enqueue(encoder.encode(JSON.stringify(ev) + "\n"));
      };
      const initial: { type: string; object: KubeObject }[] = [];
      const held: { rv: number; ev: { type: string; object: KubeObject } }[] = [];
      const deliver = (rv: number, ev: { type: string; object: KubeObject }) => {
        const at = heldAt();
        if (held.length > 0 || (at !== undefined && rv > at)) return held.push({ rv, ev });
        lastSent = Math.max(lastSent, rv);
        send(ev);
      };
      const flush = () => {
        for (const { rv, ev } of held.splice(0)) {
          lastSent = Math.max(lastSent, rv);
          send(ev);
        }
      };
      let unsubscribe = () => {};
      try {
        const at = heldAt();
        if (!rvParam || rvParam === "0") {
          for (const o of store.snapshot(rt, namespace, at)) {
            if (inScope(o)) initial.push({ type: "ADDED", object: viewed(o, view) });
          }
          lastSent = at ?? store.rv;
        } else {
          lastSent = Number(rvParam);
          // In order of resourceVersion: what a stalled cache has not reached is left below.
          for (const c of store.changesSince(rt, lastSent)) {
            if (at !== undefined && c.rv > at) break;
            lastSent = c.rv;
            const ev = toEvent(c);
            if (ev) initial.push(ev);
          }
        }
        // What a stalled cache has not reached yet waits for it to resume.
        if (at !== undefined) {
          for (const c of store.changesSince(rt, Math.max(at, lastSent))) {
            const ev = toEvent(c);
            if (ev) held.push({ rv: c.rv, ev });
          }
        }
      } catch (e) {
        if (e instanceof ApiFailure) {
          send({
            type: "ERROR",
            object: {
              kind: "Status",
              apiVersion: "v1",
              metadata: {},
              status: "Failure",
              message: e.message,
              reason: e.reason,
              code: e.code,
            },
          });
          controller.close();
          return;
        }
        throw e;
      }
      for (const ev of initial) send(ev);
      unsubscribe = store.subscribe((c) => {
        if (c.resource !== resourceId(rt)) return;
        const ev = toEvent(c);
        if (ev) deliver(c.rv, ev);
      });
      resumed.add(flush);
      const ticker = setInterval(() => {
        const newest = Math.min(store.lastRvOf(rt), heldAt() ?? Infinity);
        if (bookmarks && held.length === 0 && newest > lastSent) {
          lastSent = newest;
          const type = view === "whole"
            ? { kind: rt.kind, apiVersion: rt.group ? `${rt.group}/${rt.version}` : rt.version }
            : { kind: "PartialObjectMetadata", apiVersion: "meta.k8s.io/v1" };
          send({
            type: "BOOKMARK",
            object: {
              ...type,
              metadata: { resourceVersion: String(newest), creationTimestamp: null },
            },
          });
        }
      }, interval);
      const timer = setTimeout(() => handle.close(false), timeoutSeconds * 1000);
      const handle: OpenWatch = {
        close(error) {
          if (closed) return;
          closed = true;
          cleanup();
          try {
            if (error) controller.error(new Error("connection dropped"));
            else controller.close();
          } catch { /* already closed */ }
        },
      };
      cleanup = () => {
        unsubscribe();
        resumed.delete(flush);
        clearInterval(ticker);
        clearTimeout(timer);
        watches.delete(handle);
        stats.openWatches = watches.size;
      };
      watches.add(handle);
      stats.openWatches = watches.size;
    },
    cancel() {
      cleanup();
    },
  });
  return new Response(body, {
    headers: { "content-type": "application/json", "transfer-encoding": "chunked" },
  });
}
