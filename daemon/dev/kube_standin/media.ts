/**
 * What a request's `Accept` asks the stand-in to answer: whole objects, or only their metadata
 * (`PartialObjectMetadata` and `PartialObjectMetadataList` of `meta.k8s.io/v1`, as client-go's
 * metadata client asks), with the real server's 406 answers for what cannot be served. Pure.
 *
 * @module
 */
import type { KubeObject } from "../../k8s/client.ts";
import { ApiFailure } from "./object_store.ts";

/** The form of an answer's objects. */
export type AnswerView = "whole" | "metadata" | "metadataList";

/**
 * The view an `Accept` header asks for. The first media range naming a view (`as=…`) decides,
 * as on the real server: a plain `application/json` after it is no fallback for a view that does
 * not fit the request (see {@link checkView}). An `as` the stand-in does not serve is 406.
 *
 * @example
 * ```ts
 * answerView("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"); // "metadata"
 * answerView(null); // "whole"
 * ```
 */
export function answerView(accept: string | null): AnswerView {
  for (const range of (accept ?? "").split(",")) {
    const params = new Map(
      range.split(";").slice(1).map((p) => {
        const [k, v = ""] = p.trim().split("=");
        return [k.trim(), v.trim()] as const;
      }),
    );
    const as = params.get("as");
    if (as === undefined) continue;
    const known = params.get("g") === "meta.k8s.io" && params.get("v") === "v1";
    if (known && as === "PartialObjectMetadata") return "metadata";
    if (known && as === "PartialObjectMetadataList") return "metadataList";
    throw new ApiFailure(
      406,
      "NotAcceptable",
      `only the following media types are accepted: application/json (the stand-in does not ` +
        `serve as=${as};g=${params.get("g")};v=${params.get("v")})`,
    );
  }
  return "whole";
}

/**
 * Refuses a view that does not fit the answer (406, the real server's messages): a list asked
 * for as one object's metadata, one object (or a watch's) asked for as a list. A watch asking for
 * a list of metadata gets an empty stream from the real server; the stand-in refuses it.
 */
export function checkView(view: AnswerView, isList: boolean, kind: string): void {
  if (isList && view === "metadata") {
    throw new ApiFailure(
      406,
      "NotAcceptable",
      `you requested PartialObjectMetadata, but the requested object is a list (${kind}List)`,
    );
  }
  if (!isList && view === "metadataList") {
    throw new ApiFailure(
      406,
      "NotAcceptable",
      `you requested PartialObjectMetadataList, but the requested object is not a list (${kind})`,
    );
  }
}

/** An object as a view shows it: itself, or its metadata as `PartialObjectMetadata`. */
export function viewed(obj: KubeObject, view: AnswerView): KubeObject {
  if (view === "whole") return obj;
  return { kind: "PartialObjectMetadata", apiVersion: "meta.k8s.io/v1", metadata: obj.metadata };
}

/** The kind and apiVersion of a list in a view, given the whole list's. */
export function viewedListType(
  view: AnswerView,
  whole: { kind: string; apiVersion: string },
): { kind: string; apiVersion: string } {
  return view === "whole"
    ? whole
    : { kind: "PartialObjectMetadataList", apiVersion: "meta.k8s.io/v1" };
}
