/**
 * Who may use a range of a NAD network's address space (whereabouts configs served natively).
 * whereabouts shares a space with every NAD that names it, in any namespace; Ferry's promise is
 * that tenants cannot harm each other, so here a range of a network (its `network_name`, "" when
 * none, and family: {@link ownersKey}) belongs to the namespace whose pods first took addresses of
 * it, and a NAD of another namespace naming an overlapping range of that network is refused with
 * code 7 (its pods would take the owner's addresses). The operator may give a network, or ranges
 * of it, to several namespaces instead (`multiNetwork.sharedWhereaboutsSpaces`).
 *
 * - **One space per range**: a network's ranges are allocated in spaces ({@link spaceKey}: the
 *   network and family with `enable_overlapping_ranges`, the network and the range without), and
 *   two spaces never see each other's addresses. So the check is on the network, whatever the flag
 *   says, and a range is also refused, to its owner's namespace too, when an overlapping range is
 *   recorded in another space of the network (the flag differs, or two ranges without it differ):
 *   both spaces would hand out the same addresses, one address live on two pods.
 *
 * - **Recorded** in a `NetworkOwner` object per space and range CIDR, never deleted by Ferry: the
 *   owner keeps its range when its pods are gone (scaled to zero, redeployed); an operator hands a
 *   range over by deleting its object. A pod's static address (`ips`) outside every range of its
 *   NAD is recorded as a range of one address.
 * - **Race-free across nodes**: the object's name is the space's hash and the CIDR, so of two
 *   namespaces claiming one range exactly one create succeeds and the other reads who owns it.
 *   Different CIDRs that overlap (a /24 and the /16 holding it) are settled on a claim counter
 *   (a Lease, {@link ClaimTurn}): a claim lists the space after taking its turn and refuses
 *   when another namespace owns an overlapping range; its commit fails when another claim
 *   committed meanwhile, and it then lists again and gives its object up if it now conflicts. Of
 *   two overlapping claims at most one is committed; the other is refused.
 * - **Upgrade**: the first claim of a range that already has allocations (NetworkBlocks, or
 *   whereabouts' own IPPools being migrated) records the namespace holding most of them, so a
 *   space used before this check keeps its owner.
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import type { PodRef } from "../../lib/cni/args.ts";
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { KubeObject } from "../k8s/client.ts";
import { KubeApiError } from "../k8s/errors.ts";
import type { ClaimTurn } from "./block_ipam.ts";
import { type Cidr, cidrContains, cidrsOverlap, formatCidr, parseCidr, parseIp } from "./cidr.ts";
import { type NetworkBlockObject, networkHash } from "./nad_blocks.ts";
import { type NadIpamConfig, spaceKey } from "./nad_ipam.ts";

/** A `NetworkOwner` (`ferry.dev/v1`, cluster-scoped), named by {@link networkOwnerName}. */
export interface NetworkOwnerObject extends KubeObject {
  /** The range and its owner. */
  spec?: {
    /** The address space its addresses are allocated in ({@link spaceKey}). */
    network: string;
    /** The range's CIDR. */
    cidr: string;
    /** The namespace whose NADs alone may use it. */
    namespace: string;
  };
}

/** The API side of owners (`NetworkOwner` objects). */
export interface NetworkOwnerApi {
  /**
   * The owners of a network's ranges ({@link ownersKey}: every space of it, see
   * {@link spaceOfNetwork}), read from the server's storage.
   */
  list(network: string): Promise<NetworkOwnerObject[]>;
  /** Creates an owner; a name that exists throws `KubeApiError` with `isAlreadyExists`. */
  create(owner: NetworkOwnerObject): Promise<NetworkOwnerObject>;
  /** Deletes an owner if its uid still matches. */
  delete(name: string, uid: string): Promise<void>;
  /** Takes a turn to claim (see {@link ClaimTurn}). */
  claimTurn(): Promise<ClaimTurn>;
}

