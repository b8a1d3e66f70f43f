/**
 * Denied connections, as the kernel reports them (`policy.logDenied`): the policy table's drop
 * rules first log the packet to an NFLOG group (rate limited in the kernel), and the daemon reads
 * that group over a NETLINK_NETFILTER socket and writes one log line per denied connection, naming
 * the isolated pod, its peer and the policies that isolate it, rate limited again. The messages'
 * bytes (binding the group, copying packet headers, reading a logged packet) are pure functions
 * here; {@link DeniedLog} does the reading.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";

const NFNL_SUBSYS_ULOG = 4;
const NFULNL_MSG_PACKET = 0;
const NFULNL_MSG_CONFIG = 1;
const NFULA_CFG_CMD = 1;
const NFULA_CFG_MODE = 2;
const NFULNL_CFG_CMD_BIND = 1;
const NFULNL_COPY_PACKET = 2;
const NFULA_PAYLOAD = 9;
const NFULA_PREFIX = 10;
const NLM_F_REQUEST = 1;
const NLM_F_ACK = 4;
const NLMSG_ERROR = 2;
const AF_INET = 2;
const AF_INET6 = 10;
/** Bytes of each packet copied to the daemon: the IP and transport headers are enough. */
const COPY_RANGE = 96;

/** A packet the policy table denied, as logged. */
export interface DeniedPacket {
  /** The drop rule's log prefix: `in NS/POD` or `eg NS/POD`. */
  prefix: string;
  /** Its family. */
  family: 4 | 6;
  /** Its transport protocol: tcp, udp, sctp, icmp, icmpv6, or the number. */
  protocol: string;
  /** Source and destination address. */
  src: string;
  dst: string;
  /** Source and destination port (TCP, UDP, SCTP). */
  sport?: number;
  dport?: number;
}

function attr(type: number, payload: Uint8Array): Uint8Array {
  const len = 4 + payload.length;
  const out = new Uint8Array((len + 3) & ~3);
  const v = new DataView(out.buffer);
  v.setUint16(0, len, true);
  v.setUint16(2, type, true);
  out.set(payload, 4);
  return out;
}

function message(type: number, seq: number, group: number, attrs: Uint8Array[]): Uint8Array {
  const body = attrs.reduce((n, a) => n + a.length, 0);
  const out = new Uint8Array(16 + 4 + body);
  const v = new DataView(out.buffer);
  v.setUint32(0, out.length, true);
  v.setUint16(4, (NFNL_SUBSYS_ULOG << 8) | type, true);
  v.setUint16(6, NLM_F_REQUEST | NLM_F_ACK, true);
  v.setUint32(8, seq, true);
  out[16] = 0; // AF_UNSPEC: the group, whatever the family
  out[17] = 0; // NFNETLINK_V0
  v.setUint16(18, group, false); // res_id: the group, big-endian
  let at = 20;
  for (const a of attrs) {
    out.set(a, at);
    at += a.length;
  }
  return out;
}

/**
 * The two requests that make a socket receive NFLOG group `group`: bind it, and copy the first
 * bytes of each packet (its headers).
 *
 * @example
 * ```ts
 * for (const msg of nflogBindMessages(100, 1)) libc.send(fd, msg);
 * ```
 */
export function nflogBindMessages(group: number, seq: number): Uint8Array[] {
  const mode = new Uint8Array(6);
  new DataView(mode.buffer).setUint32(0, COPY_RANGE, false);
  mode[4] = NFULNL_COPY_PACKET;
  return [
    message(NFULNL_MSG_CONFIG, seq, group, [
      attr(NFULA_CFG_CMD, new Uint8Array([NFULNL_CFG_CMD_BIND])),
    ]),
    message(NFULNL_MSG_CONFIG, seq + 1, group, [attr(NFULA_CFG_MODE, mode)]),
  ];
}

/** The errno of an acknowledgement (0: success), or undefined when `buf` holds none. */
export function ackErrno(buf: Uint8Array, n: number): number | undefined {
  if (n < 20) return undefined;
  const v = new DataView(buf.buffer, buf.byteOffset, n);
  if (v.getUint16(4, true) !== NLMSG_ERROR) return undefined;
  return -v.getInt32(16, true);
}

const PROTOCOLS: Record<number, string> = {
  1: "icmp",
  6: "tcp",
  17: "udp",
  58: "icmpv6",
  132: "sctp",
};

