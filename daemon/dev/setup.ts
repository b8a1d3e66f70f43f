/**
 * Installs what Ferry's demo and tests need from Debian's packages when it is missing (as root;
 * otherwise it says what to install). The `test` and `demo` tasks run it first, so that the
 * README's two commands work on a fresh machine that has only Node and npm.
 *
 * @module
 */

/** A requirement: a path that must exist, and the Debian package that provides it. */
export interface Need {
  path: string;
  pkg: string;
  why: string;
  /**
   * The package's programs the tests and benchmarks start, by their names on PATH, when they are
   * more than (or other than) the path's last part: `nc` for `/bin/nc.openbsd`.
   */
  programs?: string[];
}

/**
 * What the demo, tests and benchmarks need. `tests/daemon/dev/setup_test.ts` reads every program
 * they start from their source and fails naming any this list does not provide.
 */
export const NEEDS: Need[] = [
  {
    path: "/usr/sbin/ip",
    pkg: "iproute2",
    why: "plumbing veth pairs and namespaces; bridge's FDB; ss's TCP counters",
    programs: ["ip", "bridge", "ss"],
  },
  {
    path: "/usr/bin/nsenter",
    pkg: "util-linux",
    why: "running iproute2 inside pod namespaces; prlimit, setpriv and findmnt in tests",
    programs: ["nsenter", "prlimit", "setpriv", "findmnt"],
  },
  {
    path: "/usr/bin/pgrep",
    pkg: "procps",
    why: "finding processes a test left; sysctl inside namespaces",
    programs: ["pgrep", "pkill", "sysctl", "kill"],
  },
  {
    path: "/usr/bin/mount",
    pkg: "mount",
    why: "the sysctl directory's bind mount",
    programs: ["mount", "umount"],
  },
  { path: "/usr/bin/ping", pkg: "iputils-ping", why: "proving host-to-pod reachability" },
  { path: "/usr/sbin/nft", pkg: "nftables", why: "masquerading pod egress" },
  { path: "/usr/bin/python3", pkg: "python3-minimal", why: "making a stale socket in a test" },
  { path: "/usr/bin/iperf3", pkg: "iperf3", why: "TCP throughput between pods (bench:policy)" },
  {
    // OpenBSD's netcat: its -s, -z and -k are what the forged-source check and bench:repair use.
    path: "/bin/nc.openbsd",
    pkg: "netcat-openbsd",
    why: "UDP datagrams of the forged-source check (as in its test pods); bench:repair's probes",
    programs: ["nc"],
  },
  { path: "/usr/bin/curl", pkg: "curl", why: "scraping /metrics from inside a pod" },
  {
    path: "/usr/lib/cni/tuning",
    pkg: "containernetworking-plugins",
    why: "chaining reference plugins",
  },
  { path: "/usr/bin/go", pkg: "golang-go", why: "building the libcni test driver" },
  {
    path: "/usr/sbin/debootstrap",
    pkg: "debootstrap",
    why: "building the node image (deno task image; the DaemonSet test on the real kubelet)",
  },
  {
    path: "/usr/share/gocode/src/github.com/containernetworking/cni/libcni",
    pkg: "golang-github-appc-cni-dev",
    why: "the reference CNI runtime library",
  },
];

/**
 * The names of the programs `needs` provide (each need's program, or its path's last part).
 *
 * @example
 * ```ts
 * providedPrograms([{ path: "/usr/sbin/ip", pkg: "iproute2", why: "" }]); // Set {"ip"}
 * ```
 */
export function providedPrograms(needs: readonly Need[]): Set<string> {
  return new Set(needs.flatMap((n) => n.programs ?? [n.path.slice(n.path.lastIndexOf("/") + 1)]));
}

async function exists(path: string): Promise<boolean> {
  return await Deno.stat(path).then(() => true, () => false);
}

/** Installs the missing packages; resolves to the list of what is still missing. */
export async function setup(): Promise<Need[]> {
  const missing: Need[] = [];
  for (const n of NEEDS) if (!(await exists(n.path))) missing.push(n);
  if (missing.length === 0) return [];
  if (Deno.uid() !== 0) {
    console.error(
      `missing (install as root): apt-get install ${missing.map((m) => m.pkg).join(" ")}`,
    );
    return missing;
  }
  console.error(`installing ${missing.map((m) => m.pkg).join(" ")} …`);
  const env = { DEBIAN_FRONTEND: "noninteractive" };
  const apt = (...args: string[]) =>
    new Deno.Command("apt-get", { args, env, stdout: "null", stderr: "inherit" }).output();
  await apt("update", "-qq");
  const res = await apt(
    "install",
    "-y",
    "-qq",
    "--no-install-recommends",
    ...new Set(missing.map((m) => m.pkg)),
  );
  if (!res.success) console.error("apt-get install failed");
  const still: Need[] = [];
  for (const n of missing) if (!(await exists(n.path))) still.push(n);
  return still;
}

if (import.meta.main) {
  const still = await setup();
  for (const n of still) console.error(`still missing: ${n.path} (${n.pkg}, for ${n.why})`);
}