/** An entry of `multiNetwork.sharedWhereaboutsSpaces`. */
export interface SharedSpace {
  /** The `network_name` ("" for NADs without one); absent: any. */
  network?: string;
  /** A CIDR: the entry covers the ranges inside it; absent: every range. */
  range?: string;
  /** The namespaces that may use those ranges. */
  namespaces: string[];
}

/** How long a namespace's admission to a range is taken as known before it is read again (ms). */
export const ADMITTED_TTL_MS = 60_000;

/**
 * The network whose ranges' owners a range of `cidr` is checked against: the `network_name`
 * (`networkName`, "" when none) and the family, whatever `enable_overlapping_ranges` says, so a
 * range recorded in one space of it ({@link spaceKey}) is seen from the other.
 *
 * @example
 * ```ts
 * ownersKey("blue", parseCidr("10.0.0.0/24")); // "blue/v4"
 * ownersKey("", parseCidr("fd00::/120")); // "v6"
 * ```
 */
export function ownersKey(networkName: string, cidr: Cidr): string {
  const family = `v${cidr.network.family}`;
  return networkName ? `${networkName}/${family}` : family;
}

/**
 * Whether the space `space` ({@link spaceKey}) holds ranges of the network `key`
 * ({@link ownersKey}): the key itself (`enable_overlapping_ranges`), or the space of one of its
 * ranges of that family (without it). A `network_name` holds no `/`, so the split is unique.
 *
 * @example
 * ```ts
 * spaceOfNetwork("blue/range-10.0.0.0/24", "blue/v4"); // true
 * spaceOfNetwork("range-10.0.0.0/24", "blue/v4"); // false
 * ```
 */
export function spaceOfNetwork(space: string, key: string): boolean {
  if (space === key) return true;
  const prefix = `${key.slice(0, -2)}range-`;
  if (!space.startsWith(prefix)) return false;
  try {
    const cidr = parseCidr(space.slice(prefix.length));
    return formatCidr(cidr) === space.slice(prefix.length) && ownersKey("", cidr) === key.slice(-2);
  } catch {
    return false;
  }
}

/**
 * The name of a range's owner object: a hash of its space and its CIDR
 * (`no-1a2b3c4d-10-1-0-0-24`), so that two namespaces claiming one range collide on the name.
 */
export function networkOwnerName(network: string, cidr: Cidr): string {
  return `no-${networkHash(network)}-${formatCidr(cidr).replace(/[.:/]/g, "-")}`;
}

/**
 * The ranges an ADD with `config` and the static addresses `statics` takes addresses of, each in
 * its space: every range of the config, and each static address outside all of them as a range
 * of one address. A static address that does not parse is left out (the IPAM refuses it).
 *
 * @example
 * ```ts
 * claimedRanges(parseWhereabouts({ type: "whereabouts", range: "10.0.0.0/24",
 *   network_name: "blue" }, w), []); // [{ space: "blue/v4", cidr: 10.0.0.0/24 }]
 * ```
 */
export function claimedRanges(
  config: NadIpamConfig,
  statics: string[],
): { space: string; cidr: Cidr }[] {
  const out = config.ranges.map((r) => ({ space: spaceKey(config, r), cidr: r.cidr }));
  for (const text of statics) {
    let ip;
    try {
      ip = parseIp(text.split("/")[0]);
    } catch {
      continue;
    }
    if (config.ranges.some((r) => cidrContains(r.cidr, ip))) continue;
    const cidr: Cidr = { network: ip, prefix: ip.family === 4 ? 32 : 128 };
    out.push({ space: spaceKey(config, { cidr, start: ip, end: ip, excluded: [] }), cidr });
  }
  return out;
}

