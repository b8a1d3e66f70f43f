/**
 * The few libc calls in-process netlink needs, through Deno FFI: netlink sockets, and `setns` to
 * create a socket inside a pod's network namespace. Every call is synchronous on the JS thread:
 * {@link inNetns} switches only that thread, runs its callback, and switches back before any
 * other JavaScript can run, so nothing else ever executes in the pod's namespace.
 *
 * @module
 */

const SYMBOLS = {
  socket: { parameters: ["i32", "i32", "i32"], result: "i32" },
  send: { parameters: ["i32", "buffer", "usize", "i32"], result: "isize" },
  recv: { parameters: ["i32", "buffer", "usize", "i32"], result: "isize" },
  sendOffThread: {
    name: "send",
    parameters: ["i32", "buffer", "usize", "i32"],
    result: "isize",
    nonblocking: true,
  },
  recvOffThread: {
    name: "recv",
    parameters: ["i32", "buffer", "usize", "i32"],
    result: "isize",
    nonblocking: true,
  },
  close: { parameters: ["i32"], result: "i32" },
  closeOffThread: { name: "close", parameters: ["i32"], result: "i32", nonblocking: true },
  fcntl: { parameters: ["i32", "i32", "i32"], result: "i32" },
  getsockopt: { parameters: ["i32", "i32", "i32", "buffer", "buffer"], result: "i32" },
  setns: { parameters: ["i32", "i32"], result: "i32" },
  open: { parameters: ["buffer", "i32"], result: "i32" },
  fstat: { parameters: ["i32", "buffer"], result: "i32" },
  write: { parameters: ["i32", "buffer", "usize"], result: "isize" },
  setsockopt: { parameters: ["i32", "i32", "i32", "buffer", "u32"], result: "i32" },
  ioctl: { parameters: ["i32", "u64", "buffer"], result: "i32" },
  setpriority: { parameters: ["i32", "u32", "i32"], result: "i32" },
  __errno_location: { parameters: [], result: "pointer" },
} as const;

type Lib = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];

const AF_NETLINK = 16;
const SOCK_RAW = 3;
const SOCK_CLOEXEC = 0o2000000;
const NETLINK_ROUTE = 0;
const NETLINK_NETFILTER = 12;
const O_RDONLY = 0;
const O_WRONLY = 1;
const O_CLOEXEC = 0o2000000;
const O_NONBLOCK = 0o4000;
const STAT_SIZE = 256;
const CLONE_NEWNET = 0x40000000;
const SOL_SOCKET = 1;
const SO_RCVTIMEO = 20;
const SO_PROTOCOL = 38;
const SO_DOMAIN = 39;
const F_DUPFD_CLOEXEC = 1030;
const MSG_DONTWAIT = 0x40;
const SIOCGIFINDEX = 0x8933n;
const IFNAMSIZ = 16;
const ENCODER = new TextEncoder();
const EAGAIN = 11;

const ERRNO_NAMES: Record<number, string> = {
  1: "EPERM: operation not permitted",
  2: "ENOENT: no such file or directory",
  3: "ESRCH: no such process",
  13: "EACCES: permission denied",
  16: "EBUSY: device or resource busy",
  17: "EEXIST: file exists",
  19: "ENODEV: no such device",
  22: "EINVAL: invalid argument",
  95: "EOPNOTSUPP: operation not supported",
  99: "EADDRNOTAVAIL: cannot assign requested address",
  101: "ENETUNREACH: network is unreachable",
  11: "EAGAIN: no answer in time",
};

/** A failed system call or netlink request, with its errno. */
export class SyscallError extends Error {
  /** The errno (positive). */
  readonly errno: number;
  /** Creates the error for `what` failing with `errno`. */
  constructor(what: string, errno: number) {
    super(`${what}: ${ERRNO_NAMES[errno] ?? (errno ? `errno ${errno}` : "failed")}`);
    this.name = "SyscallError";
    this.errno = errno;
  }
}

