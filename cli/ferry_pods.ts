/**
 * How the CLI finds Ferry on a cluster and what it runs in Ferry's pods: the DaemonSet's label,
 * namespace and container (as `deploy/base/daemonset.yaml` names them) and the command line of
 * the node report (`daemon/tools/node_report.ts`, in the image under its working directory).
 *
 * @module
 */
import { DAEMON_RUN_FLAGS } from "../daemon/runtime/runtime_flags.ts";
import { IMAGE_DENO, IMAGE_WORKDIR } from "../deploy/image_spec.ts";
import { NODE_CONFIG_FILE } from "../daemon/tools/node_report.ts";

/** The namespace Ferry is installed in, unless `-n` says otherwise. */
export const FERRY_NAMESPACE = "kube-system";

/** The label selector of Ferry's DaemonSet pods. */
export const FERRY_SELECTOR = "app.kubernetes.io/name=ferry";

/** The container of the daemon in Ferry's pod. */
export const FERRY_CONTAINER = "ferry";

/**
 * How the scripts run in the image: the daemon's flags (its V8 tuning aside) and, as its
 * entrypoint, only what the image has cached (its root filesystem is read-only, nothing is fetched).
 */
const NODE_RUN_FLAGS = [
  ...DAEMON_RUN_FLAGS.filter((f) => !f.startsWith("--v8-flags")),
  "--cached-only",
];

/** The DaemonSet's name. */
export const FERRY_DAEMONSET = "ferry";

/**
 * The command that prints a node's report inside its Ferry pod.
 *
 * @example
 * ```ts
 * await exec.exec(pod, nodeReportArgv(), signal);
 * ```
 */
export function nodeReportArgv(): string[] {
  return [
    IMAGE_DENO,
    "run",
    ...NODE_RUN_FLAGS,
    `${IMAGE_WORKDIR}/daemon/tools/node_report.ts`,
    "stats",
    `--config=${NODE_CONFIG_FILE}`,
  ];
}

/** The command that prints a node's sysdump part inside its Ferry pod (`node_dump.ts`). */
export function nodeDumpArgv(): string[] {
  return [
    IMAGE_DENO,
    "run",
    ...NODE_RUN_FLAGS,
    `${IMAGE_WORKDIR}/daemon/tools/node_dump.ts`,
    `--config=${NODE_CONFIG_FILE}`,
  ];
}
