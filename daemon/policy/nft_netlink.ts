/**
 * The operations a new pod's ADD writes to the policy table (its chains, their few kinds of rules,
 * its verdict map entries: {@link NftOp}), written in-process as one nf_tables netlink batch
 * instead of through an `nft` process, the cost of which an ADD would otherwise pay before it
 * answers. The bytes are pure functions here (layouts from `linux/netfilter/nf_tables.h` and
 * `linux/netfilter/nfnetlink.h`, the attributes `nft --debug=netlink` shows for the same
 * commands); {@link NftNetlink} sends them and reads the kernel's answers. Everything else of the
 * table (sets, allowing rules, updates) is written by `nft -f`. The rules' counters are read the
 * same way ({@link NftNetlink.ruleCounts}: one dump of the table's rules, no `nft` process).
 *
 * @module
 */
import {
  type Attr,
  encodeAttrs,
  frame,
  ipBytes,
  NL,
  parseReplies,
  str,
} from "../net/netlink/messages.ts";
import { concatBytes } from "../../lib/bytes.ts";
import { NetlinkWriter } from "../net/netlink/nl_writer.ts";
import type { NftOp } from "./nft_pod_addition.ts";
import type { PodRule } from "./nft_rules.ts";
import type { RuleCount } from "./rule_counts.ts";
import {
  nfgenmsg,
  NFNL_MSG_BATCH_BEGIN,
  NFNL_MSG_BATCH_END,
  NFNL_SUBSYS_NFTABLES,
  NFPROTO_BRIDGE,
  NFPROTO_INET,
  nftTransaction,
  type SetElementOp,
} from "../net/netlink/nft_sets.ts";

/** The bridge family and a set element, as `net/netlink/nft_sets.ts` defines them. */
export { NFPROTO_BRIDGE, type SetElementOp };

const NFT_MSG_NEWCHAIN = 3;
const NFT_MSG_NEWRULE = 6;
const NFT_MSG_NEWSETELEM = 12;
const NFT_MSG_GETRULE = 7;
/** `ENOENT`: no such table (nothing isolated on the node). */
const ENOENT = 2;
const NFT_MSG_DESTROYSETELEM = 30;
const NLM_F_APPEND = 0x800;

const NFTA_CHAIN_TABLE = 1;
const NFTA_CHAIN_NAME = 3;
const NFTA_RULE_TABLE = 1;
const NFTA_RULE_CHAIN = 2;
const NFTA_RULE_EXPRESSIONS = 4;
const NFTA_RULE_USERDATA = 7;
const NFTA_LIST_ELEM = 1;
const NFTA_EXPR_NAME = 1;
const NFTA_EXPR_DATA = 2;
const NFTA_IMMEDIATE_DREG = 1;
const NFTA_IMMEDIATE_DATA = 2;
const NFTA_DATA_VALUE = 1;
const NFTA_DATA_VERDICT = 2;
const NFTA_VERDICT_CODE = 1;
const NFTA_VERDICT_CHAIN = 2;
const NFTA_COUNTER_BYTES = 1;
const NFTA_COUNTER_PACKETS = 2;
const NFTA_LIMIT_RATE = 1;
const NFTA_LIMIT_UNIT = 2;
const NFTA_LIMIT_BURST = 3;
const NFTA_LIMIT_TYPE = 4;
const NFTA_LIMIT_FLAGS = 5;
const NFTA_LOG_GROUP = 1;
const NFTA_LOG_PREFIX = 2;
const NFTA_SET_ELEM_LIST_TABLE = 1;
const NFTA_SET_ELEM_LIST_SET = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS = 3;
const NFTA_SET_ELEM_KEY = 1;
const NFTA_SET_ELEM_DATA = 2;
const NFTA_SET_ELEM_KEY_END = 10;
const NFT_REG_VERDICT = 0;
const NF_DROP = 0;
const NFT_JUMP = -3;
/** `NFTNL_UDATA_RULE_COMMENT`: a rule's comment, as nft stores it in the rule's user data. */
const UDATA_RULE_COMMENT = 0;
/** nft's burst for a packet limit it is given none for. */
const LIMIT_BURST = 5;

