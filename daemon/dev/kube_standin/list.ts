/**
 * The stand-in's lists, as a kube-apiserver answers them: from the storage (most recent, or an
 * exact older version, page by page) or from its watch cache (any version: whole, and as of where
 * a stalled cache stopped).
 *
 * @module
 */
import type { KubeObject } from "../../k8s/client.ts";
import type { ResourceType } from "../../k8s/resources.ts";
import { answer } from "./answers.ts";
import { type AnswerView, checkView, viewed, viewedListType } from "./media.ts";
import { ApiFailure, type ObjectStore } from "./object_store.ts";
import {
  matchesSelectors,
  parseFieldSelector,
  parseLabelSelector,
  type Requirement,
} from "./selectors.ts";

/** What a list reads: the storage, the counters, and where a stalled watch cache stopped. */
export interface ListContext {
  /** The storage. */
  store: ObjectStore;
  /** Lists answered from the watch cache, by resource. */
  stats: { listsFromCache: Record<string, number> };
  /** Where a stalled watch cache stopped (undefined: it follows the storage). */
  cacheRv: number | undefined;
}

/** A request's field and label selectors. */
export function selectorsOf(rt: ResourceType, url: URL): [Requirement[], Requirement[]] {
  return [
    parseFieldSelector(url.searchParams.get("fieldSelector"), rt.plural),
    parseLabelSelector(url.searchParams.get("labelSelector")),
  ];
}

/**
 * A list: pages (`limit`/`continue`, 410 once compacted), exact older versions, and any version
 * (`resourceVersion=0`) whole from the watch cache, as of where a stalled cache stopped.
 *
 * @throws {ApiFailure} 400, 410 or 504 as the real server answers.
 */
export function listResponse(
  ctx: ListContext,
  rt: ResourceType,
  namespace: string | undefined,
  url: URL,
  view: AnswerView,
): Response {
  checkView(view, true, rt.kind);
  const [fields, labels] = selectorsOf(rt, url);
  const limit = Number(url.searchParams.get("limit") ?? "0");
  const cont = url.searchParams.get("continue");
  const rvParam = url.searchParams.get("resourceVersion");
  const match = url.searchParams.get("resourceVersionMatch");
  let atRv = ctx.store.rv;
  let after = "";
  if (cont) {
    let token: { rv: number; after: string };
    try {
      token = JSON.parse(atob(cont));
    } catch {
      throw new ApiFailure(400, "BadRequest", "continue key is not valid");
    }
    if (token.rv < ctx.store.compactedRv) {
      throw new ApiFailure(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
      );
    }
    [atRv, after] = [token.rv, token.after];
  } else if (rvParam && rvParam !== "0") {
    const n = Number(rvParam);
    if (!Number.isInteger(n) || n < 0) {
      throw new ApiFailure(400, "BadRequest", `invalid resource version ${rvParam}`);
    }
    if (n > ctx.store.rv) {
      throw new ApiFailure(
        504,
        "Timeout",
        `Too large resource version: ${n}, current: ${ctx.store.rv}`,
      );
    }
    if (match === "Exact") atRv = n;
  }
  // Any version ("0") comes from the watch cache, whole (the page size does not apply), and as
  // of where a stalled cache stopped.
  const fromCache = rvParam === "0" && !cont;
  if (fromCache) {
    ctx.stats.listsFromCache[rt.plural] = (ctx.stats.listsFromCache[rt.plural] ?? 0) + 1;
    if (ctx.cacheRv !== undefined) atRv = Math.min(atRv, ctx.cacheRv);
  }
  const keyOf = (o: KubeObject) => `${o.metadata?.namespace ?? ""}/${o.metadata!.name}`;
  let items = ctx.store.snapshot(rt, namespace, atRv).filter((o) =>
    matchesSelectors(o as Record<string, unknown>, fields, labels)
  );
  if (after) items = items.filter((o) => keyOf(o) > after);
  const metadata: Record<string, unknown> = { resourceVersion: String(atRv) };
  if (limit > 0 && items.length > limit && !fromCache) {
    metadata.remainingItemCount = items.length - limit;
    items = items.slice(0, limit);
    metadata.continue = btoa(JSON.stringify({ rv: atRv, after: keyOf(items[items.length - 1]) }));
  }
  const type = viewedListType(view, {
    kind: `${rt.kind}List`,
    apiVersion: rt.group ? `${rt.group}/${rt.version}` : rt.version,
  });
  return answer({ ...type, metadata, items: items.map((o) => viewed(o, view)) });
}
