/**
 * CNI_ARGS: the `K=V;K=V` string container runtimes pass, such as
 * `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=…;K8S_POD_UID=…`.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "./errors.ts";

/**
 * Parses CNI_ARGS into a record. An empty string is no arguments.
 *
 * @throws {CniError} code 4 (invalid environment) for a pair without `=` or with an empty key.
 * @example
 * ```ts
 * parseCniArgs("IgnoreUnknown=1;K8S_POD_NAME=web-0"); // { IgnoreUnknown: "1", K8S_POD_NAME: "web-0" }
 * ```
 */
export function parseCniArgs(raw: string | undefined): Record<string, string> {
  const args: Record<string, string> = {};
  if (!raw) return args;
  for (const pair of raw.split(";")) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    if (eq <= 0) {
      throw new CniError(
        CNI_ERROR.INVALID_ENV,
        "invalid CNI_ARGS",
        `pair ${JSON.stringify(pair)} is not KEY=VALUE`,
      );
    }
    args[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return args;
}

/** The Kubernetes pod identity that container runtimes put in CNI_ARGS. */
export interface PodRef {
  /** K8S_POD_NAMESPACE. */
  namespace: string;
  /** K8S_POD_NAME. */
  name: string;
  /** K8S_POD_UID, when the runtime sends it. */
  uid?: string;
  /** K8S_POD_INFRA_CONTAINER_ID, when the runtime sends it. */
  infraContainerId?: string;
}

/** Reads the pod reference from parsed CNI_ARGS; undefined when namespace or name is absent. */
export function podRefFromArgs(args: Record<string, string>): PodRef | undefined {
  const namespace = args.K8S_POD_NAMESPACE;
  const name = args.K8S_POD_NAME;
  if (!namespace || !name) return undefined;
  const ref: PodRef = { namespace, name };
  if (args.K8S_POD_UID) ref.uid = args.K8S_POD_UID;
  if (args.K8S_POD_INFRA_CONTAINER_ID) ref.infraContainerId = args.K8S_POD_INFRA_CONTAINER_ID;
  return ref;
}
