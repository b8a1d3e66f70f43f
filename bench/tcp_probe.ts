/**
 * TCP between two network namespaces, for the data-path benchmark (`bench/dataplane_bench.ts`):
 * servers started in one namespace (a Python acceptor that closes each connection on 5202, a
 * one-byte echo on 5203, a discard sink on 5204) and three kinds of work from another, each one
 * client process measured in windows ({@link probeWindows}): throughput (one stream), request/
 * response rate (one connection, one byte each way at a time, as netperf's TCP_RR) and new
 * connections per second (connect and close, as TCP_CRR). Clients and servers are pinned to CPUs
 * of their own ({@link PROBE_CPUS}). Only the two namespaces given carry the traffic; the
 * client's namespace may reuse its ports in TIME_WAIT (its own sysctls).
 *
 * @module
 */
import { run } from "../daemon/dev/netns.ts";

/** One measurement of a path. */
export interface TcpSample {
  /** Throughput, one stream (Gbit/s). */
  gbps: number;
  /** One-byte request/response round trips per second on one connection. */
  rrPerS: number;
  /** New connections (connect, accept, close) per second. */
  connsPerS: number;
  /**
   * iperf3 throughput per CPU-second of its client and server (Gbit per second of their user and
   * system time, iperf3's own count): what the runs with iperf3 measured (the results of
   * bench:dataplane before its windowed probes); absent from the windowed probes' samples.
   */
  gbitPerCpuS?: number;
}

/** How long each measurement runs (s); the windowed probes' windows are all of one length. */
export interface ProbeDurations {
  /** Throughput (iperf3's `-t` in the runs before the windowed probes). */
  throughputS: number;
  /** The request/response loop. */
  rrS: number;
  /** The connect loop. */
  connS: number;
}

/** The ports the servers listen on. */
export const PROBE_PORTS = { accept: 5202, echo: 5203, discard: 5204 } as const;

const SERVER_PY = `
import socket, threading
def sink(c):
    buf = bytearray(1 << 20)
    while c.recv_into(buf):
        pass
    c.close()
def serve(port, echo):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('0.0.0.0', port))
    s.listen(512)
    while True:
        c, _ = s.accept()
        if echo == 'discard':
            threading.Thread(target=sink, args=(c,), daemon=True).start()
            continue
        if not echo:
            c.close()
            continue
        def pong(c=c):
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                b = c.recv(1)
                if not b:
                    break
                c.sendall(b)
            c.close()
        threading.Thread(target=pong, daemon=True).start()
threading.Thread(target=serve, args=(${PROBE_PORTS.echo}, True), daemon=True).start()
threading.Thread(target=serve, args=(${PROBE_PORTS.discard}, 'discard'), daemon=True).start()
serve(${PROBE_PORTS.accept}, False)
`;

const CLIENT_PY = `
import socket, sys, time
mode, ip, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
n = 0
if mode == 'rr':
    s = socket.create_connection((ip, ${PROBE_PORTS.echo}), timeout=2)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    end = time.time() + secs
    while time.time() < end:
        s.sendall(b'x')
        if s.recv(1) != b'x':
            raise SystemExit('echo broke')
        n += 1
    s.close()
elif mode == 'conn':
    end = time.time() + secs
    while time.time() < end:
        s = socket.create_connection((ip, ${PROBE_PORTS.accept}), timeout=2)
        s.close()
        n += 1
else:
    try:
        socket.create_connection((ip, int(mode)), timeout=float(secs)).close()
        n = 1
    except OSError:
        n = 0
print(n / secs if mode in ('rr', 'conn') else n)
`;

/**
 * The windowed client: one process, one kind of work (`bytes`: one stream of 256 KiB writes to
 * the discard server; `rr`: one byte each way at a time on one connection; `conn`: connect and
 * close), run in windows of `secs`: before each it prints `ready` and waits for a line on its
 * stdin, after each it prints the work done and the time it took as JSON.
 */
const WINDOWS_PY = `
import json, socket, sys, time
mode, ip, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = None
if mode == 'bytes':
    s = socket.create_connection((ip, ${PROBE_PORTS.discard}), timeout=5)
    chunk = b'x' * (256 << 10)
elif mode == 'rr':
    s = socket.create_connection((ip, ${PROBE_PORTS.echo}), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    print('ready', flush=True)
    if sys.stdin.readline().strip() != 'go':
        break
    n = 0
    start = time.perf_counter()
    end = start + secs
    if mode == 'bytes':
        while time.perf_counter() < end:
            s.sendall(chunk)
            n += len(chunk)
    elif mode == 'rr':
        while time.perf_counter() < end:
            s.sendall(b'x')
            if s.recv(1) != b'x':
                raise SystemExit('echo broke')
            n += 1
    else:
        while time.perf_counter() < end:
            c = socket.create_connection((ip, ${PROBE_PORTS.accept}), timeout=5)
            c.close()
            n += 1
    print(json.dumps({'n': n, 'secs': time.perf_counter() - start}), flush=True)
if s:
    s.close()
`;

/** The work a windowed probe does: bytes streamed, request/response round trips, connections. */
export type WindowWork = "bytes" | "rr" | "conn";

