/**
 * The `delegate` driver: the attachment's config names a standard CNI plugin (bridge, host-device,
 * vlan, …) and that plugin, found in CNI_PATH, does the plumbing. Ferry keeps its result so DEL
 * and CHECK can hand it back as the cached `prevResult`.
 *
 * @module
 */
import type { CniResult } from "../../lib/cni/schemas.ts";
import { delegate } from "../net/delegate.ts";
import type { Plumber } from "../net/plumber.ts";
import {
  type AddContext,
  type Driver,
  type Plugged,
  type RecordContext,
  refuseTakenName,
} from "./driver.ts";

/**
 * Runs the named plugin for each command.
 *
 * @example
 * ```ts
 * const driver = new DelegatedDriver(60_000, plumber);
 * ```
 */
export class DelegatedDriver implements Driver {
  readonly #pluginTimeoutMs: number;
  readonly #links: Pick<Plumber, "inspect">;

  /**
   * Creates the driver; a plugin run is killed after `pluginTimeoutMs`, `links` tells whether
   * an interface name is taken in the pod before the plugin runs.
   */
  constructor(pluginTimeoutMs: number, links: Pick<Plumber, "inspect">) {
    this.#pluginTimeoutMs = pluginTimeoutMs;
    this.#links = links;
  }

  #run(
    ctx: AddContext | RecordContext,
    command: "ADD" | "DEL" | "CHECK",
    prevResult?: CniResult,
  ): Promise<CniResult | undefined> {
    return delegate({
      command,
      config: ctx.conf,
      containerId: ctx.key.containerId,
      netns: ctx.netns,
      ifname: ctx.key.ifname,
      args: ctx.args,
      path: ctx.path,
      prevResult,
      timeoutMs: this.#pluginTimeoutMs,
    });
  }

  /**
   * ADD through the plugin; a failed ADD is followed by the plugin's DEL, as runtimes do. The
   * interface name must be free first, so that DEL can only remove what this ADD made.
   */
  async add(ctx: AddContext): Promise<Plugged> {
    await refuseTakenName(this.#links, ctx);
    try {
      return { result: (await this.#run(ctx, "ADD", ctx.prevResult))! };
    } catch (e) {
      await this.#run(ctx, "DEL").catch(() => {});
      throw e;
    }
  }

  /** DEL through the plugin with the cached result. */
  async del(ctx: RecordContext): Promise<void> {
    await this.#run(ctx, "DEL", ctx.record?.result);
  }

  /** CHECK through the plugin with the expected result. */
  async check(ctx: RecordContext & { netns: string }, expected: CniResult): Promise<void> {
    await this.#run(ctx, "CHECK", expected);
  }
}