/** The entries of `shared` naming `network` whose range overlaps `cidr`. */
function entriesOf(shared: SharedSpace[], network: string, cidr: Cidr): SharedSpace[] {
  return shared.filter((e) => {
    if (e.network !== undefined && e.network !== network) return false;
    if (e.range === undefined) return true;
    try {
      return cidrsOverlap(parseCidr(e.range), cidr);
    } catch {
      return false;
    }
  });
}

/**
 * What the config says of `namespace` using `cidr` of the space named `network`: `refused` names
 * an entry that gives an overlapping range to other namespaces only; `covered` when an entry
 * listing `namespace` covers the whole range (no owner is recorded then).
 */
export function sharedVerdict(
  shared: SharedSpace[],
  network: string,
  cidr: Cidr,
  namespace: string,
): { refused?: SharedSpace; covered: boolean } {
  const entries = entriesOf(shared, network, cidr);
  const refused = entries.find((e) => !e.namespaces.includes(namespace));
  const covered = entries.some((e) =>
    e.range === undefined ||
    (() => {
      const r = parseCidr(e.range);
      return r.prefix <= cidr.prefix && cidrContains(r, cidr.network);
    })()
  );
  return { ...(refused ? { refused } : {}), covered };
}

/** Whether the config lets `a` and `b` share `cidr` of the space named `network`. */
function mayShare(shared: SharedSpace[], network: string, cidr: Cidr, a: string, b: string) {
  return a === b ||
    entriesOf(shared, network, cidr).some((e) =>
      e.namespaces.includes(a) && e.namespaces.includes(b)
    );
}

/**
 * The owner a range that already has allocations gets at its first claim: the namespace holding
 * most of the addresses of `cidr` (ties: the first by name), undefined when none is held.
 */
export function upgradeOwner(
  held: { ip: string; namespace?: string }[],
  cidr: Cidr,
): string | undefined {
  const counts = new Map<string, number>();
  for (const h of held) {
    if (!h.namespace) continue;
    try {
      if (!cidrContains(cidr, parseIp(h.ip))) continue;
    } catch {
      continue;
    }
    counts.set(h.namespace, (counts.get(h.namespace) ?? 0) + 1);
  }
  return [...counts].sort((x, y) => y[1] - x[1] || x[0].localeCompare(y[0]))[0]?.[0];
}

/** What {@link SpaceOwners} needs. */
export interface SpaceOwnersDeps {
  /** The API. */
  api: NetworkOwnerApi;
  /** `multiNetwork.sharedWhereaboutsSpaces`. */
  shared: SharedSpace[];
  /** The blocks of a space (their allocations name the pods' namespaces), for an upgrade. */
  blocks?: (network: string) => Promise<NetworkBlockObject[]>;
  /** The addresses whereabouts' own IPPools give live pods (the migration), for an upgrade. */
  foreign?: () => { ip: string; namespace: string }[];
  /** Says a refusal on the pod (a Warning Event). */
  refused?: (pod: PodRef, message: string) => void;
  /** Where to log. */
  logger: Logger;
}

const errorText = (e: unknown) => e instanceof Error ? e.message : String(e);
const isApi = (e: unknown, test: (k: KubeApiError) => boolean) =>
  e instanceof KubeApiError && test(e);

/**
 * The owners of NAD networks' ranges, as one node checks them before an ADD takes addresses.
 *
 * @example
 * ```ts
 * const owners = new SpaceOwners({ api: kubeNetworkOwnerApi(client), shared: [], logger });
 * await owners.admit(config, [], pod, "pod b/x: network blue"); // code 7 when another namespace owns it
 * ```
 */
export class SpaceOwners {
  readonly #d: SpaceOwnersDeps;
  /** `space\ncidr\nnamespace` → until when it is known to be admitted. */
  readonly #admitted = new Map<string, number>();

  /** Creates it; nothing is read before the first {@link SpaceOwners.admit}. */
  constructor(deps: SpaceOwnersDeps) {
    this.#d = deps;
  }

