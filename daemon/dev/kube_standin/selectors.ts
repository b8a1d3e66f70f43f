/**
 * Field and label selectors as the API server parses and applies them. Pure.
 *
 * @module
 */

/** One requirement of a selector. */
export interface Requirement {
  /** Field path or label key. */
  key: string;
  /** The operator. */
  op: "=" | "!=" | "in" | "notin" | "exists" | "!exists";
  /** Values (one for = and !=). */
  values: string[];
}

/** A selector that cannot be parsed, or names an unsupported field (HTTP 400). */
export class SelectorError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "SelectorError";
  }
}

/** Fields every resource supports in field selectors. */
const COMMON_FIELDS = ["metadata.name", "metadata.namespace"];

/** Extra fields per resource plural. */
export const SELECTABLE_FIELDS: Record<string, string[]> = {
  pods: [
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
  ],
  events: [
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "reason",
    "type",
    "source",
  ],
  namespaces: ["status.phase"],
};

/**
 * Parses a field selector (`a=b,c!=d`, `==` allowed) for resource `plural`.
 *
 * @throws {SelectorError} for bad syntax or an unsupported field, as the server does.
 */
export function parseFieldSelector(text: string | null, plural: string): Requirement[] {
  if (!text) return [];
  const allowed = [...COMMON_FIELDS, ...(SELECTABLE_FIELDS[plural] ?? [])];
  return text.split(",").filter((s) => s !== "").map((term) => {
    const m = /^([^=!]+)(==|=|!=)(.*)$/.exec(term);
    if (!m) throw new SelectorError(`invalid field selector term ${JSON.stringify(term)}`);
    const key = m[1].trim();
    if (!allowed.includes(key)) throw new SelectorError(`field label not supported: ${key}`);
    return { key, op: m[2] === "!=" ? "!=" : "=", values: [m[3].trim()] };
  });
}

/**
 * Parses a label selector: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`.
 *
 * @throws {SelectorError} for bad syntax.
 */
export function parseLabelSelector(text: string | null): Requirement[] {
  if (!text) return [];
  const terms: string[] = [];
  let depth = 0, start = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "(") depth++;
    if (text[i] === ")") depth--;
    if (text[i] === "," && depth === 0) {
      terms.push(text.slice(start, i));
      start = i + 1;
    }
  }
  terms.push(text.slice(start));
  return terms.map((t) => t.trim()).filter((t) => t !== "").map((term) => {
    let m = /^([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(term);
    if (m) {
      return {
        key: m[1],
        op: m[2] as "in" | "notin",
        values: m[3].split(",").map((v) => v.trim()),
      };
    }
    m = /^([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)$/.exec(term);
    if (m) return { key: m[1], op: m[2] === "!=" ? "!=" : "=", values: [m[3]] };
    m = /^(!?)([\w./-]+)$/.exec(term);
    if (m) return { key: m[2], op: m[1] ? "!exists" : "exists", values: [] };
    throw new SelectorError(`unable to parse requirement: ${JSON.stringify(term)}`);
  });
}

/** The value of a dotted field path of an object, as a string ("" when absent). */
export function fieldValue(obj: unknown, path: string): string {
  let cur: unknown = obj;
  for (const part of path.split(".")) {
    cur = cur && typeof cur === "object" ? (cur as Record<string, unknown>)[part] : undefined;
  }
  if (cur === undefined || cur === null) return path === "spec.hostNetwork" ? "false" : "";
  return String(cur);
}

/** True when `value` (undefined: absent) satisfies `req`. */
function satisfies(req: Requirement, value: string | undefined): boolean {
  switch (req.op) {
    case "=":
      return value !== undefined && value === req.values[0];
    case "!=":
      return value === undefined || value !== req.values[0];
    case "in":
      return value !== undefined && req.values.includes(value);
    case "notin":
      return value === undefined || !req.values.includes(value);
    case "exists":
      return value !== undefined;
    case "!exists":
      return value === undefined;
  }
}

/** True when `obj` matches every field requirement and every label requirement. */
export function matchesSelectors(
  obj: Record<string, unknown>,
  fields: Requirement[],
  labels: Requirement[],
): boolean {
  const objLabels = ((obj.metadata as { labels?: Record<string, string> } | undefined)?.labels) ??
    {};
  return fields.every((r) => satisfies(r, fieldValue(obj, r.key))) &&
    labels.every((r) => satisfies(r, objLabels[r.key]));
}
