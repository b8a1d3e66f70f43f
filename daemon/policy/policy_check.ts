/**
 * What makes a NetworkPolicy spec (a MultiNetworkPolicy's is one) enforceable, pure: every CIDR
 * and `except` an address prefix (each except inside its CIDR), every port a number from 1 to
 * 65535 or a port name, every `endPort` a number from the port to 65535, every protocol TCP, UDP
 * or SCTP, every selector one the API would take, every policy type Ingress or Egress, and every
 * list and object of the shape the API defines. The API server checks a NetworkPolicy so; a
 * MultiNetworkPolicy is a custom resource whose schema cannot check everything, so its spec is
 * checked here before anything of it is compiled.
 *
 * A policy that fails is never applied in part: it is replaced by {@link failClosed}, which still
 * isolates the pods it selects, with none of its rules (a policy that selects a pod isolates it;
 * an unreadable one must not open it).
 *
 * @module
 */
import type { LabelSelector } from "kubernetes-types/meta/v1.d.ts";
import type { NetworkPolicySpec } from "kubernetes-types/networking/v1.d.ts";
import { cidrContains, parseCidr } from "../ipam/cidr.ts";

const isObject = (x: unknown): x is Record<string, unknown> =>
  typeof x === "object" && x !== null && !Array.isArray(x);

/** A port name as the API takes it (IANA_SVC_NAME): 1-15 of a-z, 0-9, `-`, with a letter. */
const PORT_NAME = /^(?=.*[a-z])[a-z0-9]([a-z0-9]|-(?=[a-z0-9])){0,14}$/;
/** A label key: an optional DNS prefix and a name of at most 63 characters. */
const LABEL_KEY =
  /^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
/** A label value: empty, or at most 63 characters. */
const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/;
const OPERATORS = new Set(["In", "NotIn", "Exists", "DoesNotExist"]);
const PROTOCOLS = new Set(["TCP", "UDP", "SCTP"]);

const isPort = (n: unknown): n is number =>
  Number.isInteger(n) && (n as number) >= 1 &&
  (n as number) <= 65535;

/** What is wrong with a label selector at `where` (nothing: it is one the API takes). */
export function selectorProblems(selector: unknown, where: string): string[] {
  if (selector === undefined || selector === null) return [];
  if (!isObject(selector)) return [`${where} is not a label selector`];
  const out: string[] = [];
  const { matchLabels, matchExpressions } = selector as LabelSelector & Record<string, unknown>;
  if (matchLabels !== undefined && matchLabels !== null) {
    if (!isObject(matchLabels)) out.push(`${where}.matchLabels is not a map`);
    else {
      for (const [k, v] of Object.entries(matchLabels)) {
        if (!LABEL_KEY.test(k)) {
          out.push(`${where}.matchLabels key ${JSON.stringify(k)} is invalid`);
        }
        if (typeof v !== "string" || !LABEL_VALUE.test(v)) {
          out.push(`${where}.matchLabels[${JSON.stringify(k)}] is not a label value`);
        }
      }
    }
  }
  if (matchExpressions !== undefined && matchExpressions !== null) {
    if (!Array.isArray(matchExpressions)) out.push(`${where}.matchExpressions is not a list`);
    else {
      matchExpressions.forEach((e: unknown, i) => {
        const at = `${where}.matchExpressions[${i}]`;
        if (!isObject(e)) return out.push(`${at} is not an object`);
        if (typeof e.key !== "string" || !LABEL_KEY.test(e.key)) out.push(`${at}.key is invalid`);
        if (typeof e.operator !== "string" || !OPERATORS.has(e.operator)) {
          return out.push(
            `${at}.operator ${JSON.stringify(e.operator)} is not In, NotIn, Exists or DoesNotExist`,
          );
        }
        const values = e.values ?? [];
        if (
          !Array.isArray(values) ||
          values.some((v) => typeof v !== "string" || !LABEL_VALUE.test(v))
        ) {
          return out.push(`${at}.values is not a list of label values`);
        }
        const wants = e.operator === "In" || e.operator === "NotIn";
        if (wants && !values.length) out.push(`${at}: ${e.operator} needs values`);
        if (!wants && values.length) out.push(`${at}: ${e.operator} takes no values`);
      });
    }
  }
  return out;
}

/** What is wrong with an ipBlock at `where`. */
function blockProblems(block: unknown, where: string): string[] {
  if (!isObject(block)) return [`${where} is not an object`];
  let cidr;
  try {
    if (typeof block.cidr !== "string") throw new Error("no cidr");
    cidr = parseCidr(block.cidr);
  } catch {
    return [`${where}.cidr ${JSON.stringify(block.cidr)} is not a CIDR`];
  }
  const except = block.except ?? [];
  if (!Array.isArray(except)) return [`${where}.except is not a list`];
  const out: string[] = [];
  except.forEach((e: unknown, i) => {
    try {
      if (typeof e !== "string") throw new Error("not text");
      const x = parseCidr(e);
      const inside = x.prefix >= cidr.prefix && cidrContains(cidr, x.network);
      if (!inside) {
        out.push(`${where}.except[${i}] ${JSON.stringify(e)} is not inside ${block.cidr}`);
      }
    } catch {
      out.push(`${where}.except[${i}] ${JSON.stringify(e)} is not a CIDR`);
    }
  });
  return out;
}

/** What is wrong with one peer at `where`. */
function peerProblems(peer: unknown, where: string): string[] {
  if (!isObject(peer)) return [`${where} is not an object`];
  const out = [
    ...selectorProblems(peer.podSelector, `${where}.podSelector`),
    ...selectorProblems(peer.namespaceSelector, `${where}.namespaceSelector`),
  ];
  const selectors = (peer.podSelector ?? peer.namespaceSelector) !== undefined;
  if (peer.ipBlock !== undefined && peer.ipBlock !== null) {
    if (selectors) out.push(`${where}: ipBlock cannot be given with selectors`);
    out.push(...blockProblems(peer.ipBlock, `${where}.ipBlock`));
  } else if (!selectors) out.push(`${where} names no peer`);
  return out;
}

