/**
 * Static addresses of NAD networks (`ips` of a pod's selection), reserved in the config's address
 * space: in the node's own block when one holds the address, else as a single-address block of
 * its own, claimed and settled as any block (`nad_block_claims.ts`); an address another pod or
 * another node's block holds is refused, one this node released less than the quarantine ago is
 * waited for (`nad_quarantine_waits.ts`).
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import { type Cidr, cidrContains, formatIp, type IpAddr, parseCidr, parseIp } from "./cidr.ts";
import { errorText } from "./claim_protocol.ts";
import type { Owner, PoolRange } from "./local_pool.ts";
import { STATIC_RANGE } from "./nad_blocks.ts";
import { createNadBlock, settleNadClaim, unavailable } from "./nad_block_claims.ts";
import { type NadIpamConfig, spaceKey } from "./nad_ipam.ts";
import type { NodeNadBlocks } from "./nad_node_blocks.ts";
import type { NadQuarantineWaits } from "./nad_quarantine_waits.ts";
import type { AllocationWait } from "./quarantine.ts";

/**
 * Reserves a static address (`text`, `address` or `address/prefix`) in `config`'s space for
 * `owner` on the node's `blocks`; returns it parsed. One this node released less than the
 * quarantine ago is waited for as `wait` allows (`waits`).
 *
 * @throws {CniError} 7 when another pod holds it or it lies in another node's block; 11 when it
 * comes out of quarantine after the deadline (the pod's next ADD gets it).
 */
export async function reserveStatic(
  blocks: NodeNadBlocks,
  waits: NadQuarantineWaits,
  config: NadIpamConfig,
  network: string,
  owner: Owner,
  text: string,
  wait: AllocationWait | undefined,
): Promise<IpAddr> {
  let ip: IpAddr;
  let prefix: number;
  try {
    const slash = text.indexOf("/");
    ip = parseIp(slash < 0 ? text : text.slice(0, slash));
    prefix = slash < 0 ? (ip.family === 4 ? 32 : 128) : parseCidr(text).prefix;
  } catch (e) {
    throw new CniError(CNI_ERROR.INVALID_CONFIG, `network ${network}: ips: ${errorText(e)}`);
  }
  const addr = formatIp(ip);
  const range = config.ranges.find((r) => cidrContains(r.cidr, ip!));
  const space = range ? spaceKey(config, range) : spaceKey(config, {
    cidr: { network: ip, prefix: ip.family === 4 ? 32 : 128 },
    start: ip,
    end: ip,
    excluded: [],
  });
  const refuse = (why: string) =>
    new CniError(CNI_ERROR.INVALID_CONFIG, `network ${network}: static address ${addr}: ${why}`);
  const inBlock = () =>
    [...blocks.blocks.values()].find((b) => b.network === space && cidrContains(b.cidr, ip));
  for (let b = inBlock(); b; b = inBlock()) {
    if (b.local.addressOf(owner) === addr) return ip;
    if (b.lost) throw refuse(`it lies in a block this node lost (${b.lost})`);
    const until = b.local.quarantinedUntil(addr);
    if (until !== undefined) {
      await waits.forStatic(until, `network ${network}: static address ${addr}`, wait);
      continue; // its block may have been given back meanwhile
    }
    if (!(await b.local.hold(addr, owner))) throw refuse("another pod holds it");
    blocks.kick(b);
    return ip;
  }
  const single: Cidr = { network: ip, prefix: ip.family === 4 ? 32 : 128 };
  const created = await createNadBlock(blocks, space, STATIC_RANGE, single, []);
  if (!created) throw refuse("another pod holds it");
  const settled = await settleNadClaim(blocks, created.obj, single, created.turn).catch((e) => {
    throw unavailable(blocks, e, `cannot reserve static address ${addr}`);
  });
  if (!settled) {
    throw refuse("it lies in a block another node holds for its pods");
  }
  const pool: PoolRange = {
    subnet: { network: ip, prefix },
    start: ip,
    end: ip,
    gateway: { family: ip.family, value: ip.value ^ 1n },
  };
  const held = await blocks.open(space, STATIC_RANGE, single, pool, created.obj);
  if (!(await held.local.hold(addr, owner))) throw refuse("another pod holds it");
  blocks.kick(held);
  return ip;
}
