/**
 * Netlink messages written straight into one buffer: headers, attributes and nested attributes
 * in place, each length filled in when its part is closed. The same bytes as `frame` and
 * `encodeAttrs` of `messages.ts`, without an array per attribute and a copy per level of
 * nesting: for the requests a pod's ADD waits on (port security's set elements), which those
 * made cost more than the kernel's work on them. Pure: bytes only.
 *
 * @module
 */
import { NL } from "./messages.ts";

const NLA_F_NESTED = 0x8000;
const UTF8 = new TextEncoder();

/**
 * A writer of netlink messages.
 *
 * @example
 * ```ts
 * const w = new NetlinkWriter();
 * const m = w.begin(0x0a0c, NL.F_ACK, 7);
 * w.raw(new Uint8Array([7, 0, 0, 0]));
 * const list = w.nest(3);
 * w.attr(1, new Uint8Array([1, 2, 3, 4]));
 * w.close(list);
 * w.end(m);
 * const bytes = w.bytes();
 * ```
 */
export class NetlinkWriter {
  #buf: Uint8Array;
  #view: DataView;
  #at = 0;

  /** A writer with room for `capacity` bytes to start with (it grows as needed). */
  constructor(capacity = 1024) {
    this.#buf = new Uint8Array(capacity);
    this.#view = new DataView(this.#buf.buffer);
  }

  #room(n: number): void {
    if (this.#at + n <= this.#buf.length) return;
    const grown = new Uint8Array(Math.max(this.#buf.length * 2, this.#at + n));
    grown.set(this.#buf.subarray(0, this.#at));
    this.#buf = grown;
    this.#view = new DataView(grown.buffer);
  }

  /** Zeroes up to the next 4-byte boundary. */
  #pad(): void {
    const to = (this.#at + 3) & ~3;
    this.#room(to - this.#at);
    this.#buf.fill(0, this.#at, to);
    this.#at = to;
  }

  /** Starts a message (its 16-byte header, `NLM_F_REQUEST` added to `flags`); its offset. */
  begin(type: number, flags: number, seq: number): number {
    const at = this.#at;
    this.#room(16);
    this.#view.setUint16(at + 4, type, true);
    this.#view.setUint16(at + 6, flags | NL.F_REQUEST, true);
    this.#view.setUint32(at + 8, seq, true);
    this.#view.setUint32(at + 12, 0, true);
    this.#at += 16;
    return at;
  }

  /** Ends the message begun at `at`: its length is what was written since. */
  end(at: number): void {
    this.#view.setUint32(at, this.#at - at, true);
  }

  /** Writes `bytes` as they are (a family header). */
  raw(bytes: Uint8Array): void {
    this.#room(bytes.length);
    this.#buf.set(bytes, this.#at);
    this.#at += bytes.length;
  }

  /** One attribute of `type` holding `value`, padded to 4 bytes. */
  attr(type: number, value: Uint8Array): void {
    this.#room(4 + value.length);
    this.#view.setUint16(this.#at, 4 + value.length, true);
    this.#view.setUint16(this.#at + 2, type, true);
    this.#buf.set(value, this.#at + 4);
    this.#at += 4 + value.length;
    this.#pad();
  }

  /** A NUL-terminated string attribute. */
  str(type: number, text: string): void {
    const at = this.#at;
    this.#room(4 + text.length * 3 + 1);
    const { written } = UTF8.encodeInto(text, this.#buf.subarray(at + 4));
    this.#buf[at + 4 + written] = 0;
    this.#view.setUint16(at, 4 + written + 1, true);
    this.#view.setUint16(at + 2, type, true);
    this.#at += 4 + written + 1;
    this.#pad();
  }

  /** Opens a nested attribute of `type` (`NLA_F_NESTED`); its offset, for {@link close}. */
  nest(type: number): number {
    const at = this.#at;
    this.#room(4);
    this.#view.setUint16(at + 2, type | NLA_F_NESTED, true);
    this.#at += 4;
    return at;
  }

  /** Closes the nested attribute opened at `at`. */
  close(at: number): void {
    this.#view.setUint16(at, this.#at - at, true);
  }

  /** What was written, in a buffer of its own. */
  bytes(): Uint8Array {
    return this.#buf.slice(0, this.#at);
  }
}
