/**
 * TCP between two network namespaces, for the data-path benchmark (`bench/dataplane_bench.ts`):
 * servers started in one namespace (iperf3 on 5201, a Python acceptor that closes each
 * connection on 5202, a Python one-byte echo on 5203) and three measurements from another:
 * throughput (iperf3, one stream), request/response rate (one connection, one byte each way at a
 * time, as netperf's TCP_RR) and new connections per second (connect and close, as TCP_CRR).
 * Only the two namespaces given carry the traffic; the client's namespace may reuse its ports in
 * TIME_WAIT (its own sysctls).
 *
 * @module
 */
import { run } from "../daemon/dev/netns.ts";

/** One measurement of a path. */
export interface TcpSample {
  /** iperf3 throughput, one stream (Gbit/s). */
  gbps: number;
  /** One-byte request/response round trips per second on one connection. */
  rrPerS: number;
  /** New connections (connect, accept, close) per second. */
  connsPerS: number;
  /**
   * iperf3 throughput per CPU-second of its client and server (Gbit per second of their user and
   * system time, iperf3's own count; the kernel's packet processing in their context, the
   * bridge's netfilter hooks included, is part of it): what a CPU-bound path costs per byte,
   * whatever else the machine runs. Absent from samples before it was measured.
   */
  gbitPerCpuS?: number;
}

/** How long each measurement runs (s). */
export interface ProbeDurations {
  /** iperf3's `-t`. */
  throughputS: number;
  /** The request/response loop. */
  rrS: number;
  /** The connect loop. */
  connS: number;
}

/** The ports the servers listen on. */
export const PROBE_PORTS = { iperf: 5201, accept: 5202, echo: 5203 } as const;

const SERVER_PY = `
import socket, threading
def serve(port, echo):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('0.0.0.0', port))
    s.listen(512)
    while True:
        c, _ = s.accept()
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
      args: ["netns", "exec", ns, ...args],
      stdout: "null",
      stderr: "null",
    }).spawn();
  const children = [
    spawn("iperf3", "-s", "-p", String(PROBE_PORTS.iperf)),
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
  run("ip", "netns", "exec", ns, "python3", "-c", CLIENT_PY, ...args);

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

/**
 * Measures the path from namespace `from` to `ip` (servers of {@link startProbeServers} there):
 * throughput, then request/response, then connections.
 *
 * @example
 * ```ts
 * const servers = await startProbeServers(srv.ns.name);
 * try {
 *   console.log(await probeTcp(cli.ns.name, srv.ip, { throughputS: 2, rrS: 1, connS: 1 }));
 * } finally {
 *   await servers.close();
 * }
 * ```
 */
export async function probeTcp(from: string, ip: string, d: ProbeDurations): Promise<TcpSample> {
  // The connect loop leaves its sockets in TIME_WAIT on the client: thousands a second would run
  // the client's namespace out of ports over a long run, so it may reuse them (its own sysctls).
  await run(
    "ip",
    ...["netns", "exec", from, "sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1"],
    "net.ipv4.ip_local_port_range=1024 65000",
  );
  const out = await run(
    "ip",
    ...["netns", "exec", from, "iperf3", "-c", ip, "-p", String(PROBE_PORTS.iperf)],
    ...["-t", String(d.throughputS), "--connect-timeout", "3000", "-J"],
  );
  const end = (JSON.parse(out) as {
    end: {
      sum_received: { bits_per_second: number; bytes: number };
      cpu_utilization_percent?: { host_total: number; remote_total: number };
    };
  }).end;
  const bps = end.sum_received.bits_per_second;
  const cpu = end.cpu_utilization_percent;
  // Each process's share of the run's wall time: their CPU-seconds are the sum times the run.
  const cpuS = cpu ? ((cpu.host_total + cpu.remote_total) / 100) * d.throughputS : 0;
  const rr = Number((await py(from, "rr", ip, String(d.rrS))).trim());
  const conns = Number((await py(from, "conn", ip, String(d.connS))).trim());
  return {
    gbps: Math.round(bps / 1e7) / 100,
    rrPerS: Math.round(rr),
    connsPerS: Math.round(conns),
    ...(cpuS > 0
      ? { gbitPerCpuS: Math.round((end.sum_received.bytes * 8) / cpuS / 1e7) / 100 }
      : {}),
  };
}
