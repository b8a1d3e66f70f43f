/**
 * The node's routes to other nodes' pods, in the main table, marked with Ferry's own route
 * protocol number ({@link FERRY_ROUTE_PROTOCOL}) so that Ferry lists, replaces and removes only
 * its own. Through iproute2 batches (off the CNI request path: a control loop).
 *
 * @module
 */
import { IpCommandError, type IpRunner } from "../net/ip_runner.ts";
import type { NodeRoute } from "./routes.ts";

/** The `proto` of Ferry's routes (`ip route show proto 199`). */
export const FERRY_ROUTE_PROTOCOL = 199;

/** A route the kernel would not set (or remove), and why. */
export interface RouteFailure {
  /** The route. */
  route: NodeRoute;
  /** Whether it was to be set or removed. */
  op: "replace" | "remove";
  /** The kernel's answer, e.g. `route 10.244.9.0/24 via 198.18.9.11: ENETUNREACH: …`. */
  reason: string;
}

/** Lists and changes Ferry's routes. */
export interface RouteTable {
  /** Ferry's routes now, both families. */
  list(): Promise<NodeRoute[]>;
  /**
   * Adds or replaces routes, and deletes others, each on its own: one the kernel refuses (a next
   * hop it cannot reach) leaves the others set; resolves to those refused, with why. Rejects only
   * when none could be tried.
   */
  apply(replace: NodeRoute[], remove: NodeRoute[]): Promise<RouteFailure[]>;
}

/** The message of a thrown value. */
export function reasonOf(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  const stderr = (e as { stderr?: unknown }).stderr;
  return typeof stderr === "string" && stderr.trim() ? stderr.trim() : e.message;
}

/**
 * The iproute2 route table.
 *
 * @example
 * ```ts
 * const table = new IpRouteTable(new SpawningIpRunner());
 * await table.apply([{ dst: "10.244.2.0/24", via: "192.0.2.12" }], []);
 * ```
 */
export class IpRouteTable implements RouteTable {
  readonly #ip: IpRunner;

  /** Creates the table on `ip`. */
  constructor(ip: IpRunner) {
    this.#ip = ip;
  }

  /** Reads `ip route show proto 199` for IPv4 and IPv6. */
  async list(): Promise<NodeRoute[]> {
    const out: NodeRoute[] = [];
    for (const family of [4, 6] as const) {
      const text = await this.#ip.batch([`route show proto ${FERRY_ROUTE_PROTOCOL}`], {
        json: true,
        family,
      });
      for (const line of text.split("\n").filter((l) => l.trim())) {
        for (
          const r of JSON.parse(line) as {
            dst: string;
            gateway?: string;
            dev?: string;
            flags?: string[];
          }[]
        ) {
          if (!r.gateway) continue;
          // Onlink routes name their device (the overlay's); plain ones go wherever the next hop is.
          out.push(
            r.flags?.includes("onlink") && r.dev
              ? { dst: r.dst, via: r.gateway, dev: r.dev }
              : { dst: r.dst, via: r.gateway },
          );
        }
      }
    }
    return out;
  }

  /**
   * One batch of replaces (when it fails, each route again on its own, to tell which the kernel
   * refuses), then deletions (a missing route to delete is fine).
   */
  async apply(replace: NodeRoute[], remove: NodeRoute[]): Promise<RouteFailure[]> {
    const line = (r: NodeRoute) =>
      `route replace ${r.dst} via ${r.via}${
        r.dev ? ` dev ${r.dev} onlink` : ""
      } proto ${FERRY_ROUTE_PROTOCOL}`;
    const failures: RouteFailure[] = [];
    const batched = !replace.length || await this.#ip.batch(replace.map(line)).then(
      () => true,
      (e) => {
        if (!(e instanceof IpCommandError)) throw e;
        return false;
      },
    );
    if (!batched) {
      for (const route of replace) {
        await this.#ip.batch([line(route)]).catch((e) => {
          if (!(e instanceof IpCommandError)) throw e;
          failures.push({ route, op: "replace", reason: `${line(route)}: ${reasonOf(e)}` });
        });
      }
    }
    for (const route of remove) {
      await this.#ip.batch([`route del ${route.dst} proto ${FERRY_ROUTE_PROTOCOL}`]).catch((e) => {
        if (!(e instanceof IpCommandError)) throw e;
        if (/No such process/.test(e.stderr)) return;
        failures.push({ route, op: "remove", reason: `route del ${route.dst}: ${reasonOf(e)}` });
      });
    }
    return failures;
  }
}
