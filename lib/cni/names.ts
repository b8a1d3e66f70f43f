/**
 * What the runtime's names may look like: the container ID, the interface name and the namespace
 * path end up in file names, link names and iproute2 batch lines, so both the shim and the daemon
 * (whose socket is the trust boundary) check them. No imports: the shim uses it.
 *
 * @module
 */

/** A container ID as libcni accepts it: it names files and links, so nothing else gets through. */
export const CONTAINER_ID_PATTERN = "^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$";
/** A Linux interface name: no whitespace, `/` or `:`, not `.` or `..` (15 bytes checked by the shim). */
export const IFNAME_PATTERN = "^(?!\\.{1,2}$)[^\\s/:]{1,15}$";
/** A namespace path: absolute, no whitespace (it goes into iproute2 batch lines). */
export const NETNS_PATTERN = "^/\\S*$";