/** Which file a descriptor or path is: device and inode number. */
export interface FileIdentity {
  /** `st_dev`. */
  dev: number;
  /** `st_ino`. */
  ino: number;
}

/** What in-process netlink needs from the system; {@link Libc} is the real one, tests wrap it. */
export interface NetlinkSys {
  /** A NETLINK_ROUTE socket in the calling thread's namespace. */
  netlinkSocket(): number;
  /** Sends one message. */
  send(fd: number, msg: Uint8Array): void;
  /** Receives into `buf`; the number of bytes. */
  recv(fd: number, buf: Uint8Array): number;
  /** Sends on a worker thread (for requests the kernel takes long over, like deleting a link). */
  sendOffThread(fd: number, msg: Uint8Array): Promise<void>;
  /** Receives on a worker thread. */
  recvOffThread(fd: number, buf: Uint8Array): Promise<number>;
  /**
   * Receives what is already queued, never waiting: the number of bytes, or undefined when
   * nothing is (rtnetlink answers before `send` returns, so after a send there always is).
   */
  tryRecv(fd: number, buf: Uint8Array): number | undefined;
  /**
   * The index of the link called `name` in the namespace of socket `fd`, looked up without the
   * kernel's routing lock (`SIOCGIFINDEX`); throws {@link SyscallError} (ENODEV when absent).
   */
  ifIndex(fd: number, name: string): number;
  /** Closes a descriptor. */
  close(fd: number): void;
  /** Opens a file read-only, never waiting (a FIFO does not block the caller). */
  openRead(path: string): number;
  /** The device and inode number of an open descriptor (`fstat`). */
  identity(fd: number): FileIdentity;
  /** Writes an existing file (a sysctl). */
  writeFile(path: string, value: string): void;
  /** Runs synchronous `fn` inside the namespace `netnsFd`, then returns to `homeFd`. */
  inNetns<T>(netnsFd: number, homeFd: number, fn: () => T): T;
}

/**
 * The libc binding. Opening fails (and the caller falls back to iproute2) where FFI is not
 * permitted or libc is not glibc.
 *
 * @example
 * ```ts
 * const libc = Libc.open();
 * const fd = libc.netlinkSocket();
 * ```
 */
export class Libc implements NetlinkSys {
  readonly #c: Lib;
  /**
   * Time the JS thread spent inside pod namespaces ({@link inNetns} calls and their total ms):
   * synchronous work no other request can overlap with.
   */
  readonly netnsTime = { calls: 0, ms: 0 };
  /** How deep the JS thread is in {@link inNetns} calls (it is in a pod's namespace when > 0). */
  #away = 0;
  /**
   * Time the JS thread spent in netlink `send` and `recv` (calls, total and longest ms): the
   * kernel handles a request inside `send`, waiting for the routing lock when others hold it,
   * and no other request can run on the JS thread meanwhile.
   */
  readonly netlinkTime = { calls: 0, ms: 0, maxMs: 0 };

  private constructor(c: Lib) {
    this.#c = c;
  }

  /** Loads libc; throws when FFI is unavailable. */
  static open(): Libc {
    return new Libc(Deno.dlopen("libc.so.6", SYMBOLS).symbols);
  }

  /**
   * `setpriority(PRIO_PROCESS, tid, nice)`: on Linux, the nice value of that one thread (the
   * daemon's CPU priority, `cpu_priority.ts`).
   */
  setNice(tid: number, nice: number): void {
    this.#check(`setpriority(${tid}, ${nice})`, this.#c.setpriority(0, tid, nice));
  }