function be32(n: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setInt32(0, n, false);
  return out;
}

function be64(n: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(n), false);
  return out;
}

function be16(n: number): Uint8Array {
  const out = new Uint8Array(2);
  new DataView(out.buffer).setUint16(0, n, false);
  return out;
}

function verdict(code: number, chain?: string): Attr {
  const v: Attr[] = [[NFTA_VERDICT_CODE, be32(code)]];
  if (chain !== undefined) v.push([NFTA_VERDICT_CHAIN, str(chain)]);
  return [NFTA_DATA_VERDICT, v];
}

function expr(name: string, data: Attr[]): Attr {
  return [NFTA_LIST_ELEM, [[NFTA_EXPR_NAME, str(name)], [NFTA_EXPR_DATA, data]]];
}

function immediate(code: number, chain?: string): Attr {
  return expr("immediate", [
    [NFTA_IMMEDIATE_DREG, be32(NFT_REG_VERDICT)],
    [NFTA_IMMEDIATE_DATA, [verdict(code, chain)]],
  ]);
}

/** A rule's comment as nft keeps it: a type-length-value in the rule's user data. */
function comment(text: string): Uint8Array {
  const bytes = str(text);
  if (bytes.length > 255) throw new Error(`a rule comment is at most 254 bytes: ${text}`);
  return concatBytes([new Uint8Array([UDATA_RULE_COMMENT, bytes.length]), bytes]);
}

/** A pod rule's expressions, and its user data (the comment of a drop). */
function ruleBody(r: PodRule): { exprs: Attr[]; userdata?: Uint8Array } {
  if ("log" in r) {
    return {
      exprs: [
        expr("limit", [
          [NFTA_LIMIT_RATE, be64(r.log.perSecond)],
          [NFTA_LIMIT_UNIT, be64(1)],
          [NFTA_LIMIT_BURST, be32(LIMIT_BURST)],
          [NFTA_LIMIT_TYPE, be32(0)],
          [NFTA_LIMIT_FLAGS, be32(0)],
        ]),
        expr("log", [[NFTA_LOG_GROUP, be16(r.log.group)], [NFTA_LOG_PREFIX, str(r.log.prefix)]]),
      ],
    };
  }
  return {
    exprs: [
      expr("counter", [[NFTA_COUNTER_BYTES, be64(0)], [NFTA_COUNTER_PACKETS, be64(0)]]),
      immediate(NF_DROP),
    ],
    userdata: comment(r.drop),
  };
}

/** One operation's message. */
function opMessage(table: string, op: NftOp, seq: number): Uint8Array {
  const type = (msg: number) => (NFNL_SUBSYS_NFTABLES << 8) | msg;
  const flags = NL.F_ACK | NL.F_CREATE;
  if ("entry" in op) {
    const { bytes } = ipBytes(op.entry.ip);
    const attrs: Attr[] = [
      [NFTA_SET_ELEM_LIST_TABLE, str(table)],
      [NFTA_SET_ELEM_LIST_SET, str(op.entry.map)],
      [NFTA_SET_ELEM_LIST_ELEMENTS, [[NFTA_LIST_ELEM, [
        [NFTA_SET_ELEM_KEY, [[NFTA_DATA_VALUE, bytes]]],
        [NFTA_SET_ELEM_DATA, [verdict(NFT_JUMP, op.entry.chain)]],
      ]]]],
    ];
    return frame(
      type(NFT_MSG_NEWSETELEM),
      flags,
      seq,
      concatBytes([nfgenmsg(NFPROTO_INET), encodeAttrs(attrs)]),
    );
  }
  if ("rule" in op) {
    const { exprs, userdata } = ruleBody(op.rule);
    const attrs: Attr[] = [
      [NFTA_RULE_TABLE, str(table)],
      [NFTA_RULE_CHAIN, str(op.chain)],
      [NFTA_RULE_EXPRESSIONS, exprs],
    ];
    if (userdata) attrs.push([NFTA_RULE_USERDATA, userdata]);
    return frame(
      type(NFT_MSG_NEWRULE),
      flags | NLM_F_APPEND,
      seq,
      concatBytes([nfgenmsg(NFPROTO_INET), encodeAttrs(attrs)]),
    );
  }
  return frame(
    type(NFT_MSG_NEWCHAIN),
    flags,
    seq,
    concatBytes([
      nfgenmsg(NFPROTO_INET),
      encodeAttrs([[NFTA_CHAIN_TABLE, str(table)], [NFTA_CHAIN_NAME, str(op.chain)]]),
    ]),
  );
}

