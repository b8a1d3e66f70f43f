/**
 * This daemon's claim to be its node, held through the API: a Lease `ferry-node-<node>` whose
 * holder is the node's identity, a random id kept in the state directory (`node-identity`). A
 * daemon restarted on the same node has the same state, so the same identity, and holds the Lease
 * again at once; a second daemon started with the same node name elsewhere (a copied config, two
 * machines of one hostname) has another state directory, finds the Lease held and allocates
 * nothing: both allocating from one node's ranges would give two pods one address. It says so in
 * its log, its readiness and STATUS, and takes over only once the Lease has not been renewed for
 * its whole duration (the first daemon is gone).
 *
 * A holder that cannot reach the API keeps allocating until its Lease would have expired by its
 * own clock, then stops too: by then another daemon may have taken the node's identity over.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { LeaderLease, type LeaseApi } from "../k8s/leader_lease.ts";

/** What the identity needs. */
export interface NodeIdentityDeps {
  /** This node's name. */
  nodeName: string;
  /** The daemon's state directory (the identity file lives there). */
  stateDir: string;
  /** The node's Lease. */
  lease: LeaseApi;
  /** Where the Lease lives, for messages (`namespace/name`). */
  leaseName: string;
  /** How long the Lease lasts without renewal (ms); it is renewed every third of that. */
  durationMs: number;
  /** Called whenever the identity is taken or lost (also during {@link NodeIdentity.start}). */
  onChange: (identity: NodeIdentity) => void;
  /** Where to log. */
  logger: Logger;
  /** The clock (tests). */
  now?: () => number;
}

/** The Lease name of node `nodeName`. */
export function nodeLeaseName(nodeName: string): string {
  return `ferry-node-${nodeName}`.slice(0, 253);
}

/** Reads the node's identity from `stateDir`, creating it on first start. */
export async function readIdentity(stateDir: string): Promise<string> {
  const path = `${stateDir}/node-identity`;
  try {
    const text = (await Deno.readTextFile(path)).trim();
    if (text) return text;
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  await Deno.mkdir(stateDir, { recursive: true, mode: 0o700 });
  const id = `${Deno.hostname()}-${crypto.randomUUID()}`;
  const tmp = `${path}.tmp`;
  await Deno.writeTextFile(tmp, id + "\n", { mode: 0o600 });
  await Deno.rename(tmp, path);
  return id;
}

/**
 * The node's identity, renewed in the background.
 *
 * @example
 * ```ts
 * const identity = await NodeIdentity.start({ nodeName, stateDir, lease, leaseName, durationMs: 60_000, onChange, logger });
 * if (!identity.held) console.log(identity.reason);
 * ```
 */
export class NodeIdentity {
  readonly #d: NodeIdentityDeps;
  readonly #lease: LeaderLease;
  readonly #id: string;
  readonly #now: () => number;
  #lastHeld = 0;
  #held = false;
  #reason: string;
  #timer?: ReturnType<typeof setTimeout>;
  #stopped = false;

  private constructor(deps: NodeIdentityDeps, id: string) {
    this.#d = deps;
    this.#id = id;
    this.#now = deps.now ?? (() => Date.now());
    this.#lease = new LeaderLease(deps.lease, id, deps.durationMs, this.#now);
    this.#reason = `node ${deps.nodeName}'s identity (Lease ${deps.leaseName}) is not held yet`;
  }

  /** Reads the identity, tries the Lease once, and keeps renewing it. */
  static async start(deps: NodeIdentityDeps): Promise<NodeIdentity> {
    const identity = new NodeIdentity(deps, await readIdentity(deps.stateDir));
    await identity.#renew();
    identity.#schedule();
    return identity;
  }

  /** This daemon's identity. */
  get id(): string {
    return this.#id;
  }

  /** Whether this daemon is the node's (and may allocate its addresses). */
  get held(): boolean {
    return this.#held;
  }

  /** Why it is not, while it is not. */
  get reason(): string | undefined {
    return this.#held ? undefined : this.#reason;
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(async () => {
      await this.#renew();
      this.#schedule();
    }, Math.max(100, Math.floor(this.#d.durationMs / 3)));
    Deno.unrefTimer(this.#timer);
  }

  async #renew(): Promise<void> {
    const { logger, nodeName, leaseName, durationMs } = this.#d;
    let held: boolean;
    let reason = this.#reason;
    try {
      held = await this.#lease.acquireOrRenew();
      if (held) this.#lastHeld = this.#now();
      else {
        const holder = (await this.#d.lease.get())?.spec?.holderIdentity ?? "unknown";
        reason = `another Ferry daemon (${holder}) holds node ${nodeName}'s identity ` +
          `(Lease ${leaseName}); this daemon (${this.#id}) allocates nothing until that ` +
          `Lease expires: is a second daemon running with node name ${nodeName}?`;
      }
    } catch (e) {
      // The API is out of reach: what was held stays held until it would have expired.
      held = this.#held && this.#now() - this.#lastHeld < durationMs;
      if (!held) {
        reason = `node ${nodeName}'s identity (Lease ${leaseName}) could not be renewed for ` +
          `${Math.round(durationMs / 1000)} s (${e instanceof Error ? e.message : e}); ` +
          "allocating nothing until it is";
      }
    }
    if (held === this.#held && reason === this.#reason) return;
    const was = this.#held;
    this.#held = held;
    this.#reason = reason;
    if (held && !was) {
      logger.info("holding node {node}'s identity as {id}", { node: nodeName, id: this.#id });
    }
    if (!held) logger.error("{reason}", { reason });
    this.#d.onChange(this);
  }

  /** Renews (or tries to take) the Lease now, as the background loop does. */
  renewNow(): Promise<void> {
    return this.#renew();
  }

  /** Stops renewing (the Lease expires on its own, or the next start on this node renews it). */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
  }

  /**
   * Stops renewing and gives the Lease up when this daemon holds it (a graceful stop): the next
   * daemon of the node, whatever its state directory, holds it at once instead of waiting for it
   * to expire. Best effort: a Lease that cannot be written expires on its own.
   */
  async release(): Promise<void> {
    this.stop();
    if (!this.#held) return;
    this.#held = false;
    try {
      const lease = await this.#d.lease.get();
      if (lease?.spec?.holderIdentity !== this.#id) return;
      await this.#d.lease.update({ ...lease, spec: { ...lease.spec, holderIdentity: "" } });
      this.#d.logger.info("gave up node {node}'s identity", { node: this.#d.nodeName });
    } catch { /* it expires on its own */ }
  }
}
