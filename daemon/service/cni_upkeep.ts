/**
 * The CNI commands that look after what is plugged rather than plug: CHECK (the live interface
 * against its result), STATUS (whether ADD can be served), GC (what the runtime's valid list
 * does not name), and the reconcile loop's and the sweep's releases (attachments never DELeted,
 * links and addresses no record names).
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { CniResult } from "../../lib/cni/schemas.ts";
import { upgradeResult } from "../../lib/cni/versions.ts";
import type { CniRequest } from "../../lib/envelope.ts";
import type { Attachment, AttachmentKey } from "../records/attachment_store.ts";
import { checkChain } from "../multivif/chain.ts";
import { need, selectDriver, type ServiceState } from "./service_state.ts";

/** CHECK, STATUS, GC and the releases of the reconcile loop and the sweep. */
export class CniUpkeep {
  readonly #s: ServiceState;

  /** The upkeep over the service's shared state. */
  constructor(state: ServiceState) {
    this.#s = state;
  }

  /**
   * Releases an attachment the runtime never DELeted (the reconcile loop and the sweep): under the
   * container's lock, and only when `stale` still holds for the record found then (an ADD or DEL
   * may have come in meanwhile). The DEL is made from the record: its network, driver config,
   * pod and CNI_PATH.
   *
   * @returns the record released, or undefined when there was nothing (stale) to release.
   */
  releaseStale(
    key: AttachmentKey,
    stale: (record: Attachment | undefined) => boolean | Promise<boolean>,
  ): Promise<Attachment | undefined> {
    return this.#s.locks.run(key.containerId, async () => {
      const record = this.#s.d.store.get(key);
      if (!record || !(await stale(record))) return undefined;
      const args: Record<string, string> = {};
      if (record.pod) {
        args.K8S_POD_NAMESPACE = record.pod.namespace;
        args.K8S_POD_NAME = record.pod.name;
        if (record.pod.uid) args.K8S_POD_UID = record.pod.uid;
      }
      const req: CniRequest = {
        command: "DEL",
        containerId: key.containerId,
        ifname: key.ifname,
        netns: record.netns,
        args,
        path: record.path ?? [],
        config: {
          cniVersion: record.result.cniVersion ?? "1.1.0",
          name: record.network,
          type: "ferry",
        },
      };
      await this.#s.release(key, req);
      return record;
    });
  }

  /**
   * The sweep's second half: Ferry's host links and default-network addresses that no attachment
   * names (an ADD killed between plugging and recording, a record lost) are removed once they
   * have been seen orphaned for `graceMs` (`seen` keeps when each was first seen, across sweeps).
   * What an ADD in flight has plugged is never an orphan, however long that ADD takes (it counts
   * as named); an address is released under its container's lock and only while no record names
   * it.
   *
   * @returns how many links and addresses were removed.
   */
  async sweepOrphans(
    seen: Map<string, number>,
    graceMs: number,
  ): Promise<{ links: string[]; addresses: string[] }> {
    const bridge = this.#s.d.network.current;
    const out = { links: [] as string[], addresses: [] as string[] };
    if (!bridge) return out;
    const now = Date.now();
    const { links, owners } = await bridge.orphans(this.#s.d.store.list(), [
      ...this.#s.d.store.damaged(),
      ...this.#s.adding.values(),
    ]);
    const current = new Set([
      ...links.map((l) => `link ${l}`),
      ...owners.map((o) => `owner ${o.containerId}/${o.ifname}`),
    ]);
    for (const k of [...seen.keys()]) if (!current.has(k)) seen.delete(k);
    const old = (k: string) => {
      if (!seen.has(k)) seen.set(k, now);
      return now - seen.get(k)! >= graceMs;
    };
    for (const link of links) {
      if (!old(`link ${link}`)) continue;
      await bridge.removeHostLink(link);
      seen.delete(`link ${link}`);
      out.links.push(link);
    }
    for (const owner of owners) {
      const k = `owner ${owner.containerId}/${owner.ifname}`;
      if (!old(k)) continue;
      await this.#s.locks.run(owner.containerId, async () => {
        if (this.#s.d.store.get(owner) || !bridge.holds(owner)) return;
        const ip = bridge.addressesOf(owner);
        if (await bridge.releaseOwner(owner)) out.addresses.push(...ip);
      });
      seen.delete(k);
    }
    if (out.links.length || out.addresses.length) {
      this.#s.d.logger.warn(
        "sweep: removed host links {links} and released addresses {addresses} that no attachment named",
        { links: out.links.join(", ") || "none", addresses: out.addresses.join(", ") || "none" },
      );
    }
    return out;
  }

  /** Compares the live interface with the previous result (or the recorded one). */
  async check(req: CniRequest, signal?: AbortSignal): Promise<void> {
    const key = this.#s.key(req);
    const netns = need(req, "netns");
    await this.#s.d.netns.require(netns, true);
    return await this.#s.locks.run(key.containerId, async () => {
      const record = this.#s.d.store.get(key);
      if (!record) {
        throw new CniError(
          CNI_ERROR.UNKNOWN_CONTAINER,
          `no interface ${key.ifname} recorded for ${key.containerId}`,
        );
      }
      const expected = req.config.prevResult ? upgradeResult(req.config.prevResult) : record.result;
      await this.#checkRecord(record, netns, req, expected, signal);
      // Every interface plugged with it (multi-VIF), each against its own recorded result.
      for (const child of this.#s.d.store.ofContainer(key.containerId)) {
        if (child.parent !== key.ifname) continue;
        try {
          await this.#checkRecord(child, netns, req, child.result, signal);
        } catch (e) {
          const msg = e instanceof Error ? e.message : String(e);
          throw new CniError(
            e instanceof CniError ? e.code : CNI_ERROR.CHECK_MISMATCH,
            `network ${child.network} (${child.ifname}): ${msg}`,
          );
        }
      }
    }, signal);
  }

  /** Checks one attachment: through its driver, or each plugin of its chain in order. */
  async #checkRecord(
    record: Attachment,
    netns: string,
    req: CniRequest,
    expected: CniResult,
    signal?: AbortSignal,
  ): Promise<void> {
    const key = { containerId: record.containerId, ifname: record.ifname };
    if (!record.chain) {
      await (await this.#s.driver(record.driver ?? "bridge", signal)).check({
        key,
        netns,
        conf: record.conf ?? req.config,
        args: req.args,
        path: req.path,
        record,
      }, expected);
      return;
    }
    await checkChain(this.#s.d.drivers, record, netns, req, expected);
  }

  /** Throws code 50 when ADD cannot be served now. */
  status(): void {
    const waiting = this.#s.d.network.waitingFor;
    if (waiting) {
      throw new CniError(
        CNI_ERROR.PLUGIN_NOT_AVAILABLE,
        `the default network is not open: ${waiting}`,
      );
    }
    if (!this.#s.d.isReady()) {
      throw new CniError(CNI_ERROR.PLUGIN_NOT_AVAILABLE, "the Ferry daemon is not ready");
    }
    if ((this.#s.d.network.current?.free ?? 0) <= 0) {
      throw new CniError(CNI_ERROR.PLUGIN_NOT_AVAILABLE, "no free address on this node");
    }
  }

  /** Releases every attachment of this network that the runtime's valid list does not name. */
  async gc(req: CniRequest): Promise<void> {
    const listed = (req.config as Record<string, unknown>)["cni.dev/valid-attachments"];
    if (listed !== undefined && !Array.isArray(listed)) {
      throw new CniError(CNI_ERROR.INVALID_CONFIG, "cni.dev/valid-attachments must be a list");
    }
    const valid = new Set(
      ((listed ?? []) as { containerID?: string; ifname?: string }[]).map((a) =>
        `${a.containerID}/${a.ifname}`
      ),
    );
    const stale = new Map<string, AttachmentKey>();
    for (const a of this.#s.d.store.list()) {
      if (a.network === req.config.name) stale.set(`${a.containerId}/${a.ifname}`, a);
    }
    // Addresses of the default network's pools without a record (a crash between allocating and
    // recording) are this node's to give back, but only a GC of the default network sees them.
    const defaultNetwork = selectDriver(req.config).driver === "bridge";
    const bridge = this.#s.d.network.current;
    for (const owner of defaultNetwork ? bridge?.owners() ?? [] : []) {
      if (!this.#s.d.store.get(owner)) stale.set(`${owner.containerId}/${owner.ifname}`, owner);
    }
    for (const [id, key] of stale) {
      if (valid.has(id)) continue;
      await this.#s.locks.run(key.containerId, async () => {
        // Looked at again under the lock: an ADD may have recorded it meanwhile.
        const now = this.#s.d.store.get(key);
        if (now && now.network !== req.config.name) return;
        if (!now && !bridge?.holds(key)) return;
        await this.#s.release(key, req);
      });
    }
  }
}
