/**
 * JSON Schemas of the CNI wire shapes (spec 0.3.0 to 1.1.0), written with TypeBox so that each
 * TypeScript type is derived from its schema and the two cannot drift. The shim never imports this
 * module at run time (only its types): it uses the validators generated from these schemas into
 * `lib/_generated/`.
 *
 * @module
 */
import { type Static, Type } from "@sinclair/typebox";

const IP_ADDRESS = "^(?:[0-9]{1,3}(?:\\.[0-9]{1,3}){3}|[0-9a-fA-F:.]*:[0-9a-fA-F:.]*)$";
const IP_PREFIX =
  "^(?:[0-9]{1,3}(?:\\.[0-9]{1,3}){3}/[0-9]{1,2}|[0-9a-fA-F:.]*:[0-9a-fA-F:.]*/[0-9]{1,3})$";

/** A network or plugin name, as the spec restricts it. */
export const NETWORK_NAME_PATTERN = "^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$";

/** An interface in a result. */
export const InterfaceSchema = Type.Object({
  name: Type.String({ minLength: 1 }),
  mac: Type.Optional(Type.String()),
  mtu: Type.Optional(Type.Integer({ minimum: 0 })),
  sandbox: Type.Optional(Type.String()),
  socketPath: Type.Optional(Type.String()),
  pciID: Type.Optional(Type.String()),
});
/** An interface in a result. */
export type Interface = Static<typeof InterfaceSchema>;

/** An IP configuration in a result; `version` exists only in 0.3.x/0.4.0 results. */
export const IpConfigSchema = Type.Object({
  version: Type.Optional(Type.Union([Type.Literal("4"), Type.Literal("6")])),
  address: Type.String({ pattern: IP_PREFIX }),
  gateway: Type.Optional(Type.String({ pattern: IP_ADDRESS })),
  interface: Type.Optional(Type.Integer({ minimum: 0 })),
});
/** An IP configuration in a result. */
export type IpConfig = Static<typeof IpConfigSchema>;

/** A route in a result (mtu, advmss, priority, table and scope are 1.1.0). */
export const RouteSchema = Type.Object({
  dst: Type.String({ pattern: IP_PREFIX }),
  gw: Type.Optional(Type.String({ pattern: IP_ADDRESS })),
  mtu: Type.Optional(Type.Integer({ minimum: 0 })),
  advmss: Type.Optional(Type.Integer({ minimum: 0 })),
  priority: Type.Optional(Type.Integer({ minimum: 0 })),
  table: Type.Optional(Type.Integer({ minimum: 0 })),
  scope: Type.Optional(Type.Integer({ minimum: 0 })),
});
/** A route in a result. */
export type Route = Static<typeof RouteSchema>;

/** DNS settings, in configs and results. */
export const DnsSchema = Type.Object({
  nameservers: Type.Optional(Type.Array(Type.String())),
  domain: Type.Optional(Type.String()),
  search: Type.Optional(Type.Array(Type.String())),
  options: Type.Optional(Type.Array(Type.String())),
});
/** DNS settings. */
export type Dns = Static<typeof DnsSchema>;

/** A CNI success result of ADD (any supported version). */
export const CniResultSchema = Type.Object({
  cniVersion: Type.String({ minLength: 1 }),
  interfaces: Type.Optional(Type.Array(InterfaceSchema)),
  ips: Type.Optional(Type.Array(IpConfigSchema)),
  routes: Type.Optional(Type.Array(RouteSchema)),
  dns: Type.Optional(DnsSchema),
}, { $id: "CniResult" });
/** A CNI success result. */
export type CniResult = Static<typeof CniResultSchema>;

/** The network configuration a runtime passes to one plugin on stdin. */
export const NetConfSchema = Type.Object({
  cniVersion: Type.String({ minLength: 1 }),
  name: Type.String({ pattern: NETWORK_NAME_PATTERN }),
  type: Type.String({ pattern: NETWORK_NAME_PATTERN }),
  capabilities: Type.Optional(Type.Record(Type.String(), Type.Boolean())),
  ipam: Type.Optional(Type.Object({ type: Type.String({ minLength: 1 }) })),
  dns: Type.Optional(DnsSchema),
  prevResult: Type.Optional(CniResultSchema),
  runtimeConfig: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  args: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
}, { $id: "NetConf", additionalProperties: true });
/** The network configuration of one plugin invocation. */
export type NetConf = Static<typeof NetConfSchema>;

/** A network configuration list (conflist), as runtimes read from the CNI conf dir. */
export const NetConfListSchema = Type.Object({
  cniVersion: Type.String({ minLength: 1 }),
  cniVersions: Type.Optional(Type.Array(Type.String())),
  name: Type.String({ pattern: NETWORK_NAME_PATTERN }),
  disableCheck: Type.Optional(Type.Boolean()),
  disableGC: Type.Optional(Type.Boolean()),
  plugins: Type.Array(
    Type.Object({ type: Type.String({ pattern: NETWORK_NAME_PATTERN }) }, {
      additionalProperties: true,
    }),
    { minItems: 1 },
  ),
}, { $id: "NetConfList", additionalProperties: true });
/** A network configuration list. */
export type NetConfList = Static<typeof NetConfListSchema>;

/** The spec's error object. */
export const CniErrorSchema = Type.Object({
  cniVersion: Type.String(),
  code: Type.Integer({ minimum: 1 }),
  msg: Type.String(),
  details: Type.Optional(Type.String()),
}, { $id: "CniErrorObject" });

/** The output of VERSION. */
export const VersionInfoSchema = Type.Object({
  cniVersion: Type.String(),
  supportedVersions: Type.Array(Type.String(), { minItems: 1 }),
}, { $id: "VersionInfo" });
/** The output of VERSION. */
export type VersionInfo = Static<typeof VersionInfoSchema>;
