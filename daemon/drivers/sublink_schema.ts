/**
 * The settings of macvlan and ipvlan attachments (the rest of the config is the usual NetConf).
 * Evaluated only by `deno task gen`; the driver uses the generated validators.
 *
 * @module
 */
import { type Static, Type } from "@sinclair/typebox";

const IFNAME = "^[^\\s/:]{1,15}$";
const MAC = "^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$";

/** The settings of a macvlan attachment (the rest of the config is the usual NetConf). */
export const MacvlanConfSchema = Type.Object({
  type: Type.Literal("macvlan"),
  master: Type.Optional(Type.String({ pattern: IFNAME })),
  mode: Type.Optional(
    Type.Union(["bridge", "private", "vepa", "passthru"].map((m) => Type.Literal(m))),
  ),
  mtu: Type.Optional(Type.Integer({ minimum: 68, maximum: 65535 })),
  runtimeConfig: Type.Optional(Type.Object({ mac: Type.Optional(Type.String({ pattern: MAC })) })),
});

/** The settings of an ipvlan attachment. */
export const IpvlanConfSchema = Type.Object({
  type: Type.Literal("ipvlan"),
  master: Type.Optional(Type.String({ pattern: IFNAME })),
  mode: Type.Optional(Type.Union(["l2", "l3", "l3s"].map((m) => Type.Literal(m)))),
  mtu: Type.Optional(Type.Integer({ minimum: 68, maximum: 65535 })),
});

/** A macvlan or ipvlan attachment's settings. */
export type SublinkConf = Static<typeof MacvlanConfSchema> | Static<typeof IpvlanConfSchema>;
