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

  /** ADD through the plugin; a failed ADD is followed by the plugin's DEL, as runtimes do. */
  async add(ctx: AddContext): Promise<Plugged> {
    const call = {
      config: ctx.conf,
      containerId: ctx.key.containerId,
      netns: ctx.netns,
      ifname: ctx.key.ifname,
      args: ctx.args,
      path: ctx.path,
    };
    try {
      const result = await delegate({
        ...call,
        command: "ADD",
        prevResult: ctx.prevResult,
        signal: this.#deadline(),
      });
      return { result: result! };
    } catch (e) {
      await delegate({ ...call, command: "DEL", signal: this.#deadline() }).catch(() => {});
      throw e;
    }
  }

  /** DEL through the plugin with the cached result. */
  async del(ctx: RecordContext): Promise<void> {
    await delegate({
      command: "DEL",
      config: ctx.conf,
      containerId: ctx.key.containerId,
      netns: ctx.netns,
      ifname: ctx.key.ifname,
      args: ctx.args,
      path: ctx.path,
      prevResult: ctx.record?.result,
      signal: this.#deadline(),
    });
  }

  /** CHECK through the plugin with the expected result. */
  async check(ctx: RecordContext & { netns: string }, expected: CniResult): Promise<void> {
    await delegate({
      command: "CHECK",
      config: ctx.conf,
      containerId: ctx.key.containerId,
      netns: ctx.netns,
      ifname: ctx.key.ifname,
      args: ctx.args,
      path: ctx.path,
      prevResult: expected,
      signal: this.#deadline(),
    });
  }
}
