/**
 * What Ferry's node image holds, in one place: `deno task image` builds it here from Debian
 * packages (`deploy/image.ts`), and `deploy/Dockerfile` is the same recipe for builders with a
 * registry; `tests/deploy/image_spec_test.ts` keeps the Dockerfile equal to this.
 *
 * @module
 */
import { DAEMON_RUN_FLAGS } from "../daemon/runtime/runtime_flags.ts";

/** The Debian release the image is made of. */
export const DEBIAN_SUITE = "bookworm";

/**
 * Debian packages the daemon needs at run time: `ip` (iproute2 plumbing and the bridge set-up),
 * `nft` (masquerade), `nsenter`/`mount` (util-linux), the reference plugins it delegates to and
 * chains (containernetworking-plugins: host-local, portmap, …).
 */
export const IMAGE_PACKAGES = [
  "iproute2",
  "nftables",
  "util-linux",
  "containernetworking-plugins",
];

/**
 * What is removed after the packages are in, not needed when Ferry runs: the package manager and
 * the Perl it needs, package lists and caches, documentation and locales. The shell and core
 * utilities stay (the shim's wrapper is a shell script run through `env`).
 */
export const IMAGE_PRUNE = [
  "/usr/bin/apt*",
  "/usr/lib/apt",
  "/etc/apt",
  "/var/lib/apt",
  "/var/cache/apt",
  "/usr/bin/dpkg*",
  "/var/lib/dpkg",
  "/usr/share/dpkg",
  "/etc/dpkg",
  "/usr/bin/perl*",
  "/usr/share/perl*",
  "/usr/lib/x86_64-linux-gnu/perl*",
  "/var/cache/debconf",
  "/usr/share/doc",
  "/usr/share/man",
  "/usr/share/info",
  "/usr/share/locale",
];

/** Where Ferry's code lives in the image (the working directory). */
export const IMAGE_WORKDIR = "/opt/ferry";

/** What of the repository is copied there: the daemon, the shim, their shared library. */
export const IMAGE_SOURCES = ["deno.json", "deno.lock", "lib", "daemon", "cni"];

/** Deno itself, where the image keeps it (the official Deno images put it here too). */
export const IMAGE_DENO = "/usr/bin/deno";

/** The shim bundled at build time, copied to the host by the install step with Deno. */
export const IMAGE_SHIM_BUNDLE = `${IMAGE_WORKDIR}/shim/ferry-shim.js`;

/** The environment of both containers. */
export const IMAGE_ENV: Record<string, string> = {
  DENO_DIR: `${IMAGE_WORKDIR}/.deno`,
  DENO_NO_UPDATE_CHECK: "1",
};

/** Modules whose dependencies are cached in the image (nothing is fetched at run time). */
export const IMAGE_CACHED = ["daemon/wiring/main.ts", "cni/install.ts"];

/** The entrypoint: the daemon, with the flags of `daemon/runtime/runtime_flags.ts`. */
export const IMAGE_ENTRYPOINT = [
  "deno",
  "run",
  ...DAEMON_RUN_FLAGS,
  "--cached-only",
  "daemon/wiring/main.ts",
];

/** The default arguments. */
export const IMAGE_CMD = ["--config", "/etc/ferry/config.json"];
