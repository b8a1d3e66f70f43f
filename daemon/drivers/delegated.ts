/**
 * The `delegate` driver: the attachment's config names a standard CNI plugin (bridge, host-device,
 * vlan, …) and that plugin, found in CNI_PATH, does the plumbing. Ferry keeps its result so DEL
 * and CHECK can hand it back as the cached `prevResult`.
 *
 * @module
 */
import type { CniResult } from "../../lib/cni/schemas.ts";
import { delegate } from "../net/delegate.ts";
import type { AddContext, Driver, Plugged, RecordContext } from "./driver.ts";
import type { Deadline } from "./sublink.ts";

/**
 * Runs the named plugin for each command.
 *
 * @example
 * ```ts
 * const driver = new DelegatedDriver(() => AbortSignal.timeout(60_000));
 * ```
 */
export class DelegatedDriver implements Driver {
  readonly #deadline: Deadline;

  /** Creates the driver; `deadline` gives each plugin run its abort signal. */
  constructor(deadline: Deadline) {
    this.#deadline = deadline;
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
      signal: this.#deadline(),
    });
  }

  /** ADD through the plugin; a failed ADD is followed by the plugin's DEL, as runtimes do. */
  async add(ctx: AddContext): Promise<Plugged> {
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