function ipv4(b: Uint8Array, at: number): string {
  return `${b[at]}.${b[at + 1]}.${b[at + 2]}.${b[at + 3]}`;
}

function ipv6(b: Uint8Array, at: number): string {
  const words: string[] = [];
  for (let i = 0; i < 16; i += 2) words.push(((b[at + i] << 8) | b[at + i + 1]).toString(16));
  // The longest run of zero words becomes "::".
  let best = [-1, 0];
  for (let i = 0; i < 8;) {
    if (words[i] !== "0") {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && words[j] === "0") j++;
    if (j - i > best[1] && j - i > 1) best = [i, j - i];
    i = j;
  }
  if (best[0] < 0) return words.join(":");
  const [i, len] = best;
  return `${words.slice(0, i).join(":")}::${words.slice(i + len).join(":")}`;
}

/** The addresses, protocol and ports of an IP packet's first bytes. */
function packetOf(family: 4 | 6, p: Uint8Array): Omit<DeniedPacket, "prefix"> | undefined {
  let proto: number, l4: number, src: string, dst: string;
  if (family === 4) {
    if (p.length < 20) return undefined;
    l4 = (p[0] & 0x0f) * 4;
    proto = p[9];
    src = ipv4(p, 12);
    dst = ipv4(p, 16);
  } else {
    if (p.length < 40) return undefined;
    l4 = 40;
    proto = p[6];
    src = ipv6(p, 8);
    dst = ipv6(p, 24);
  }
  const out: Omit<DeniedPacket, "prefix"> = {
    family,
    protocol: PROTOCOLS[proto] ?? String(proto),
    src,
    dst,
  };
  if ((proto === 6 || proto === 17 || proto === 132) && p.length >= l4 + 4) {
    out.sport = (p[l4] << 8) | p[l4 + 1];
    out.dport = (p[l4 + 2] << 8) | p[l4 + 3];
  }
  return out;
}

/**
 * The logged packets in what one `recv` returned (several messages may come at once); anything
 * else (acknowledgements, other subsystems) is skipped.
 *
 * @example
 * ```ts
 * const packets = parseNflog(buf, libc.recv(fd, buf));
 * ```
 */
