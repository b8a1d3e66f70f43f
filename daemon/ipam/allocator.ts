/**
 * What the default network's driver allocates addresses through: one allocator per family. In
 * `local` and `kubernetes` IPAM modes it is one fixed range ({@link RangeAllocator}); in `pool`
 * mode it is the node's blocks of a cluster pool, growing and shrinking as the node needs
 * (`block_ipam.ts`).
 *
 * @module
 */
import type { PodRef } from "../../lib/cni/args.ts";
import { formatCidr, formatIp } from "./cidr.ts";
import type { LocalPool, Owner } from "./local_pool.ts";
import { type AllocationWait, waitOutQuarantine } from "./quarantine.ts";

/** An address handed out, with what the pod's interface needs to use it. */
export interface Lease {
  /** The address. */
  ip: string;
  /** The prefix length of its subnet (the range, or the block). */
  prefix: number;
  /** The gateway on the node bridge. */
  gateway: string;
}

/** Hands out the addresses of one family. */
export interface FamilyAllocator {
  /** 4 or 6. */
  readonly family: 4 | 6;
  /**
   * An address for `owner` (the same one again for an owner that holds one). When the only free
   * addresses are in the reuse quarantine, it waits for the earliest to come out as `wait`
   * allows (see `quarantine.ts`); without `wait` it does not wait.
   *
   * @throws {import("../../lib/cni/errors.ts").CniError} code 101 when nothing is free (before
   * the deadline of `wait`).
   */
  allocate(owner: Owner, pod?: PodRef, wait?: AllocationWait): Promise<Lease>;
  /** Releases what `owner` holds; returns the address released, if any. */
  release(owner: Owner): Promise<string | undefined>;
  /** The address `owner` holds, if any. */
  addressOf(owner: Owner): string | undefined;
  /** Every (address, owner) held. */
  allocations(): { ip: string; owner: Owner }[];
  /**
   * Whether `owner`'s address was adopted from the cluster's record (a block object whose node had
   * lost its files) rather than allocated here: it has no attachment record on this node, yet it
   * is another pod's, so the sweeps of unrecorded owners must leave it.
   */
  adopted?(owner: Owner): boolean;
  /** Settles allocations whose files name no owner (see `LocalPool.repair`). */
  repair(holders: Map<string, Owner>): Promise<{ restored: string[]; freed: string[] }>;
  /** Addresses free now (a pool allocator may claim more). */
  readonly free: number;
  /** The subnets addresses come from now, as CIDR text. */
  subnets(): string[];
  /** The gateway addresses the bridge holds, as `address/prefix`. */
  gateways(): string[];
  /** Per range (or block): addresses in use and free now. */
  usage(): { range: string; used: number; free: number }[];
}

/**
 * One fixed range, kept in a {@link LocalPool}.
 *
 * @example
 * ```ts
 * const v4 = new RangeAllocator(await LocalPool.open(dir, defaultRange(parseCidr("10.244.1.0/24"))));
 * (await v4.allocate({ containerId: "c1", ifname: "eth0" })).ip; // "10.244.1.2"
 * ```
 */
export class RangeAllocator implements FamilyAllocator {
  readonly #pool: LocalPool;

  /** Wraps `pool`. */
  constructor(pool: LocalPool) {
    this.#pool = pool;
  }

  /** The range's family. */
  get family(): 4 | 6 {
    return this.#pool.range.subnet.network.family;
  }

  /** Allocates in the range, waiting out the quarantine as `wait` allows. */
  async allocate(owner: Owner, _pod?: PodRef, wait?: AllocationWait): Promise<Lease> {
    const pool = this.#pool;
    const ip = await waitOutQuarantine(
      () => pool.allocate(owner),
      () => pool.quarantineEndsAt(),
      wait,
      pool.clock,
    );
    const { subnet, gateway } = this.#pool.range;
    return { ip, prefix: subnet.prefix, gateway: formatIp(gateway) };
  }

  /** Releases in the range. */
  release(owner: Owner): Promise<string | undefined> {
    return this.#pool.release(owner);
  }

  /** The address `owner` holds. */
  addressOf(owner: Owner): string | undefined {
    return this.#pool.addressOf(owner);
  }

  /** Every allocation. */
  allocations(): { ip: string; owner: Owner }[] {
    return this.#pool.allocations();
  }

  /** Settles unreadable allocation files. */
  repair(holders: Map<string, Owner>): Promise<{ restored: string[]; freed: string[] }> {
    return this.#pool.repair(holders);
  }

  /** Free addresses. */
  get free(): number {
    return this.#pool.free;
  }

  /** The range's subnet. */
  subnets(): string[] {
    return [formatCidr(this.#pool.range.subnet)];
  }

  /** The range's use. */
  usage(): { range: string; used: number; free: number }[] {
    return [{ range: this.subnets()[0], used: this.#pool.held, free: this.#pool.free }];
  }

  /** The range's gateway. */
  gateways(): string[] {
    const { gateway, subnet } = this.#pool.range;
    return [`${formatIp(gateway)}/${subnet.prefix}`];
  }
}
