/**
 * What a writer of nf_tables set elements is told, shared by the NetworkPolicy table
 * (`policy/nft_netlink.ts`, which encodes the batches) and port security's bridge table
 * (`portsec/`): the address families of the tables and one element; and the framing every
 * nf_tables transaction shares (its messages' header, the batch around them), used by
 * `policy/nft_netlink.ts` and `nft_lib.ts`. Pure.
 *
 * @module
 */
import { frame } from "./messages.ts";
import { concatBytes } from "../../../lib/bytes.ts";

/** `NFNL_SUBSYS_NFTABLES`: the nf_tables subsystem (the high byte of a message's type). */
export const NFNL_SUBSYS_NFTABLES = 10;
/** A batch's first message. */
export const NFNL_MSG_BATCH_BEGIN = 0x10;
/** A batch's last message. */
export const NFNL_MSG_BATCH_END = 0x11;

/** `struct nfgenmsg`: family, version 0, a resource id (big-endian). */
export function nfgenmsg(family: number, resId = 0): Uint8Array {
  const out = new Uint8Array(4);
  out[0] = family;
  new DataView(out.buffer).setUint16(2, resId, false);
  return out;
}

/**
 * One nf_tables transaction: `messages` between a batch begin numbered `seq` and a batch end
 * numbered `endSeq` (the kernel applies all of them or none).
 *
 * @example
 * ```ts
 * sys.send(fd, nftTransaction([message], 1, 3));
 * ```
 */
export function nftTransaction(messages: Uint8Array[], seq: number, endSeq: number): Uint8Array {
  const control = (type: number, s: number) => frame(type, 0, s, nfgenmsg(0, NFNL_SUBSYS_NFTABLES));
  return concatBytes([
    control(NFNL_MSG_BATCH_BEGIN, seq),
    ...messages,
    control(NFNL_MSG_BATCH_END, endSeq),
  ]);
}

/** `NFPROTO_INET`: the family of an inet table. */
export const NFPROTO_INET = 1;

/** `NFPROTO_BRIDGE`: the family of a bridge table. */
export const NFPROTO_BRIDGE = 7;

/** A set element to add or remove: the key's bytes as the kernel stores them (no data). */
export interface SetElementOp {
  /** The set. */
  set: string;
  /** The key (a concatenation's components each padded to 4 bytes). */
  key: Uint8Array;
  /** The last key of a range (a concatenated interval set's element). */
  keyEnd?: Uint8Array;
}
