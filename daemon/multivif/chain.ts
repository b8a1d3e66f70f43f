/**
 * The plugins of one additional attachment (a NetworkAttachmentDefinition's config or conflist):
 * run in order on ADD with `prevResult` chained, in reverse on DEL, each on CHECK; the first plugin
 * natively when Ferry has a driver for it (macvlan, ipvlan, a plain bridge), every other one as
 * the reference plugin from `CNI_PATH`.
 *
 * @module
 */
import type { PodRef } from "../../lib/cni/args.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { CniResult, NetConf } from "../../lib/cni/schemas.ts";
import { compareVersions, CURRENT_VERSION } from "../../lib/cni/versions.ts";
import type { CniRequest } from "../../lib/envelope.ts";
import type { Attachment, AttachmentKey } from "../records/attachment_store.ts";
import type { Driver } from "../drivers/driver.ts";
import type { AllocationWait } from "../ipam/quarantine.ts";
import { pluginDriver } from "./plugin_driver.ts";
import type { RequestedAttachment } from "./drivers.ts";

/** The drivers a chain's plugins go through. */
export type ChainDrivers = Record<"macvlan" | "ipvlan" | "delegate" | "nad-bridge", Driver>;

/**
 * Runs one attachment's plugins in order (prevResult chained); undoes them on failure. `at` is
 * where: the namespace, the pod, and the default interface it goes with (none for a NAD that
 * replaces the default network).
 */
export async function plugChain(
  drivers: ChainDrivers,
  key: AttachmentKey,
  at: { netns: string; pod?: PodRef; parent?: string; addressWait?: AllocationWait },
  a: RequestedAttachment,
  req: CniRequest,
  podName: string,
): Promise<Attachment> {
  let result: CniResult | undefined;
  const ran: number[] = [];
  try {
    for (const [i, plugin] of a.plugins.entries()) {
      const plugged = await drivers[pluginDriver(plugin, i)].add({
        key,
        netns: at.netns,
        conf: plugin,
        args: req.args,
        path: req.path,
        prevResult: result,
        addressWait: at.addressWait,
      });
      ran.push(i);
      result = plugged.result;
    }
    // What the plugins decided at ADD (a DHCP lease, an IPAM Ferry does not read) is checked now.
    const why = result && a.checkResult?.(result);
    if (why) throw new CniError(CNI_ERROR.INVALID_CONFIG, `refused: ${why}`);
  } catch (e) {
    const partial: Attachment = {
      ...key,
      netns: at.netns,
      network: a.network,
      result: result ?? { cniVersion: CURRENT_VERSION },
      createdAt: new Date().toISOString(),
    };
    for (const i of ran.reverse()) {
      await drivers[pluginDriver(a.plugins[i], i)].del({
        key,
        netns: at.netns,
        conf: a.plugins[i],
        args: req.args,
        path: req.path,
        record: partial,
      }).catch(() => {});
    }
    const code = e instanceof CniError ? e.code : CNI_ERROR.IO_FAILURE;
    const msg = e instanceof Error ? e.message : String(e);
    throw new CniError(
      code,
      `pod ${podName}: network ${a.network} (${a.ifname}) failed: ${msg}`,
      e instanceof CniError ? e.details : "",
    );
  }
  const record: Attachment = {
    ...key,
    netns: at.netns,
    network: a.network,
    driver: pluginDriver(a.plugins[0], 0),
    conf: a.plugins[0],
    chain: a.plugins,
    path: req.path,
    result: result!,
    createdAt: new Date().toISOString(),
  };
  if (at.parent) record.parent = at.parent;
  else record.defaultNetwork = true;
  if (at.pod) record.pod = at.pod;
  return record;
}

/** What a recorded plugin's DEL or CHECK hands its driver. */
function recordContext(record: Attachment, plugin: NetConf, req: CniRequest) {
  return {
    key: { containerId: record.containerId, ifname: record.ifname },
    conf: plugin,
    args: req.args,
    path: record.path ?? req.path,
    record,
  };
}

/** DEL through every plugin of `record`'s chain, the last first. */
export async function unplugChain(
  drivers: ChainDrivers,
  record: Attachment,
  netns: string | undefined,
  req: CniRequest,
): Promise<void> {
  for (const [i, plugin] of [...(record.chain ?? []).entries()].reverse()) {
    await drivers[pluginDriver(plugin, i)].del({ ...recordContext(record, plugin, req), netns });
  }
}

/**
 * CHECK through every plugin of `record`'s chain, in order. A delegated plugin whose config
 * predates CHECK (< 0.4.0) cannot be asked; it is skipped.
 */
export async function checkChain(
  drivers: ChainDrivers,
  record: Attachment,
  netns: string,
  req: CniRequest,
  expected: CniResult,
): Promise<void> {
  for (const [i, plugin] of (record.chain ?? []).entries()) {
    const driver = pluginDriver(plugin, i);
    if (driver === "delegate" && compareVersions(plugin.cniVersion, "0.4.0") < 0) continue;
    await drivers[driver].check({ ...recordContext(record, plugin, req), netns }, expected);
  }
}