  /**
   * Admits the pod's namespace to every range its ADD takes addresses of (claiming the ranges
   * nobody owns yet), or refuses.
   *
   * @throws {CniError} 7 naming the space, the range, its owner and `where` (the pod and NAD)
   * when another namespace owns a range, or the config gives it to other namespaces; 11 when the
   * API cannot be asked.
   */
  async admit(
    config: NadIpamConfig,
    statics: string[],
    pod: PodRef,
    where: string,
  ): Promise<void> {
    try {
      for (const { space, cidr } of claimedRanges(config, statics)) {
        await this.#admitOne(config.networkName, space, cidr, pod.namespace, where);
      }
    } catch (e) {
      if (e instanceof CniError && e.code === CNI_ERROR.INVALID_CONFIG) {
        this.#d.refused?.(pod, e.message);
      }
      throw e;
    }
  }

  async #admitOne(
    network: string,
    space: string,
    cidr: Cidr,
    namespace: string,
    where: string,
  ): Promise<void> {
    const key = `${space}\n${formatCidr(cidr)}\n${namespace}`;
    if ((this.#admitted.get(key) ?? 0) > Date.now()) return;
    const { refused, covered } = sharedVerdict(this.#d.shared, network, cidr, namespace);
    if (refused) {
      throw this.#refusal(
        where,
        space,
        cidr,
        `multiNetwork.sharedWhereaboutsSpaces gives ${refused.range ?? "every range"} of it to ` +
          `namespaces ${refused.namespaces.join(", ") || "(none)"} only`,
        namespace,
      );
    }
    if (covered) await this.#otherSpace(network, space, cidr, namespace, where);
    else await this.#claim(network, space, cidr, namespace, where);
    if (this.#admitted.size > 4096) {
      for (const [k, until] of this.#admitted) if (until <= Date.now()) this.#admitted.delete(k);
    }
    this.#admitted.set(key, Date.now() + ADMITTED_TTL_MS);
  }

  /**
   * The owner of a range overlapping `cidr` among `owners` that `namespace` may not share with,
   * or whose addresses another space than `space` allocates, if any.
   */
  #conflict(
    owners: NetworkOwnerObject[],
    network: string,
    space: string,
    cidr: Cidr,
    namespace: string,
    except?: string,
  ): NetworkOwnerObject | undefined {
    return owners.find((o) => {
      if (!o.spec || o.metadata?.name === except) return false;
      let other: Cidr;
      try {
        other = parseCidr(o.spec.cidr);
      } catch {
        return false;
      }
      return cidrsOverlap(other, cidr) && (o.spec.network !== space ||
        !mayShare(this.#d.shared, network, other, o.spec.namespace, namespace));
    });
  }

  #refusal(where: string, space: string, cidr: Cidr, why: string, namespace: string): CniError {
    return new CniError(
      CNI_ERROR.INVALID_CONFIG,
      `${where}: whereabouts space ${JSON.stringify(space)} range ${formatCidr(cidr)}: ${why}; ` +
        `a NAD of namespace ${namespace} may not take its addresses`,
      "a range of a whereabouts space belongs to the namespace that first used it, or to the " +
        "namespaces multiNetwork.sharedWhereaboutsSpaces lists for it (docs/multiple-networks.md)",
    );
  }

  #owned(o: NetworkOwnerObject, where: string, space: string, cidr: Cidr, namespace: string) {
    const record = `NetworkOwner ${o.metadata?.name}, range ${o.spec!.cidr}`;
    return this.#refusal(
      where,
      space,
      cidr,
      o.spec!.network === space
        ? `it belongs to namespace ${o.spec!.namespace} (${record})`
        : `an overlapping range of namespace ${o.spec!.namespace} is allocated in space ` +
          `${JSON.stringify(o.spec!.network)} (${record}), which does not see this space's ` +
          `addresses (enable_overlapping_ranges differs, or the ranges without it do)`,
      namespace,
    );
  }

  /**
   * For a range the config shares (no owner recorded): refused when an overlapping range is
   * recorded in another space of the network, whose pods would hold the same addresses.
   */
  async #otherSpace(
    network: string,
    space: string,
    cidr: Cidr,
    namespace: string,
    where: string,
  ): Promise<void> {
    let owners: NetworkOwnerObject[];
    try {
      owners = await this.#d.api.list(ownersKey(network, cidr));
    } catch (e) {
      throw new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        `${where}: cannot read the owners of whereabouts space ${JSON.stringify(space)}`,
        errorText(e),
      );
    }
    const other = owners.find((o) => {
      if (!o.spec || o.spec.network === space) return false;
      try {
        return cidrsOverlap(parseCidr(o.spec.cidr), cidr);
      } catch {
        return false;
      }
    });
    if (other) throw this.#owned(other, where, space, cidr, namespace);
  }

  async #claim(
    network: string,
    space: string,
    cidr: Cidr,
    namespace: string,
    where: string,
  ): Promise<void> {
    const { api } = this.#d;
    const name = networkOwnerName(space, cidr);
    const key = ownersKey(network, cidr);
    const unavailable = (e: unknown) =>
      e instanceof CniError ? e : new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        `${where}: cannot read or claim the owner of whereabouts space ${
          JSON.stringify(space)
        } range ${formatCidr(cidr)}`,
        errorText(e),
      );
    try {
      for (let attempt = 0; attempt < 8; attempt++) {
        let turn = await api.claimTurn();
        let owners = await api.list(key);
        const conflict = this.#conflict(owners, network, space, cidr, namespace);
        if (conflict) throw this.#owned(conflict, where, space, cidr, namespace);
        // Recorded already (by this namespace, or one the config lets it share with).
        if (owners.some((o) => o.metadata?.name === name)) return;
        const owner = await this.#firstOwner(space, cidr) ?? namespace;
        let created: NetworkOwnerObject;
        try {
          created = await api.create({
            metadata: { name, labels: { "ferry.dev/network": networkHash(key) } },
            spec: { network: space, cidr: formatCidr(cidr), namespace: owner },
          });
        } catch (e) {
          if (isApi(e, (k) => k.isAlreadyExists)) continue; // listed again: who won
          throw e;
        }
        // Committed, or given up when an overlapping claim of another namespace was first.
        while (!(await turn.commit())) {
          turn = await api.claimTurn();
          owners = await api.list(key);
          const first = this.#conflict(owners, network, space, cidr, owner, name);
          if (first) {
            await api.delete(name, created.metadata!.uid!).catch((e) => {
              if (!isApi(e, (k) => k.isNotFound)) throw e;
            });
            throw this.#owned(first, where, space, cidr, namespace);
          }
        }
        this.#d.logger.info(
          "range {cidr} of whereabouts space {space} now belongs to namespace {owner}",
          { cidr: formatCidr(cidr), space, owner },
        );
        if (!mayShare(this.#d.shared, network, cidr, owner, namespace)) {
          throw this.#owned(created, where, space, cidr, namespace);
        }
        return;
      }
      throw new CniError(
        CNI_ERROR.TRY_AGAIN_LATER,
        `${where}: cannot claim whereabouts space ${JSON.stringify(space)} range ${
          formatCidr(cidr)
        }`,
        "other namespaces kept claiming it meanwhile",
      );
    } catch (e) {
      throw unavailable(e);
    }
  }

  /** The owner a range in use before owners were recorded gets (see {@link upgradeOwner}). */
  async #firstOwner(space: string, cidr: Cidr): Promise<string | undefined> {
    const held: { ip: string; namespace?: string }[] = [];
    for (const b of await (this.#d.blocks?.(space) ?? Promise.resolve([]))) {
      for (const a of b.spec?.allocations ?? []) held.push(a);
    }
    held.push(...(this.#d.foreign?.() ?? []));
    return upgradeOwner(held, cidr);
  }
}
