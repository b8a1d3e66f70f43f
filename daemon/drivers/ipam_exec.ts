/**
 * IPAM for natively plugged attachments (macvlan, ipvlan): the attachment's `ipam` section runs
 * the named IPAM plugin from CNI_PATH (host-local, static, dhcp, …) exactly as the reference
 * plugins do — the whole attachment config on stdin, the IPAM plugin's binary exec'ed.
 *
 * @module
 */
import type { CniResult, NetConf } from "../../lib/cni/schemas.ts";
import { compareVersions } from "../../lib/cni/versions.ts";
import { delegate } from "../net/delegate.ts";
import type { AttachmentKey } from "../records/attachment_store.ts";
import type { NativeNadIpam } from "./nad_native_ipam.ts";
import type { AllocationWait } from "../ipam/quarantine.ts";

/** One IPAM call's inputs. */
export interface IpamCall {
  /** The attachment config holding `ipam`. */
  conf: NetConf;
  /** Container ID and interface. */
  key: AttachmentKey;
  /** The namespace path. */
  netns?: string;
  /** CNI_ARGS. */
  args: Record<string, string>;
  /** CNI_PATH. */
  path: string[];
  /** Kills a plugin that runs longer than this (ms). */
  timeoutMs?: number;
  /** Serves whereabouts configs natively (`multiNetwork.whereaboutsIpam: native`). */
  native?: NativeNadIpam;
  /** How long a natively served allocation may wait for the reuse quarantine (ADD only). */
  addressWait?: AllocationWait;
}

function run(command: "ADD" | "DEL" | "CHECK", call: IpamCall, prevResult?: CniResult) {
  return delegate({
    command,
    prevResult,
    config: call.conf,
    plugin: call.conf.ipam!.type,
    containerId: call.key.containerId,
    netns: call.netns,
    ifname: call.key.ifname,
    args: call.args,
    path: call.path,
    timeoutMs: call.timeoutMs,
  });
}

/** Runs the IPAM plugin's ADD; an attachment without `ipam` gets an empty result. */
export async function ipamAdd(call: IpamCall): Promise<CniResult> {
  if (!call.conf.ipam?.type) return { cniVersion: call.conf.cniVersion };
  if (call.native?.serves(call.conf)) return await call.native.add(call);
  return (await run("ADD", call))!;
}

/** Runs the IPAM plugin's DEL (releases the addresses); nothing to do without `ipam`. */
export async function ipamDel(call: IpamCall): Promise<void> {
  if (!call.conf.ipam?.type) return;
  if (call.native?.serves(call.conf)) return await call.native.del(call);
  await run("DEL", call);
}

/**
 * Runs the IPAM plugin's CHECK against the recorded result (the plugin verifies it still holds
 * the addresses); skipped without `ipam` and for configs older than 0.4.0, which have no CHECK.
 */
export async function ipamCheck(call: IpamCall, expected: CniResult): Promise<void> {
  if (!call.conf.ipam?.type || compareVersions(call.conf.cniVersion, "0.4.0") < 0) return;
  if (call.native?.serves(call.conf)) return await call.native.check(call, expected);
  await run("CHECK", call, expected);
}
