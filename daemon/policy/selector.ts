/**
 * Kubernetes label selectors (`matchLabels` and `matchExpressions` with In, NotIn, Exists,
 * DoesNotExist), evaluated as the API defines them: every requirement must hold; an empty
 * selector selects everything; an absent one (where the API allows absence) is the caller's to
 * interpret. Pure.
 *
 * @module
 */
import type { LabelSelector } from "kubernetes-types/meta/v1.d.ts";

/** Labels of an object. */
export type Labels = Record<string, string>;

/**
 * Whether `selector` selects an object with `labels`. An unknown operator selects nothing (the
 * API server refuses such selectors; a policy that slipped through must not open anything).
 *
 * @example
 * ```ts
 * selects({ matchLabels: { app: "db" } }, { app: "db", tier: "x" }); // true
 * selects({}, {}); // true: the empty selector selects everything
 * ```
 */
export function selects(selector: LabelSelector, labels: Labels): boolean {
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
    if (labels[key] !== value) return false;
  }
  for (const e of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, e.key);
    const values = e.values ?? [];
    switch (e.operator) {
      case "In":
        if (!has || !values.includes(labels[e.key])) return false;
        break;
      case "NotIn":
        if (has && values.includes(labels[e.key])) return false;
        break;
      case "Exists":
        if (!has) return false;
        break;
      case "DoesNotExist":
        if (has) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}
