/**
 * What a writer of nf_tables set elements is told, shared by the NetworkPolicy table
 * (`policy/nft_netlink.ts`, which encodes the batches) and port security's bridge table
 * (`portsec/`): the address families of the tables and one element. Pure data.
 *
 * @module
 */

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