/**
 * One transaction of `ops` on inet table `table`: the batch's begin and end around one message
 * per operation, numbered from `seq`. Each operation asks for an acknowledgement: the kernel
 * answers every one (0, or the error that aborted the whole batch) once the batch is done.
 *
 * @example
 * ```ts
 * const { bytes, seqs } = nftBatch("ferry-policy", [{ chain: "in-1" }], 1);
 * ```
 */
export function nftBatch(
  table: string,
  ops: NftOp[],
  seq: number,
): { bytes: Uint8Array; seqs: number[] } {
  const seqs = ops.map((_, i) => seq + 1 + i);
  return {
    bytes: nftTransaction(
      ops.map((op, i) => opMessage(table, op, seqs[i])),
      seq,
      seq + ops.length + 1,
    ),
    seqs,
  };
}

/**
 * The request for every rule of inet table `table`: a dump, answered by one NEWRULE message per
 * rule and a DONE (none when there is no such table).
 *
 * @example
 * ```ts
 * sys.send(fd, ruleDump("ferry-policy", 7));
 * ```
 */
export function ruleDump(table: string, seq: number): Uint8Array {
  return frame(
    (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETRULE,
    NL.F_REQUEST | NL.F_DUMP,
    seq,
    concatBytes([nfgenmsg(NFPROTO_INET), encodeAttrs([[NFTA_RULE_TABLE, str(table)]])]),
  );
}

/** Attributes in order, repeated ones kept (the elements of a list), flags masked off. */
function attrList(buf: Uint8Array): [number, Uint8Array][] {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const out: [number, Uint8Array][] = [];
  for (let at = 0; at + 4 <= buf.length;) {
    const len = view.getUint16(at, true);
    if (len < 4 || at + len > buf.length) break;
    out.push([view.getUint16(at + 2, true) & 0x3fff, buf.subarray(at + 4, at + len)]);
    at += (len + 3) & ~3;
  }
  return out;
}

const attr = (list: [number, Uint8Array][], type: number) => list.find(([t]) => t === type)?.[1];

/** A comment in a rule's user data (type-length-values; nft's comment is NUL-terminated). */
function commentOf(userdata: Uint8Array): string | undefined {
  for (let at = 0; at + 2 <= userdata.length;) {
    const [type, len] = [userdata[at], userdata[at + 1]];
    if (type === UDATA_RULE_COMMENT) {
      const value = userdata.subarray(at + 2, at + 2 + len);
      const end = value.indexOf(0);
      return new TextDecoder().decode(end < 0 ? value : value.subarray(0, end));
    }
    at += 2 + len;
  }
  return undefined;
}

/** The packets of a rule's counter expression, if it has one. */
function counterOf(exprs: Uint8Array): number | undefined {
  for (const [type, elem] of attrList(exprs)) {
    if (type !== NFTA_LIST_ELEM) continue;
    const e = attrList(elem);
    const name = attr(e, NFTA_EXPR_NAME);
    if (!name || new TextDecoder().decode(name.subarray(0, name.indexOf(0) >>> 0)) !== "counter") {
      continue;
    }
    const packets = attr(
      attrList(attr(e, NFTA_EXPR_DATA) ?? new Uint8Array()),
      NFTA_COUNTER_PACKETS,
    );
    if (packets?.length === 8) {
      return Number(new DataView(packets.buffer, packets.byteOffset).getBigUint64(0, false));
    }
  }
  return undefined;
}

/**
 * What one buffer of a rule dump's answer (request `seq`) holds: the commented rules with a
 * counter, and whether the dump is done or failed (a negative errno), pure.
 */
export function parseRuleDump(
  buf: Uint8Array,
  seq: number,
): { counts: RuleCount[]; done: boolean; error?: number } {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const out: { counts: RuleCount[]; done: boolean; error?: number } = { counts: [], done: false };
  for (let at = 0; at + 16 <= buf.length;) {
    const len = view.getUint32(at, true);
    if (len < 16 || at + len > buf.length) break;
    const type = view.getUint16(at + 4, true);
    if (view.getUint32(at + 8, true) === seq) {
      if (type === NL.DONE) out.done = true;
      if (type === NL.ERROR) {
        out.done = true;
        const error = view.getInt32(at + 16, true);
        if (error) out.error = error;
      }
      if (type === ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWRULE)) {
        const attrs = attrList(buf.subarray(at + 20, at + len));
        const userdata = attr(attrs, NFTA_RULE_USERDATA);
        const exprs = attr(attrs, NFTA_RULE_EXPRESSIONS);
        const comment = userdata && commentOf(userdata);
        const packets = exprs && counterOf(exprs);
        if (comment && packets !== undefined) out.counts.push({ comment, packets });
      }
    }
    at += (len + 3) & ~3;
  }
  return out;
}

