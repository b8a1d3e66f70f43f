/**
 * Real network namespaces for the demo and the tests: unique names, always removed, also when
 * the body throws. Deleting a namespace also destroys the veth pairs that have an end inside it.
 *
 * @module
 */

/** A namespace made for one demo or test. */
export interface TestNetns {
  /** Its name under /var/run/netns. */
  name: string;
  /** Its path, as CNI_NETNS carries it. */
  path: string;
}

/** Runs a command, throwing with its stderr when it fails. */
export async function run(cmd: string, ...args: string[]): Promise<string> {
  const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).output();
  if (!out.success) {
    throw new Error(`${cmd} ${args.join(" ")} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  return new TextDecoder().decode(out.stdout);
}

/** A short random token for unique names. */
export function uniqueToken(): string {
  return crypto.randomUUID().replaceAll("-", "").slice(0, 8);
}

/** True when running as root (real namespaces need it). */
export const IS_ROOT = Deno.uid() === 0;

/**
 * Creates `count` namespaces, runs `fn`, and deletes them whatever happens.
 *
 * @example
 * ```ts
 * await withNetns(2, async ([a, b]) => { … });
 * ```
 */
export async function withNetns<T>(
  count: number,
  fn: (ns: TestNetns[]) => Promise<T>,
  prefix = "fyt",
): Promise<T> {
  const made: TestNetns[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const name = `${prefix}-${uniqueToken()}`;
      await run("ip", "netns", "add", name);
      made.push({ name, path: `/var/run/netns/${name}` });
    }
    return await fn(made);
  } finally {
    for (const ns of made) await run("ip", "netns", "del", ns.name).catch(() => {});
  }
}

/** Runs `ip` with `args` inside a namespace. */
export function ipIn(ns: TestNetns, ...args: string[]): Promise<string> {
  return run("ip", "-n", ns.name, ...args);
}

/** True when namespace `ns` has a link called `name`. */
export async function linkInNetns(ns: TestNetns, name: string): Promise<boolean> {
  const out = await new Deno.Command("ip", {
    args: ["-n", ns.name, "link", "show", "dev", name],
    stdout: "null",
    stderr: "null",
  }).output();
  return out.success;
}

/** True when the host namespace has a link of that name. */
export async function hostLinkExists(name: string): Promise<boolean> {
  const out = await new Deno.Command("ip", {
    args: ["link", "show", "dev", name],
    stdout: "null",
    stderr: "null",
  })
    .output();
  return out.success;
}

/**
 * True when one ICMP echo to `address` is answered within 2 s; sent from the host, or from inside
 * `from` when given. Only loopback and the project's own namespaces are ever pinged.
 */
export async function pingOnce(address: string, from?: TestNetns): Promise<boolean> {
  const ping = ["ping", "-c", "1", "-W", "2", address];
  const [cmd, args] = from
    ? ["ip", ["netns", "exec", from.name, ...ping]]
    : [ping[0], ping.slice(1)];
  const out = await new Deno.Command(cmd, { args, stdout: "null", stderr: "null" }).output();
  return out.success;
}

/** Runs `fn` with a fresh temporary directory, removed afterwards whatever happens. */
export async function withTempDir<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix: "ferry-" });
  try {
    return await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * Creates a veth pair with both ends in the host namespace and up (a master for macvlan tests that
 * carries no traffic off the machine: its peer goes nowhere), runs `fn` with the master's name,
 * and deletes the pair whatever happens.
 */
export async function withMasterLink<T>(fn: (name: string) => Promise<T>): Promise<T> {
  const token = uniqueToken();
  const [name, peer] = [`fym${token}`, `fyp${token}`];
  await run("ip", "link", "add", name, "type", "veth", "peer", "name", peer);
  try {
    await run("ip", "link", "set", name, "up");
    await run("ip", "link", "set", peer, "up");
    return await fn(name);
  } finally {
    await run("ip", "link", "del", name).catch(() => {});
  }
}

/** True when the kernel can create links of `kind` (ipvlan is a module some kernels lack). */
export async function kernelSupports(kind: "macvlan" | "ipvlan"): Promise<boolean> {
  if (!IS_ROOT) return false;
  return await withMasterLink(async (master) => {
    const probe = `fyk${uniqueToken()}`;
    const out = await new Deno.Command("ip", {
      args: ["link", "add", "link", master, "name", probe, "type", kind],
      stderr: "null",
    }).output();
    if (out.success) await run("ip", "link", "del", probe).catch(() => {});
    return out.success;
  });
}