  #errno(): number {
    const p = this.#c.__errno_location();
    return p ? new Deno.UnsafePointerView(p).getInt32() : 0;
  }

  #check(what: string, result: number | bigint): number {
    const n = Number(result);
    if (n < 0) throw new SyscallError(what, this.#errno());
    return n;
  }

  /** A NETLINK_ROUTE socket in the calling thread's namespace, with a 5 s receive timeout. */
  netlinkSocket(): number {
    const fd = this.#check(
      "socket(AF_NETLINK)",
      this.#c.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE),
    );
    const timeout = new BigInt64Array([5n, 0n]);
    this.#c.setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, new Uint8Array(timeout.buffer), 16);
    return fd;
  }

  /**
   * A NETLINK_NETFILTER socket (nfnetlink: NFLOG) in the calling thread's namespace, with a
   * receive timeout of `timeoutMs`, so that a reader blocked in it looks up now and then.
   */
  netfilterSocket(timeoutMs: number): number {
    const fd = this.#check(
      "socket(AF_NETLINK, NETLINK_NETFILTER)",
      this.#c.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER),
    );
    const timeout = new BigInt64Array([
      BigInt(Math.floor(timeoutMs / 1000)),
      BigInt((timeoutMs % 1000) * 1000),
    ]);
    this.#c.setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, new Uint8Array(timeout.buffer), 16);
    return fd;
  }

  #timed(started: number): void {
    const ms = performance.now() - started;
    const t = this.netlinkTime;
    t.calls++;
    t.ms += ms;
    if (ms > t.maxMs) t.maxMs = ms;
  }

  /** Sends one message. */
  send(fd: number, msg: Uint8Array): void {
    const started = performance.now();
    const n = this.#c.send(fd, msg, BigInt(msg.length), 0);
    this.#timed(started);
    this.#check("netlink send", n);
  }

  /** Receives into `buf`; resolves to the number of bytes. */
  recv(fd: number, buf: Uint8Array): number {
    const started = performance.now();
    const n = this.#c.recv(fd, buf, BigInt(buf.length), 0);
    this.#timed(started);
    return this.#check("netlink recv", n);
  }

  /** Receives what is queued without waiting; undefined when nothing is (EAGAIN). */
  tryRecv(fd: number, buf: Uint8Array): number | undefined {
    const n = Number(this.#c.recv(fd, buf, BigInt(buf.length), MSG_DONTWAIT));
    if (n >= 0) return n;
    const errno = this.#errno();
    if (errno === EAGAIN) return undefined;
    throw new SyscallError("netlink recv", errno);
  }

  /**
   * Refuses (throws at once) to hand work to a worker thread while the JS thread is inside a
   * pod's namespace: a
   * worker the runtime starts for it then is born in that namespace and stays there, and every
   * later file or socket operation it runs (the daemon's own namespace read from
   * `/proc/thread-self`, among them) would happen in the pod's namespace.
   */
  #home(what: string): void {
    if (this.#away > 0) {
      throw new Error(`${what} on a worker thread from inside a pod's network namespace`);
    }
  }

  /** Sends on a worker thread; the JS thread keeps serving meanwhile. */
  sendOffThread(fd: number, msg: Uint8Array): Promise<void> {
    this.#home("send");
    return this.#c.sendOffThread(fd, msg, BigInt(msg.length), 0).then((n) => {
      // errno lives on the worker thread: only the failure itself is known here.
      if (Number(n) < 0) throw new SyscallError("netlink send", 0);
    });
  }

  /** Receives on a worker thread (bounded by the socket's receive timeout). */
  recvOffThread(fd: number, buf: Uint8Array): Promise<number> {
    this.#home("recv");
    return this.#c.recvOffThread(fd, buf, BigInt(buf.length), 0).then((r) => {
      const n = Number(r);
      if (n < 0) throw new SyscallError("netlink recv", 0);
      return n;
    });
  }

  /**
   * `ioctl(SIOCGIFINDEX)`: a lookup under RCU, where RTM_GETLINK waits for the routing lock
   * (held for milliseconds at a time by whoever creates or deletes links meanwhile).
   */
  ifIndex(fd: number, name: string): number {
    const ifreq = new Uint8Array(40);
    const bytes = ENCODER.encode(name);
    if (bytes.length >= IFNAMSIZ) throw new SyscallError(`find ${name}`, 22);
    ifreq.set(bytes);
    this.#check(`find ${name}`, this.#c.ioctl(fd, SIOCGIFINDEX, ifreq));
    return new DataView(ifreq.buffer).getInt32(IFNAMSIZ, true);
  }

  /** Closes a descriptor. */
  close(fd: number): void {
    this.#c.close(fd);
  }

  /**
   * Closes a descriptor on a worker thread: the last close of a NETLINK_NETFILTER socket that
   * sent a transaction waits in the kernel for the transactions' memory to be reclaimed (an RCU
   * grace period, ~10-20 ms), which the JS thread must not.
   */
  closeOffThread(fd: number): Promise<void> {
    this.#home("close");
    return this.#c.closeOffThread(fd).then(() => {});
  }

  /** A second descriptor for the file `fd` is (the lowest free number, close-on-exec). */
  dup(fd: number): number {
    return this.#check("dup", this.#c.fcntl(fd, F_DUPFD_CLOEXEC, 0));
  }

  /** Whether `fd` is a NETLINK_NETFILTER socket (`SO_DOMAIN`, `SO_PROTOCOL`). */
  isNetfilterSocket(fd: number): boolean {
    return this.#sockopt(fd, SO_DOMAIN) === AF_NETLINK &&
      this.#sockopt(fd, SO_PROTOCOL) === NETLINK_NETFILTER;
  }

  #sockopt(fd: number, option: number): number | undefined {
    const value = new Int32Array(1);
    const length = new Uint32Array([4]);
    const ok = this.#c.getsockopt(
      fd,
      SOL_SOCKET,
      option,
      new Uint8Array(value.buffer),
      new Uint8Array(length.buffer),
    );
    return ok === 0 ? value[0] : undefined;
  }

  /**
   * Opens a file read-only (a namespace file) without blocking: a FIFO put where a namespace
   * was expected must not stall the JS thread. Throws with its errno.
   */
  openRead(path: string): number {
    return this.#check(
      `open ${path}`,
      this.#c.open(cString(path), O_RDONLY | O_CLOEXEC | O_NONBLOCK),
    );
  }

  /** `fstat`'s device and inode (the first two fields of `struct stat` on 64-bit Linux). */
  identity(fd: number): FileIdentity {
    const buf = new BigUint64Array(STAT_SIZE / 8);
    this.#check("fstat", this.#c.fstat(fd, new Uint8Array(buf.buffer)));
    return { dev: Number(buf[0]), ino: Number(buf[1]) };
  }

  /** Writes `value` to a file that must exist (a sysctl), in the calling thread's namespace. */
  writeFile(path: string, value: string): void {
    const fd = this.#check(`open ${path}`, this.#c.open(cString(path), O_WRONLY | O_CLOEXEC));
    try {
      const bytes = ENCODER.encode(value);
      this.#check(`write ${path}`, this.#c.write(fd, bytes, BigInt(bytes.length)));
    } finally {
      this.#c.close(fd);
    }
  }

  /**
   * Runs `fn` with the calling thread in the network namespace `netnsFd`, then returns it to
   * `homeFd`. `fn` must be synchronous. If switching back fails the process cannot be trusted
   * to be in its own namespace any more, so it exits.
   */
  inNetns<T>(netnsFd: number, homeFd: number, fn: () => T): T {
    const started = performance.now();
    this.#check("setns(pod)", this.#c.setns(netnsFd, CLONE_NEWNET));
    this.#away++;
    try {
      return fn();
    } finally {
      this.#away--;
      this.netnsTime.calls++;
      this.netnsTime.ms += performance.now() - started;
      if (this.#c.setns(homeFd, CLONE_NEWNET) !== 0) {
        console.error(
          `ferry: cannot return to the daemon's network namespace (errno ${this.#errno()})`,
        );
        Deno.exit(70);
      }
    }
  }
}

function cString(text: string): Uint8Array {
  return ENCODER.encode(text + "\0");
}
