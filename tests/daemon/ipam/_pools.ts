/**
 * Pool IPAM against the API under test (the stand-in, or the real server in `test:real`): the
 * CRDs installed, a pool with a CIDR of its own, watches feeding a PoolMap, and nodes' IPAMs
 * opened on it. Everything the test made in the API is removed afterwards.
 *
 * @module
 */
import { getLogger } from "@logtape/logtape";
import { kubeBlockApi, poolInformers } from "../../../daemon/ipam/pool_api.ts";
import { IPBLOCKS, IPPOOLS } from "../../../daemon/k8s/resources.ts";
import { installPoolCrds } from "../../../daemon/dev/crds.ts";
import { type BlockApi, BlockIpam } from "../../../daemon/ipam/block_ipam.ts";
import type { IpBlockObject, IpPoolObject } from "../../../daemon/ipam/ip_pools.ts";
import type { PoolMap } from "../../../daemon/ipam/pool_map.ts";
import { type KubeTarget, withKube } from "../k8s/_target.ts";
import type { IpamClock } from "../../../daemon/ipam/quarantine.ts";

/** A fresh IPv4 /24 unlikely to be used by another test run on a shared real server. */
export function freshCidr24(): string {
  const r = crypto.getRandomValues(new Uint8Array(2));
  return `10.${100 + (r[0] % 100)}.${r[1]}.0/24`;
}

/** What a pool test gets. */
export interface PoolEnv {
  /** The API target. */
  k: KubeTarget;
  /** The pool's name. */
  pool: string;
  /** The watches' map. */
  map: PoolMap;
  /** The block API. */
  api: BlockApi;
  /** Gateway changes, by node (its short name), as `+cidr` / `-cidr`. */
  gateways: Map<string, string[]>;
  /**
   * The node name a short name (`n1`) stands for in this test: unique to it, so that nothing
   * another test run left in a shared real server (a block of `n1`) is taken for this test's.
   */
  node(short: string): string;
  /**
   * Opens the IPAM of node `node` (a short name, see {@link PoolEnv.node}) on `stateDir` (the
   * pool's view unless another is given), using the test's pool unless `pools` names others.
   */
  open(
    node: string,
    stateDir: string,
    opts?: {
      releaseAfterMs?: number;
      view?: BlockIpamView;
      api?: BlockApi;
      pools?: string[];
      podOf?: Parameters<typeof BlockIpam.open>[0]["podOf"];
      reuseDelayMs?: number;
      clock?: IpamClock;
    },
  ): Promise<BlockIpam>;
  /** The blocks of the test's pool (or of pool `of`) in the API now. */
  blocks(of?: string): Promise<IpBlockObject[]>;
  /** Waits until the watch shows `n` blocks of the pool. */
  untilBlocks(n: number): Promise<void>;
  /**
   * Creates another pool of `spec` named after the test's (`<pool>-<suffix>`), once the watch
   * shows it; it and its blocks are removed with the test's.
   */
  extraPool(suffix: string, spec: IpPoolObject["spec"]): Promise<string>;
}

/** The view a node's IPAM reads pools and blocks through. */
export type BlockIpamView = Parameters<typeof BlockIpam.open>[0]["view"];

/**
 * Runs `fn` with a pool of `spec` (a unique name) on the API under test.
 *
 * @example
 * ```ts
 * await withPool({ cidrs: [freshCidr24()], blockSize: { ipv4: 28 } }, async (env) => { … });
 * ```
 */
export function withPool<T>(
  spec: IpPoolObject["spec"],
  fn: (env: PoolEnv) => Promise<T>,
): Promise<T> {
  return withKube(async (k) => {
    await installPoolCrds(k.client);
    const pool = `p-${k.id}`;
    await k.client.create(IPPOOLS, { metadata: { name: pool }, spec } as IpPoolObject);
    const { map, informers } = poolInformers(k.client, getLogger(["ferry", "watch"]), {
      watchTimeoutSeconds: 60,
    });
    for (const i of informers) i.start();
    const opened: BlockIpam[] = [];
    const extras: string[] = [];
    // A claim Lease of the test's own: nodes of one test share it, other runs never wait on it.
    const api = kubeBlockApi(k.client, { namespace: "default", name: `ferry-ipam-claims-${k.id}` });
    const gateways = new Map<string, string[]>();
    const node = (short: string) => `${short}-${k.id}`;
    const blocks = async (of = pool) =>
      (await k.client.listAll<IpBlockObject>(IPBLOCKS, {})).items.filter((b) =>
        b.spec?.pool === of
      );
    try {
      await Promise.all(informers.map((i) => i.synced));
      await until(() => !!map.pool(pool));
      return await fn({
        k,
        pool,
        map,
        api,
        gateways,
        node,
        async open(short, stateDir, opts = {}) {
          const log = gateways.get(short) ?? [];
          gateways.set(short, log);
          const ipam = await BlockIpam.open({
            nodeName: node(short),
            poolNames: opts.pools ?? [pool],
            api: opts.api ?? api,
            view: opts.view ?? map,
            stateDir,
            gateways: {
              add: (c) => Promise.resolve(void log.push(`+${c}`)),
              remove: (c) => Promise.resolve(void log.push(`-${c}`)),
            },
            releaseAfterMs: opts.releaseAfterMs ?? 600_000,
            podOf: opts.podOf,
            reuseDelayMs: opts.reuseDelayMs,
            clock: opts.clock,
            logger: getLogger(["ferry", "ipam"]),
          });
          opened.push(ipam);
          return ipam;
        },
        blocks,
        async untilBlocks(n) {
          await until(() => map.blocks().filter((b) => b.pool === pool).length === n);
        },
        async extraPool(suffix, spec) {
          const name = `${pool}-${suffix}`;
          await k.client.create(IPPOOLS, { metadata: { name }, spec } as IpPoolObject);
          extras.push(name);
          await until(() => !!map.pool(name));
          return name;
        },
      });
    } finally {
      // Bounded: a close that never settles fails its test (above) instead of hanging the run.
      for (const ipam of opened) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([ipam.close(), new Promise((r) => timer = setTimeout(r, 10_000))]);
        clearTimeout(timer);
      }
      await Promise.all(informers.map((i) => i.stop()));
      for (const name of [pool, ...extras]) {
        for (const b of await blocks(name)) {
          await k.client.delete(IPBLOCKS, undefined, b.metadata!.name!).catch(() => {});
        }
        await k.client.delete(IPPOOLS, undefined, name).catch(() => {});
      }
    }
  });
}

/** Waits (up to 20 s) for `cond`. */
export async function until(cond: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
