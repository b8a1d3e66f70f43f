/**
 * The settings of a bridge attachment (a NetworkAttachmentDefinition of type `bridge`). Evaluated
 * only by `deno task gen`; the driver uses the generated validator.
 *
 * @module
 */
import { type Static, Type } from "@sinclair/typebox";

/** The settings of a bridge attachment this driver plugs natively. */
export const NadBridgeConfSchema = Type.Object({
  type: Type.Literal("bridge"),
  bridge: Type.Optional(Type.String({ pattern: "^[^\\s/:]{1,15}$" })),
  isGateway: Type.Optional(Type.Boolean()),
  isDefaultGateway: Type.Optional(Type.Boolean()),
  hairpinMode: Type.Optional(Type.Boolean()),
  mtu: Type.Optional(Type.Integer({ minimum: 68, maximum: 65535 })),
});

/** A bridge attachment's settings. */
export type NadBridgeConf = Static<typeof NadBridgeConfSchema>;
