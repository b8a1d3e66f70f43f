/**
 * libnftables through Deno FFI: an `nft -f` script run in-process, on the JS thread, inside a
 * pod's network namespace, without starting `nsenter` and `nft` for it. The namespace is entered
 * with {@link Libc.inNetns} before the library's context is created, because the context opens its
 * NETLINK_NETFILTER socket at creation and a socket stays in the namespace it was created in;
 * everything runs synchronously and the thread is back home before any other JavaScript runs. A
 * table's removal is one nf_tables message of its own ({@link deleteTableBatch}), which reads
 * nothing of the namespace's ruleset. Debian's `nftables` package (in the image) depends on
 * `libnftables1`; where it cannot be loaded the caller falls back to the processes.
 *
 * @module
 */
import { type Libc, SyscallError } from "./libc.ts";
import { encodeAttrs, frame, NL, parseReplies, str } from "./messages.ts";
import { nfgenmsg, NFNL_SUBSYS_NFTABLES, nftTransaction } from "./nft_sets.ts";

const SYMBOLS = {
  nft_ctx_new: { parameters: ["u32"], result: "pointer" },
  nft_ctx_free: { parameters: ["pointer"], result: "void" },
  nft_ctx_buffer_output: { parameters: ["pointer"], result: "i32" },
  nft_ctx_buffer_error: { parameters: ["pointer"], result: "i32" },
  nft_ctx_get_error_buffer: { parameters: ["pointer"], result: "pointer" },
  nft_run_cmd_from_buffer: { parameters: ["pointer", "buffer"], result: "i32" },
} as const;

type Lib = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];

/** `NFT_CTX_DEFAULT`: a context with its netlink socket. */
const NFT_CTX_DEFAULT = 0;
const ENCODER = new TextEncoder();

/** `NFPROTO_NETDEV`: the family of a netdev table. */
export const NFPROTO_NETDEV = 5;

const NFT_MSG_DELTABLE = 2;
const NFTA_TABLE_NAME = 1;
const ENOENT = 2;
const EINVAL = 22;

/**
 * One transaction deleting table `table` of `family`, its message numbered `seq` and asking for
 * an acknowledgement. Pure.
 *
 * @example
 * ```ts
 * sys.send(fd, deleteTableBatch(NFPROTO_NETDEV, "ferry-portsec-net1", 1));
 * ```
 */