/** What is wrong with one port at `where`. */
function portProblems(port: unknown, where: string): string[] {
  if (!isObject(port)) return [`${where} is not an object`];
  const out: string[] = [];
  if (port.protocol !== undefined && port.protocol !== null) {
    if (typeof port.protocol !== "string" || !PROTOCOLS.has(port.protocol)) {
      out.push(`${where}.protocol ${JSON.stringify(port.protocol)} is not TCP, UDP or SCTP`);
    }
  }
  const p = port.port;
  const numeric = typeof p === "string" && /^\d+$/.test(p) ? Number(p) : p;
  if (p !== undefined && p !== null) {
    if (typeof numeric === "number") {
      if (!isPort(numeric)) out.push(`${where}.port ${JSON.stringify(p)} is not 1-65535`);
    } else if (typeof p !== "string" || !PORT_NAME.test(p)) {
      out.push(`${where}.port ${JSON.stringify(p)} is neither a port number nor a port name`);
    }
  }
  if (port.endPort !== undefined && port.endPort !== null) {
    if (typeof numeric !== "number") out.push(`${where}.endPort needs a numeric port`);
    else if (!isPort(port.endPort) || port.endPort < numeric) {
      out.push(`${where}.endPort ${JSON.stringify(port.endPort)} is not from the port to 65535`);
    }
  }
  return out;
}

/** What is wrong with the rules of one direction. */
function rulesProblems(rules: unknown, direction: "ingress" | "egress"): string[] {
  if (rules === undefined || rules === null) return [];
  if (!Array.isArray(rules)) return [`${direction} is not a list`];
  const field = direction === "ingress" ? "from" : "to";
  return rules.flatMap((r: unknown, i) => {
    const at = `${direction}[${i}]`;
    if (!isObject(r)) return [`${at} is not an object`];
    const peers = r[field] ?? [];
    const ports = r.ports ?? [];
    return [
      ...(Array.isArray(peers)
        ? peers.flatMap((p, j) => peerProblems(p, `${at}.${field}[${j}]`))
        : [`${at}.${field} is not a list`]),
      ...(Array.isArray(ports)
        ? ports.flatMap((p, j) => portProblems(p, `${at}.ports[${j}]`))
        : [`${at}.ports is not a list`]),
    ];
  });
}

/**
 * What is wrong with a policy's spec; empty when it can be enforced as written.
 *
 * @example
 * ```ts
 * specProblems({ podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: "not-a-cidr" } }] }] });
 * // ['ingress[0].from[0].ipBlock.cidr "not-a-cidr" is not a CIDR']
 * ```
 */
export function specProblems(spec: unknown): string[] {
  if (!isObject(spec)) return ["spec is missing or not an object"];
  const out = selectorProblems(spec.podSelector, "podSelector");
  const types = spec.policyTypes;
  if (types !== undefined && types !== null) {
    if (!Array.isArray(types) || types.some((t) => t !== "Ingress" && t !== "Egress")) {
      out.push("policyTypes is not a list of Ingress and Egress");
    }
  }
  return [
    ...out,
    ...rulesProblems(spec.ingress, "ingress"),
    ...rulesProblems(spec.egress, "egress"),
  ];
}

/**
 * What an invalid policy is enforced as: it still isolates what it selects, for the types it
 * declares (both when its types cannot be read), with none of its rules. A selector that cannot
 * be read selects every pod of its namespace.
 *
 * @example
 * ```ts
 * failClosed({ podSelector: { matchLabels: { app: "db" } }, ingress: [{ from: [{ ipBlock: { cidr: "x" } }] }] });
 * // { podSelector: { matchLabels: { app: "db" } }, policyTypes: ["Ingress"] }
 * ```
 */
export function failClosed(spec: unknown): NetworkPolicySpec {
  const s = isObject(spec) ? spec : {};
  const selector = selectorProblems(s.podSelector, "podSelector").length
    ? {}
    : (s.podSelector as LabelSelector | undefined) ?? {};
  const types = s.policyTypes;
  let policyTypes: string[];
  if (
    Array.isArray(types) && types.length && types.every((t) => t === "Ingress" || t === "Egress")
  ) {
    policyTypes = [...new Set(types as string[])];
  } else if (types === undefined || types === null || (Array.isArray(types) && !types.length)) {
    // Implied: Ingress, and Egress when it has egress rules (valid or not).
    policyTypes = Array.isArray(s.egress) && s.egress.length ? ["Ingress", "Egress"] : ["Ingress"];
  } else policyTypes = ["Ingress", "Egress"];
  return { podSelector: selector, policyTypes };
}

/**
 * A policy as it is enforced: itself when its spec is valid, else {@link failClosed} (with the
 * problems found).
 */
export function checkedPolicy<P extends { spec?: NetworkPolicySpec }>(
  p: P,
): { policy: P; problems: string[] } {
  const problems = specProblems(p.spec);
  return problems.length
    ? { policy: { ...p, spec: failClosed(p.spec) }, problems }
    : { policy: p, problems };
}

/** A policy refused as invalid, as an Event's subject. */
export interface RefusedPolicy {
  /** `NetworkPolicy` or `MultiNetworkPolicy`. */
  kind: string;
  /** Its API version. */
  apiVersion: string;
  /** Its namespace. */
  namespace?: string;
  /** Its name. */
  name: string;
  /** Its UID. */
  uid?: string;
}