/**
 * One transaction adding (or, with `remove`, destroying: absent is fine) `ops`' elements of the
 * sets of table `table` of `family`, one message per set, numbered from `seq`.
 *
 * @example
 * ```ts
 * const { bytes } = setElementBatch(NFPROTO_BRIDGE, "ferry-portsec", [{ set: "ports", key }], 1);
 * ```
 */
export function setElementBatch(
  family: number,
  table: string,
  ops: SetElementOp[],
  seq: number,
  remove = false,
): { bytes: Uint8Array; seqs: number[] } {
  const bySet = new Map<string, SetElementOp[]>();
  for (const op of ops) {
    const keys = bySet.get(op.set);
    if (keys) keys.push(op);
    else bySet.set(op.set, [op]);
  }
  const seqs: number[] = [];
  const type = (NFNL_SUBSYS_NFTABLES << 8) | (remove ? NFT_MSG_DESTROYSETELEM : NFT_MSG_NEWSETELEM);
  // Written in place: this is what an ADD waits on, and an array per attribute cost it more than
  // the kernel's work.
  const w = new NetlinkWriter(256 + ops.length * 64);
  const control = (t: number, s: number) => {
    const at = w.begin(t, 0, s);
    w.raw(nfgenmsg(0, NFNL_SUBSYS_NFTABLES));
    w.end(at);
  };
  control(NFNL_MSG_BATCH_BEGIN, seq);
  for (const [set, keys] of bySet) {
    const s = seq + 1 + seqs.length;
    seqs.push(s);
    const message = w.begin(type, NL.F_ACK | (remove ? 0 : NL.F_CREATE), s);
    w.raw(nfgenmsg(family));
    w.str(NFTA_SET_ELEM_LIST_TABLE, table);
    w.str(NFTA_SET_ELEM_LIST_SET, set);
    const list = w.nest(NFTA_SET_ELEM_LIST_ELEMENTS);
    for (const k of keys) {
      const elem = w.nest(NFTA_LIST_ELEM);
      const key = w.nest(NFTA_SET_ELEM_KEY);
      w.attr(NFTA_DATA_VALUE, k.key);
      w.close(key);
      if (k.keyEnd) {
        const keyEnd = w.nest(NFTA_SET_ELEM_KEY_END);
        w.attr(NFTA_DATA_VALUE, k.keyEnd);
        w.close(keyEnd);
      }
      w.close(elem);
    }
    w.close(list);
    w.end(message);
  }
  control(NFNL_MSG_BATCH_END, seq + seqs.length + 1);
  return { bytes: w.bytes(), seqs };
}

