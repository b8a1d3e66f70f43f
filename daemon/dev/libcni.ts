/**
 * The reference CNI runtime library as a client, for tests and benchmarks: a small Go program
 * (`tests/integration/libcni_driver/`) built against Debian's libcni
 * (`golang-github-appc-cni-dev`), driving conflists exactly as containerd and CRI-O do. One
 * operation per process for the tests; batches with a concurrency (`BENCH`) for the benchmark,
 * timed inside the driver so process starts of the client are not counted.
 *
 * @module
 */

const DRIVER_SRC = new URL("../../tests/integration/libcni_driver/", import.meta.url).pathname;

/** True when Debian's libcni sources and Go are installed (`deno task setup` does it). */
export const HAVE_LIBCNI: boolean = await Deno.stat(
  "/usr/share/gocode/src/github.com/containernetworking/cni/libcni",
).then(() => Deno.stat("/usr/bin/go")).then(() => true, () => false);

/**
 * Builds the driver into `dir` (with a Go build cache there) and returns its path.
 * @throws Error with the compiler's output when the build fails.
 */
export async function buildLibcniDriver(dir: string): Promise<string> {
  const out = `${dir}/libcni_driver`;
  const res = await new Deno.Command("go", {
    args: ["build", "-o", out, "."],
    cwd: DRIVER_SRC,
    env: {
      GOPATH: "/usr/share/gocode",
      GO111MODULE: "off",
      GOFLAGS: "",
      GOCACHE: `${dir}/gocache`,
    },
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!res.success) throw new Error(`go build failed: ${new TextDecoder().decode(res.stderr)}`);
  return out;
}

/** One operation of a batch. */
export interface LibcniOp {
  /** ADD, DEL or CHECK of `conflist`; EXEC runs `program` with only `env` and `stdin`. */
  cmd: "ADD" | "DEL" | "CHECK" | "EXEC";
  /** The conflist file (not for EXEC). */
  conflist?: string;
  /** Container ID. */
  id?: string;
  /** Network namespace path. */
  netns?: string;
  /** Interface name. */
  ifname?: string;
  /** CNI_ARGS (`K=V;K=V`). */
  args?: string;
  /** For EXEC: the program. */
  program?: string;
  /** For EXEC: its whole environment (`K=V`). */
  env?: string[];
  /** For EXEC: its stdin. */
  stdin?: string;
}

/** What a batch did: its wall time and each operation's time and error, in input order. */
export interface LibcniBatchResult {
  /** From the first operation's start to the last one's end, in ms. */
  wallMs: number;
  /** Per operation. */
  ops: { ms: number; error?: string }[];
}

/**
 * Runs `ops` through the driver at `driver`, `concurrency` at a time (libcni calls from
 * goroutines, as a runtime makes them).
 */
export async function runLibcniBatch(
  driver: string,
  batch: { cniPath: string; cacheDir: string; concurrency: number; ops: LibcniOp[] },
): Promise<LibcniBatchResult> {
  const child = new Deno.Command(driver, {
    args: ["BENCH"],
    clearEnv: true,
    env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" },
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(JSON.stringify(batch)));
  await writer.close();
  const out = await child.output();
  if (!out.success) {
    throw new Error(`libcni driver failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  return JSON.parse(new TextDecoder().decode(out.stdout));
}
