/**
 * Which driver plugs each plugin of a NAD's chain: the first runs natively when Ferry can plug it
 * (macvlan, ipvlan, a bridge), every other one is delegated to the reference plugin of its type.
 * Apart from the chain's runner so that the selection side (what a pod asks for) can ask it too.
 *
 * @module
 */
import type { NetConf } from "../../lib/cni/schemas.ts";
import { nativeBridgeConf } from "../drivers/nad_bridge.ts";

/**
 * The driver of a NAD plugin: the first plugin of a chain runs natively when it is macvlan, ipvlan
 * or a bridge the native driver can plug; every other plugin is the reference plugin of its type,
 * delegated.
 */
export function pluginDriver(
  plugin: NetConf,
  index: number,
): "macvlan" | "ipvlan" | "delegate" | "nad-bridge" {
  if (index === 0 && (plugin.type === "macvlan" || plugin.type === "ipvlan")) return plugin.type;
  if (index === 0 && nativeBridgeConf(plugin)) return "nad-bridge";
  return "delegate";
}