/**
 * One process in namespace `from` doing `work` against `ip` (servers of
 * {@link startProbeServers} there) in `windows` windows of `secs` each, and `before(i)` awaited
 * before window `i` while the work pauses (to change what the path passes through between two
 * windows); the rate of each window (bytes: Gbit/s; rr and conn: per second). One connection and
 * one process for the whole run: two adjacent windows differ in little but what `before` changed.
 * @throws Error when the client fails, with its stderr.
 */
export async function probeWindows(
  from: string,
  ip: string,
  work: WindowWork,
  windows: number,
  secs: number,
  before: (i: number) => Promise<void>,
): Promise<number[]> {
  await run(
    "ip",
    ...["netns", "exec", from, "sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1"],
    "net.ipv4.ip_local_port_range=1024 65000",
  );
  const child = new Deno.Command("ip", {
    args: [
      ...["netns", "exec", from],
      ...onCpu(PROBE_CPUS?.client, ["python3", "-c", WINDOWS_PY, work, ip, String(secs)]),
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).pipeThrough(lineSplitter())
    .getReader();
  const writer = child.stdin.getWriter();
  const say = (line: string) => writer.write(new TextEncoder().encode(`${line}\n`));
  const next = async () => {
    const r = await lines.read();
    if (r.done) {
      throw new Error(`probe ${work} ${from} → ${ip} ended early: ${await stderr}`);
    }
    return r.value;
  };
  const rates: number[] = [];
  try {
    for (let i = 0; i < windows; i++) {
      if ((await next()) !== "ready") throw new Error(`probe ${work}: not ready`);
      await before(i);
      await say("go");
      const w = JSON.parse(await next()) as { n: number; secs: number };
      rates.push(work === "bytes" ? (w.n * 8) / w.secs / 1e9 : w.n / w.secs);
    }
    await next();
    await say("stop");
    await writer.close();
  } finally {
    await child.status.then(() => {}, () => {});
  }
  return rates;
}

/** A stream of text split into its lines. */
function lineSplitter(): TransformStream<string, string> {
  let rest = "";
  return new TransformStream({
    transform(chunk, out) {
      const parts = (rest + chunk).split("\n");
      rest = parts.pop()!;
      for (const p of parts) out.enqueue(p);
    },
    flush(out) {
      if (rest) out.enqueue(rest);
    },
  });
}

/**
 * The CPUs the probes run on, on a machine of two or more: the servers on the second, the clients
 * on the first (`taskset`). Left to the scheduler, a client and its server share a CPU in one
 * measurement and not in the next, and that alone moves a path's rates by up to 2× between two
 * measurements back to back (bench:dataplane's noise before they were pinned).
 */
export const PROBE_CPUS = navigator.hardwareConcurrency >= 2
  ? { client: "0", server: "1" }
  : undefined;

/** `args` run on `cpu` (as they are without one). */
const onCpu = (cpu: string | undefined, args: string[]) =>
  cpu === undefined ? args : ["taskset", "-c", cpu, ...args];

/** The servers running in one namespace; {@link ProbeServers.close} stops them. */
export interface ProbeServers {
  /** Stops the servers (SIGKILL) and waits for them. */
  close(): Promise<void>;
}

async function until(what: string, cond: () => Promise<boolean>, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Starts the servers in namespace `ns` and waits (bounded) until all three listen. */
export async function startProbeServers(ns: string): Promise<ProbeServers> {
  const spawn = (...args: string[]) =>
    new Deno.Command("ip", {
      args: ["netns", "exec", ns, ...onCpu(PROBE_CPUS?.server, args)],
      stdout: "null",
      stderr: "null",
    }).spawn();
  const children = [
    spawn("python3", "-c", SERVER_PY),
  ];
  const close = async () => {
    for (const p of children) {
      try {
        p.kill("SIGKILL");
      } catch { /* gone */ }
      await p.status;
    }
  };
  try {
    await until(`the probe servers to listen in ${ns}`, async () => {
      const out = await run("ip", "netns", "exec", ns, "ss", "-Hltn");
      return Object.values(PROBE_PORTS).every((p) => out.includes(`:${p} `));
    }, 15_000);
  } catch (e) {
    await close();
    throw e;
  }
  return { close };
}

const py = (ns: string, ...args: string[]) =>
  run(
    "ip",
    "netns",
    "exec",
    ns,
    ...onCpu(PROBE_CPUS?.client, ["python3", "-c", CLIENT_PY, ...args]),
  );

/** Whether a connection from `ns` to `ip`:`port` opens within `timeoutS` seconds. */
export async function canConnect(
  ns: string,
  ip: string,
  port: number,
  timeoutS = 0.5,
): Promise<boolean> {
  return (await py(ns, String(port), ip, String(timeoutS))).trim() === "1";
}

/**
 * Waits (bounded by `ms`) until a connection from `ns` to `ip`:`port` opens (`open`) or does not.
 * @throws Error naming the path and the state waited for.
 */
export async function waitForReach(
  ns: string,
  ip: string,
  port: number,
  open: boolean,
  ms = 30_000,
): Promise<void> {
  await until(
    `${ns} → ${ip}:${port} to be ${open ? "open" : "refused or dropped"}`,
    async () => (await canConnect(ns, ip, port)) === open,
    ms,
  );
}