export function deleteTableBatch(family: number, table: string, seq: number): Uint8Array {
  const del = frame(
    (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELTABLE,
    NL.F_ACK,
    seq,
    new Uint8Array([...nfgenmsg(family), ...encodeAttrs([[NFTA_TABLE_NAME, str(table)]])]),
  );
  return nftTransaction([del], seq - 1, seq + 1);
}

/** What {@link NftLib} needs of libc ({@link Libc} itself; tests may wrap it). */
export type NftLibSys = Pick<
  Libc,
  | "openRead"
  | "identity"
  | "inNetns"
  | "close"
  | "netfilterSocket"
  | "isNetfilterSocket"
  | "dup"
  | "closeOffThread"
  | "send"
  | "recv"
>;

/** A script libnftables refused or the kernel rejected; the message is nft's own error text. */
export class NftScriptError extends Error {
  /** Creates the error with nft's error text. */
  constructor(text: string) {
    super(text);
    this.name = "NftScriptError";
  }
}

/**
 * libnftables, loaded once; {@link NftLib.applyIn} runs a script as one transaction inside a
 * network namespace.
 *
 * @example
 * ```ts
 * const nft = NftLib.open(Libc.open());
 * await nft.applyIn("/var/run/netns/pod", "table netdev t\ndelete table netdev t\n");
 * ```
 */
export class NftLib {
  readonly #lib: Lib;
  readonly #sys: NftLibSys;
  readonly #closing = new Set<Promise<void>>();
  /** Sockets a step inside a pod's namespace left to close once the JS thread is home. */
  readonly #held: number[] = [];

  private constructor(lib: Lib, sys: NftLibSys) {
    this.#lib = lib;
    this.#sys = sys;
  }

  /** Loads the library (`path`: by default the soname); throws when it cannot be loaded. */
  static open(sys: NftLibSys, path = "libnftables.so.1"): NftLib {
    return new NftLib(Deno.dlopen(path, SYMBOLS).symbols, sys);
  }

  /**
   * Runs `script` as one transaction inside the network namespace at path `netns` (all or
   * nothing). Rejects with {@link NftScriptError} (nft's error text) when nft or the kernel
   * refuses it, and with a `SyscallError` when the namespace cannot be entered (gone, not a
   * namespace) or is the daemon's own. Synchronous on the JS thread (about a millisecond for a
   * pod's guard table); the promise is for the callers of `nft` processes.
   */
  applyIn(netns: string, script: string): Promise<void> {
    try {
      this.#applyIn(netns, script);
      return Promise.resolve();
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Deletes table `table` of `family` inside the network namespace at path `netns` with one
   * nf_tables message: nothing of the namespace's ruleset is read (a pod's own rules cannot make
   * it slow). An absent table, or a namespace that is gone, is success; rejects with a
   * `SyscallError` (the kernel's errno) otherwise.
   */
  removeTableIn(netns: string, family: number, table: string): Promise<void> {
    try {
      this.#inPod(netns, () => this.#deleteTable(family, table), true);
      return Promise.resolve();
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Resolves once the sockets handed to worker threads to close are closed. */
  async settled(): Promise<void> {
    while (this.#closing.size) await Promise.all(this.#closing);
  }

  #applyIn(netns: string, script: string): void {
    this.#inPod(netns, () => this.#run(script), false);
  }

  /**
   * Runs `fn` inside the namespace at `netns`, never the daemon's own; with `goneIsFine`, a path
   * that is no longer there or no longer a namespace is nothing to do.
   */
  #inPod(netns: string, fn: () => void, goneIsFine: boolean): void {
    const sys = this.#sys;
    const home = sys.openRead("/proc/thread-self/ns/net");
    try {
      let pod: number;
      try {
        pod = sys.openRead(netns);
      } catch (e) {
        if (goneIsFine && e instanceof SyscallError && e.errno === ENOENT) return;
        throw e;
      }
      try {
        const [a, b] = [sys.identity(pod), sys.identity(home)];
        if (a.dev === b.dev && a.ino === b.ino) {
          throw new Error(`${netns} is the daemon's own network namespace`);
        }
        let entered = false;
        try {
          sys.inNetns(pod, home, () => {
            entered = true;
            fn();
          });
        } catch (e) {
          this.#closeHeld();
          // setns refuses a path that is no longer a namespace (its mount gone).
          if (goneIsFine && !entered && e instanceof SyscallError && e.errno === EINVAL) return;
          throw e;
        }
        this.#closeHeld();
      } finally {
        sys.close(pod);
      }
    } finally {
      sys.close(home);
    }
  }

  /** Deletes the table in the calling thread's namespace; an absent one is success. */
  #deleteTable(family: number, table: string): void {
    const sys = this.#sys;
    const fd = sys.netfilterSocket(2000);
    try {
      sys.send(fd, deleteTableBatch(family, table, 2));
      const buf = new Uint8Array(8192);
      while (true) {
        const ack = parseReplies(buf.subarray(0, sys.recv(fd, buf))).find((r) =>
          r.type === NL.ERROR && r.seq === 2
        );
        if (!ack) continue;
        if (ack.error && ack.error !== -ENOENT) {
          throw new SyscallError(`delete table ${table}`, -ack.error);
        }
        return;
      }
    } finally {
      // A socket that committed a transaction waits at its close (see #run): closed off the
      // JS thread once it is home.
      this.#held.push(fd);
    }
  }

  /** Runs `script` in the calling thread's namespace. */
  #run(script: string): void {
    const sys = this.#sys;
    const lib = this.#lib;
    // libnftables ends the process when it cannot open its socket: one opened here first turns
    // that into an error. The library's socket then takes the number this one had.
    const probe = sys.netfilterSocket(0);
    sys.close(probe);
    const ctx = lib.nft_ctx_new(NFT_CTX_DEFAULT);
    if (ctx === null) throw new NftScriptError("libnftables: no context");
    // The last close of a socket that committed a transaction waits in the kernel for an RCU
    // grace period (~10-20 ms): a second descriptor keeps the library's close quick, and this
    // one is closed on a worker thread.
    const taken = sys.isNetfilterSocket(probe) ? sys.dup(probe) : undefined;
    try {
      lib.nft_ctx_buffer_output(ctx);
      lib.nft_ctx_buffer_error(ctx);
      if (lib.nft_run_cmd_from_buffer(ctx, ENCODER.encode(script + "\0")) !== 0) {
        const text = lib.nft_ctx_get_error_buffer(ctx);
        throw new NftScriptError(
          (text ? Deno.UnsafePointerView.getCString(text).trim() : "") ||
            "libnftables refused the script and said nothing",
        );
      }
    } finally {
      lib.nft_ctx_free(ctx);
      if (taken !== undefined) this.#held.push(taken);
    }
  }

  /**
   * Closes on a worker thread what a pod-side step held back, once the JS thread is home again:
   * a worker started from inside the pod's namespace would stay in it.
   */
  #closeHeld(): void {
    for (const fd of this.#held.splice(0)) this.#closeOffThread(fd);
  }

  #closeOffThread(fd: number): void {
    const closed: Promise<void> = this.#sys.closeOffThread(fd).catch(() => {}).finally(() =>
      this.#closing.delete(closed)
    );
    this.#closing.add(closed);
  }
}
