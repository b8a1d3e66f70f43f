/**
 * The shim↔daemon envelope: the one JSON request the shim sends over the unix socket for a CNI
 * invocation, and the reply it gets back. Schemas and derived types.
 *
 * @module
 */
import { type Static, Type } from "@sinclair/typebox";
import { CniResultSchema, NetConfSchema } from "./cni/schemas.ts";
import {
  CONTAINER_ID_MAX_LENGTH,
  CONTAINER_ID_PATTERN,
  IFNAME_PATTERN,
  NETNS_MAX_LENGTH,
  NETNS_PATTERN,
} from "./cni/names.ts";

/**
 * A CNI invocation, forwarded by the shim. Variables a command does not need may be absent. The
 * daemon validates it again: its socket is the trust boundary, not the shim.
 */
export const CniRequestSchema = Type.Object({
  command: Type.Union([
    Type.Literal("ADD"),
    Type.Literal("DEL"),
    Type.Literal("CHECK"),
    Type.Literal("STATUS"),
    Type.Literal("GC"),
  ]),
  containerId: Type.Optional(
    Type.String({ pattern: CONTAINER_ID_PATTERN, maxLength: CONTAINER_ID_MAX_LENGTH }),
  ),
  netns: Type.Optional(Type.String({ pattern: NETNS_PATTERN, maxLength: NETNS_MAX_LENGTH })),
  ifname: Type.Optional(Type.String({ pattern: IFNAME_PATTERN })),
  args: Type.Record(Type.String(), Type.String()),
  path: Type.Array(Type.String()),
  config: NetConfSchema,
}, { $id: "CniRequest", additionalProperties: false });
/** A CNI invocation, forwarded by the shim. */
export type CniRequest = Static<typeof CniRequestSchema>;

/** The daemon's reply: a result (ADD), nothing (other commands), or a CNI error. */
export const CniReplySchema = Type.Object({
  result: Type.Optional(CniResultSchema),
  error: Type.Optional(Type.Object({
    code: Type.Integer({ minimum: 1 }),
    msg: Type.String(),
    details: Type.Optional(Type.String()),
  })),
}, { $id: "CniReply", additionalProperties: false });
/** The daemon's reply. */
export type CniReply = Static<typeof CniReplySchema>;
