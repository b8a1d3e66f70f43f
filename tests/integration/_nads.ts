// What the tests of NAD networks share: NetworkAttachmentDefinitions made for one test in a
// simulated cluster (the CRD installed, a token that keeps names apart, every NAD deleted when the
// test ends, passing or not) and the Events Ferry puts on a pod whose networks it refused.
import type { Event } from "kubernetes-types/core/v1.d.ts";
import type { SimCluster } from "../../daemon/dev/cluster_sim.ts";
import { installNadCrd } from "../../daemon/dev/crds.ts";
import type { KubeObject } from "../../daemon/k8s/client.ts";
import { EVENTS, NETWORK_ATTACHMENT_DEFINITIONS } from "../../daemon/k8s/resources.ts";

/** The NADs of one test, as `withNads` hands them to its body. */
export interface Nads {
  /** Six random characters for the test's names (`mv-${t}`), so runs never share a NAD. */
  t: string;
  /**
   * Creates NAD `name` in namespace "default" with `config` as its `spec.config`: a string as it
   * is (for a text JSON.stringify cannot make), anything else JSON.stringify'd. It is deleted
   * when the test ends.
   */
  create(name: string, config: unknown): Promise<void>;
}

/**
 * Runs `fn` with the NAD CRD installed in cluster `c` and deletes every NAD it created when it
 * ends, passing or not (errors of the deletes are ignored).
 *
 * @example
 * ```ts
 * await withNads(c, async ({ t, create }) => {
 *   await create(`mv-${t}`, { cniVersion: "1.0.0", type: "macvlan", master: "eth0" });
 *   await c.addPod(node, "a", 0, { annotations: { "k8s.v1.cni.cncf.io/networks": `mv-${t}` } });
 * });
 * ```
 */
export async function withNads<T>(
  c: SimCluster,
  fn: (nads: Nads) => Promise<T>,
): Promise<T> {
  await installNadCrd(c.client);
  const t = crypto.randomUUID().slice(0, 6);
  const made: string[] = [];
  try {
    return await fn({
      t,
      async create(name, config) {
        await c.client.create(NETWORK_ATTACHMENT_DEFINITIONS, {
          metadata: { name, namespace: "default" },
          spec: { config: typeof config === "string" ? config : JSON.stringify(config) },
        } as KubeObject);
        made.push(name);
      },
    });
  } finally {
    for (const name of made) {
      await c.client.delete(NETWORK_ATTACHMENT_DEFINITIONS, "default", name).catch(() => {});
    }
  }
}

/**
 * Whether an Event of `reason` whose message contains `text` is on a pod of namespace "default"
 * whose name starts with `pod` (the sim's pods have a suffix after the name a test gives).
 *
 * @example
 * ```ts
 * await eventually(() => eventOn(c, "bad", "InvalidNetworkSelection", nad), "an Event on bad");
 * ```
 */
export async function eventOn(
  c: SimCluster,
  pod: string,
  reason: string,
  text = "",
): Promise<boolean> {
  const { items } = await c.client.listAll<Event>(EVENTS, { namespace: "default" });
  return items.some((e) =>
    e.involvedObject?.name?.startsWith(pod) && e.reason === reason &&
    (e.message ?? "").includes(text)
  );
}