/** The system calls the writer needs (`Libc` in the daemon). */
export interface NftSys {
  /** A NETLINK_NETFILTER socket, in the calling thread's namespace, with a receive timeout. */
  netfilterSocket(timeoutMs: number): number;
  /** Sends one message (or batch). */
  send(fd: number, msg: Uint8Array): void;
  /** Receives (blocking up to the socket's timeout). */
  recv(fd: number, buf: Uint8Array): number;
  /** Receives what is queued, without waiting; undefined when nothing is. */
  tryRecv(fd: number, buf: Uint8Array): number | undefined;
  /** Closes. */
  close(fd: number): void;
}

/**
 * Writes operations through one NETLINK_NETFILTER socket of the daemon's own namespace (opened on
 * first use, kept). The kernel handles a batch within the send, so its answers are waiting when
 * the send returns: the JS thread waits for no process and no other thread.
 *
 * @example
 * ```ts
 * const writer = new NftNetlink(Libc.open());
 * await writer.write("ferry-policy", ops);
 * ```
 */
export class NftNetlink {
  readonly #sys: NftSys;
  #fd?: number;
  #seq = 1;
  readonly #buf = new Uint8Array(64 * 1024);

  /** Creates the writer; no socket before the first write. */
  constructor(sys: NftSys) {
    this.#sys = sys;
  }

  /** Applies `ops` to inet table `table` as one transaction; throws with the kernel's errno. */
  write(table: string, ops: NftOp[]): Promise<void> {
    if (!ops.length) return Promise.resolve();
    return this.#transact(table, (seq) => nftBatch(table, ops, seq));
  }

  /**
   * Adds (or, with `remove`, destroys) set elements of table `table` of `family` as one
   * transaction; throws with the kernel's errno.
   */
  writeElements(
    family: number,
    table: string,
    ops: SetElementOp[],
    remove = false,
  ): Promise<void> {
    if (!ops.length) return Promise.resolve();
    return this.#transact(table, (seq) => setElementBatch(family, table, ops, seq, remove));
  }

  #transact(
    table: string,
    build: (seq: number) => { bytes: Uint8Array; seqs: number[] },
  ): Promise<void> {
    const sys = this.#sys;
    const fd = this.#fd ??= sys.netfilterSocket(2000);
    // Answers of an earlier batch that timed out are not this one's.
    while (sys.tryRecv(fd, this.#buf) !== undefined) { /* drained */ }
    const { bytes, seqs } = build(this.#seq);
    this.#seq += seqs.length + 2;
    sys.send(fd, bytes);
    const waiting = new Set(seqs);
    let failure: number | undefined;
    while (waiting.size) {
      const n = sys.recv(fd, this.#buf);
      for (const reply of parseReplies(this.#buf.subarray(0, n))) {
        if (reply.type !== NL.ERROR || !waiting.delete(reply.seq)) continue;
        if (reply.error && failure === undefined) failure = -reply.error;
      }
    }
    if (failure !== undefined) {
      return Promise.reject(
        new Error(`nf_tables batch on table ${table} failed: errno ${failure}`),
      );
    }
    return Promise.resolve();
  }

  /**
   * The counted, commented rules of inet table `table` (what `ruleCounts` reads from `nft -j
   * list`), by one dump through the same socket: no process. None when there is no such table
   * (the kernel's dump filtered by table is then empty); throws with the kernel's errno on an
   * error.
   */
  ruleCounts(table: string): RuleCount[] {
    const sys = this.#sys;
    const fd = this.#fd ??= sys.netfilterSocket(2000);
    while (sys.tryRecv(fd, this.#buf) !== undefined) { /* drained */ }
    const seq = this.#seq++;
    sys.send(fd, ruleDump(table, seq));
    const counts: RuleCount[] = [];
    for (;;) {
      const part = parseRuleDump(this.#buf.subarray(0, sys.recv(fd, this.#buf)), seq);
      counts.push(...part.counts);
      if (part.error === -ENOENT) return [];
      if (part.error) {
        throw new Error(`reading table ${table}'s rules failed: errno ${-part.error}`);
      }
      if (part.done) return counts;
    }
  }

  /** Closes the socket. */
  close(): void {
    if (this.#fd !== undefined) this.#sys.close(this.#fd);
    this.#fd = undefined;
  }
}