export function parseNflog(buf: Uint8Array, n: number): DeniedPacket[] {
  const out: DeniedPacket[] = [];
  const v = new DataView(buf.buffer, buf.byteOffset, n);
  for (let at = 0; at + 20 <= n;) {
    const len = v.getUint32(at, true);
    if (len < 16 || at + len > n) break;
    const type = v.getUint16(at + 4, true);
    if (type === ((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET)) {
      const familyByte = buf[at + 16];
      const family = familyByte === AF_INET ? 4 : familyByte === AF_INET6 ? 6 : undefined;
      let prefix = "";
      let payload: Uint8Array | undefined;
      for (let a = at + 20; a + 4 <= at + len;) {
        const alen = v.getUint16(a, true);
        const atype = v.getUint16(a + 2, true) & 0x7fff;
        if (alen < 4) break;
        const data = buf.subarray(a + 4, a + alen);
        if (atype === NFULA_PREFIX) {
          prefix = new TextDecoder().decode(data).replace(/\0.*$/s, "");
        } else if (atype === NFULA_PAYLOAD) payload = data;
        a += (alen + 3) & ~3;
      }
      const packet = family && payload ? packetOf(family, payload) : undefined;
      if (packet) out.push({ prefix, ...packet });
    }
    at += (len + 3) & ~3;
  }
  return out;
}

/** The log prefix of a pod's drop rule (what {@link DeniedLog} reads back). */
export function denyPrefix(direction: "ingress" | "egress", pod: string): string {
  return `${direction === "ingress" ? "in" : "eg"} ${pod}`.slice(0, 127);
}

/** The system calls the reader needs (`Libc` in the daemon). */
export interface NflogSys {
  /** A NETLINK_NETFILTER socket with a receive timeout. */
  netfilterSocket(timeoutMs: number): number;
  /** Sends one message. */
  send(fd: number, msg: Uint8Array): void;
  /** Receives (blocking up to the socket's timeout). */
  recv(fd: number, buf: Uint8Array): number;
  /** Receives on a worker thread. */
  recvOffThread(fd: number, buf: Uint8Array): Promise<number>;
  /** Closes. */
  close(fd: number): void;
}

/** What a denied packet was: the pod it was denied for, its peer, the policies isolating it. */
export interface DeniedConnection {
  /** The isolated pod, `namespace/name`. */
  pod: string;
  /** Ingress (to the pod) or egress (from it). */
  direction: "ingress" | "egress";
  /** The other end: a pod (`namespace/name`) or the address. */
  peer: string;
  /** The policies that select the pod for that direction. */
  policies: string[];
}

/** What the reader needs. */
export interface DeniedLogDeps {
  /** The system calls. */
  sys: NflogSys;
  /** The NFLOG group the table logs to. */
  group: number;
  /** Lines written per second at most (the rest are counted and said once a second). */
  perSecond: number;
  /** Names the pod, peer and policies of a packet (from the policy watches' caches). */
  describe: (packet: DeniedPacket) => DeniedConnection | undefined;
  /** Where the lines go. */
  logger: Logger;
}

/**
 * Reads the NFLOG group and logs each denied connection.
 *
 * @example
 * ```ts
 * const log = new DeniedLog({ sys: Libc.open(), group: 100, perSecond: 10, describe, logger });
 * log.start();
 * await log.close();
 * ```
 */
export class DeniedLog {
  readonly #d: DeniedLogDeps;
  #fd?: number;
  #closed = false;
  #loop?: Promise<void>;
  #tokens: number;
  #refilled = Date.now();
  #suppressed = 0;
  /** Lines written, and denied packets not written (over the rate). */
  readonly stats = { logged: 0, suppressed: 0 };

  /** Creates the reader; {@link DeniedLog.start} binds the group. */
  constructor(deps: DeniedLogDeps) {
    this.#d = deps;
    this.#tokens = deps.perSecond;
  }

  /** Binds the group (throws when it cannot: another reader holds it) and starts reading. */
  start(): void {
    const { sys, group } = this.#d;
    const fd = sys.netfilterSocket(1000);
    try {
      const buf = new Uint8Array(512);
      for (const msg of nflogBindMessages(group, 1)) {
        sys.send(fd, msg);
        const errno = ackErrno(buf, sys.recv(fd, buf));
        if (errno) throw new Error(`binding NFLOG group ${group} failed (errno ${errno})`);
      }
    } catch (e) {
      sys.close(fd);
      throw e;
    }
    this.#fd = fd;
    this.#loop = this.#read(fd);
  }

  async #read(fd: number): Promise<void> {
    const buf = new Uint8Array(64 * 1024);
    while (!this.#closed) {
      let n: number;
      try {
        n = await this.#d.sys.recvOffThread(fd, buf);
      } catch {
        continue; // the receive timeout: look whether to stop, then wait again
      }
      for (const packet of parseNflog(buf, n)) this.#log(packet);
    }
  }

  #log(packet: DeniedPacket): void {
    const now = Date.now();
    const { perSecond, logger } = this.#d;
    if (now - this.#refilled >= 1000) {
      if (this.#suppressed) {
        logger.warn("network policy: {n} more denied packets not logged (over {rate}/s)", {
          n: this.#suppressed,
          rate: perSecond,
        });
      }
      this.#suppressed = 0;
      this.#tokens = perSecond;
      this.#refilled = now;
    }
    if (this.#tokens <= 0) {
      this.#suppressed++;
      this.stats.suppressed++;
      return;
    }
    this.#tokens--;
    this.stats.logged++;
    const c = this.#d.describe(packet);
    const port = (p?: number) => (p === undefined ? "" : `:${p}`);
    logger.info(
      "network policy denied {direction} {protocol} {src}{sport} → {dst}{dport}: {pod} " +
        "is isolated by {policies} and no rule allows {peer}",
      {
        direction: c?.direction ?? packet.prefix.slice(0, 2),
        protocol: packet.protocol,
        src: packet.src,
        sport: port(packet.sport),
        dst: packet.dst,
        dport: port(packet.dport),
        pod: c?.pod ?? packet.prefix.slice(3),
        peer: c?.peer ?? "",
        policies: c?.policies.join(", ") ?? "",
      },
    );
  }

  /** Stops reading and closes the socket. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#loop;
    if (this.#fd !== undefined) this.#d.sys.close(this.#fd);
  }
}
