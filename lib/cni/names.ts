/**
 * What the runtime's names may look like: the container ID, the interface name and the namespace
 * path end up in file names, link names and iproute2 batch lines, so both the shim and the daemon
 * (whose socket is the trust boundary) check them. No imports: the shim uses it.
 *
 * @module
 */

/**
 * The longest container ID accepted. Runtimes use 64 hex digits (containerd, CRI-O, Docker) or
 * UUIDs; the ID names the attachment's record file, so it must leave room in a 255-byte file name.
 */
export const CONTAINER_ID_MAX_LENGTH = 200;
/** The longest namespace path accepted (Linux's PATH_MAX less the terminating NUL). */
export const NETNS_MAX_LENGTH = 4095;
/** A container ID as libcni accepts it: it names files and links, so nothing else gets through. */
export const CONTAINER_ID_PATTERN = "^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$";
/** A Linux interface name: no whitespace, `/` or `:`, not `.` or `..` (15 bytes checked by the shim). */
export const IFNAME_PATTERN = "^(?!\\.{1,2}$)[^\\s/:]{1,15}$";
/** A namespace path: absolute, no whitespace (it goes into iproute2 batch lines). */
export const NETNS_PATTERN = "^/\\S*$";

const CONTAINER_ID = new RegExp(CONTAINER_ID_PATTERN);
const NETNS = new RegExp(NETNS_PATTERN);

/**
 * Why a container ID is refused, or undefined when it is acceptable.
 *
 * @example
 * ```ts
 * containerIdProblem("0123abcd"); // undefined
 * containerIdProblem("a".repeat(500)); // "is 500 characters long (at most 200)"
 * ```
 */
export function containerIdProblem(id: string): string | undefined {
  if (id.length > CONTAINER_ID_MAX_LENGTH) {
    return `is ${id.length} characters long (at most ${CONTAINER_ID_MAX_LENGTH})`;
  }
  if (!CONTAINER_ID.test(id)) return "may hold only letters, digits, '_', '.' and '-'";
  return undefined;
}

/**
 * Why a namespace path is refused, or undefined when it is acceptable.
 *
 * @example
 * ```ts
 * netnsProblem("/var/run/netns/cni-1"); // undefined
 * netnsProblem("/var/run/netns/a b"); // "must be an absolute path without whitespace"
 * ```
 */
export function netnsProblem(path: string): string | undefined {
  if (path.length > NETNS_MAX_LENGTH) return `is longer than ${NETNS_MAX_LENGTH} characters`;
  if (!NETNS.test(path)) return "must be an absolute path without whitespace";
  return undefined;
}
