/**
 * The keys of a plugin config that Ferry reads itself, spelled as it reads them: the native
 * macvlan, ipvlan and bridge drivers' settings, the bridge settings that send a config to the
 * reference plugin, the IPAM types served in the daemon (whereabouts, `ferry`), and the runtime's
 * part (`capabilities`, `runtimeConfig`, `args`). The reference plugins read their config with
 * Go's decoder, which ignores the case of a key (`Master` and `maſter` are `master`); a reader
 * that took `master` only would read less than the plugin it stands in for, and less than the
 * NAD guard checks (which reads keys folded: a macvlan NAD with `Master` would be checked on the
 * device it names and plugged on the default route's). So a config is respelled with these keys
 * (`lib/cni/json_keys.ts`) before Ferry reads it: when a NAD is read, and again when a native
 * driver parses its config (an operator's `attachment`, a record of an older Ferry).
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { NetConf } from "../../lib/cni/schemas.ts";
import { respelled, type Spelling } from "../../lib/cni/json_keys.ts";

/**
 * Settings of the reference bridge plugin the native bridge driver does not implement: present
 * and set, they send the attachment to the reference plugin.
 */
export const BRIDGE_DELEGATED_KEYS: readonly string[] = [
  "vlan",
  "vlanTrunk",
  "preserveDefaultVlan",
  "ipMasq",
  "ipMasqBackend",
  "promiscMode",
  "macspoofchk",
  "enabledad",
  "forceAddress",
  "disableContainerInterface",
  "portIsolation",
];

const RANGE: Spelling = { range: null, range_start: null, range_end: null, exclude: null };

/**
 * The `ipam` keys Ferry reads: the type (which IPAM runs), host-local's `dataDir` (which the NAD
 * guard sets), and the whereabouts and `ferry` keys the daemon serves (`nad_ipam.ts`,
 * `nad_ferry_ipam.ts`).
 */
export const IPAM_KEYS: Spelling = {
  type: null,
  dataDir: null,
  ...RANGE,
  ipRanges: RANGE,
  network_name: null,
  enable_overlapping_ranges: null,
  configuration_path: null,
  addresses: { address: null, gateway: null },
  gateway: null,
  routes: { dst: null, gw: null },
  dns: { nameservers: null, domain: null, search: null, options: null },
  pool: null,
  pools: null,
};

/** Every key of a plugin config Ferry reads (see the module doc). */
export const NATIVE_KEYS: Spelling = {
  cniVersion: null,
  name: null,
  type: null,
  // The runtime's part: which capabilities a plugin takes (their names are a map's keys, read as
  // written), what the selection gives it.
  capabilities: null,
  runtimeConfig: { mac: null, ips: null },
  args: { cni: { ips: null, mac: null } },
  // macvlan and ipvlan (sublink_schema.ts).
  master: null,
  mode: null,
  mtu: null,
  // bridge (nad_bridge_schema.ts), and what sends it to the reference plugin.
  bridge: null,
  isGateway: null,
  isDefaultGateway: null,
  hairpinMode: null,
  ...Object.fromEntries(BRIDGE_DELEGATED_KEYS.map((k) => [k, null])),
  ipam: IPAM_KEYS,
};

/**
 * `conf` with the keys Ferry reads spelled as it reads them ({@link NATIVE_KEYS}); every other
 * key as written.
 *
 * @throws {CniError} code 7 when two keys of one object are one key to a Go plugin.
 * @example
 * ```ts
 * nativeSpelled({ cniVersion: "1.0.0", name: "n", type: "macvlan", Master: "eth1" } as NetConf);
 * // { cniVersion: "1.0.0", name: "n", type: "macvlan", master: "eth1" }
 * ```
 */
export function nativeSpelled<T extends NetConf>(conf: T): T {
  const { value, clash } = respelled(conf, NATIVE_KEYS);
  if (clash) {
    throw new CniError(
      CNI_ERROR.INVALID_CONFIG,
      `network ${conf.name}: its keys ${JSON.stringify(clash.keys[0])} and ` +
        `${JSON.stringify(clash.keys[1])} (${clash.at}) are one key to a Go plugin`,
    );
  }
  return value as T;
}
