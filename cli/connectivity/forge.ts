/**
 * The forged-source check of `kubectl ferry connectivity-test`, its commands and their reading
 * (pure): a test pod sends UDP datagrams to a closed port of another pod on its node, first as
 * itself (they must arrive), then with a third test pod's address as their source (port security
 * must drop them: they must not arrive). What arrives is read from the target's own kernel, the
 * `NoPorts` counter of `/proc/net/snmp` (each datagram to a closed port counts there), so the
 * target needs no listener and the test image nothing beyond its shell.
 *
 * The forger forges as any container can once it has `NET_ADMIN` in its own namespace (the `-a`
 * test pods have it): the victim's address on its own interface, the next hop's MAC pinned (an
 * ARP request from the victim's address would itself be dropped as forged), `nc -u -s`. The test
 * image (agnhost) has `ip` (iproute2), `nc` (OpenBSD netcat) and `sh`.
 *
 * @module
 */

/** The UDP port the datagrams go to: closed on the test pods (agnhost serve-hostname runs no UDP). */
export const FORGE_PORT = 19081;

/** How many datagrams each send is. */
export const DATAGRAMS = 3;

const quoteIp = (ip: string) => {
  if (!/^[0-9a-fA-F:.]+$/.test(ip)) throw new Error(`not an address: ${ip}`);
  return ip;
};

/** Reads the target's UDP counters. */
export function snmpArgv(): string[] {
  return ["cat", "/proc/net/snmp"];
}

/**
 * The `Udp` `NoPorts` counter of `/proc/net/snmp` text.
 *
 * @throws {Error} when the text has no such counter.
 * @example
 * ```ts
 * noPorts("Udp: InDatagrams NoPorts\nUdp: 5 7\n"); // 7
 * ```
 */
export function noPorts(snmp: string): number {
  const lines = snmp.split("\n").filter((l) => l.startsWith("Udp: "));
  const names = lines[0]?.split(/\s+/) ?? [];
  const values = lines[1]?.split(/\s+/) ?? [];
  const at = names.indexOf("NoPorts");
  const n = Number(values[at]);
  if (at < 0 || !Number.isFinite(n)) throw new Error("no Udp NoPorts counter in /proc/net/snmp");
  return n;
}

/**
 * Sends {@link DATAGRAMS} datagrams to `target`'s {@link FORGE_PORT} as the pod itself (this also
 * resolves the next hop's MAC, which the forgery then pins).
 */
export function honestArgv(target: string): string[] {
  const t = quoteIp(target);
  return [
    "sh",
    "-c",
    `for i in $(seq ${DATAGRAMS}); do echo ferry-honest | nc -u -w 1 ${t} ${FORGE_PORT}; done`,
  ];
}

/**
 * Sends {@link DATAGRAMS} datagrams to `target` with `victim` as their source: the victim's
 * address put on the pod's interface for the time of the send (removed whatever happens), the
 * next hop's neighbour entry made permanent so the kernel sends no ARP from the victim's address.
 * Exit status 0 once sent (whether they arrive is read at the target).
 */
export function forgedArgv(target: string, victim: string): string[] {
  const t = quoteIp(target), v = quoteIp(victim);
  const script = [
    `dev=$(ip -o route get ${t} | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p')`,
    `hop=$(ip -o route get ${t} | sed -n 's/.* via \\([^ ]*\\).*/\\1/p')`,
    `hop=\${hop:-${t}}`,
    `mac=$(ip neigh show $hop dev $dev | sed -n 's/.* lladdr \\([^ ]*\\).*/\\1/p')`,
    `[ -n "$mac" ] || { echo "no MAC for $hop on $dev" >&2; exit 3; }`,
    `ip neigh replace $hop lladdr $mac dev $dev nud permanent || exit 4`,
    `ip addr add ${v}/32 dev $dev || exit 5`,
    `trap 'ip addr del ${v}/32 dev $dev; ip neigh replace $hop lladdr $mac dev $dev nud reachable' EXIT`,
    `for i in $(seq ${DATAGRAMS}); do echo ferry-forged | nc -u -w 1 -s ${v} ${t} ${FORGE_PORT}; done`,
    `true`,
  ].join("\n");
  return ["sh", "-c", script];
}
