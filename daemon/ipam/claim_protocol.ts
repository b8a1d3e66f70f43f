/**
 * The block-claim protocol both block IPAMs follow: the pool IPAM's `IPBlock`s (`block_ipam.ts`)
 * and NAD networks' `NetworkBlock`s (`nad_network_ipam.ts`). A block is this node's to allocate
 * in only once it is claimed and the claim settled:
 *
 * - **Claim** ({@link createClaimed}): take a turn on the cluster's claim counter
 *   ({@link ClaimTurn}), then create the block's object. The object is named for its CIDR (and
 *   space), so of two nodes claiming one block exactly one create succeeds; the other gets
 *   AlreadyExists (a 409 told apart from Conflict by its reason) and tries another.
 * - **Settle** ({@link settleClaim}, {@link settleNewClaim}): list the blocks that might overlap
 *   from the server's storage (never a cache that may lag it), then commit the turn (the
 *   counter's update with the version read before the create as precondition). A block another
 *   overlaps is given up before any of its addresses is handed out ({@link yieldClaim}); a lost
 *   commit takes a new turn and lists again. Of two overlapping blocks at most one is ever used.
 * - **Write** ({@link blockAllocations}, {@link sameAllocations}, {@link writeBackoffMs}): the
 *   object's `allocations` follow the node's, written with the object's resourceVersion as
 *   precondition.
 * - **Give back** ({@link deleteOwnObject}): an empty block's object is deleted with uid and
 *   resourceVersion preconditions, re-read on a Conflict, and left alone once another node's.
 * - **Lost** ({@link recreateObject}): a block that holds addresses here but whose object is gone
 *   or names another node has its object written again; when another node has the block, or a
 *   block claimed meanwhile overlaps it, it is lost: its pods keep their addresses until their
 *   DEL, nothing new is allocated in it, and it is dropped here once empty.
 * - **Reconcile** at start ({@link readBlockDirectories}) and later
 *   ({@link releaseAdoptedOfGonePods}): what a block object records with no directory here is
 *   adopted, and released once its pod is gone.
 *
 * What differs between the two IPAMs is each caller's: which blocks may overlap (every pool
 * block; a NAD space's blocks), how a block is sized and named, claims ahead of need, and how
 * long an empty block is kept.
 *
 * @module
 */
import { CNI_ERROR, CniError } from "../../lib/cni/errors.ts";
import type { KubeObject } from "../k8s/client.ts";
import { KubeApiError } from "../k8s/errors.ts";
import { type Cidr, cidrsOverlap, parseCidr } from "./cidr.ts";
import type { ClaimTurn } from "./block_api.ts";
import type { BlockAllocation } from "./ip_pools.ts";
import type { Owner } from "./local_pool.ts";

/** A block object as the protocol reads it (`IPBlock`, `NetworkBlock`). */
export interface ClaimedBlockObject extends KubeObject {
  /** The block. */
  spec?: {
    /** Its CIDR. */
    cidr: string;
    /** The node that owns it. */
    node: string;
    /** The addresses handed out. */
    allocations?: BlockAllocation[];
  };
}

/** What the protocol needs of the API of one kind of block object. */
export interface ClaimApi<T extends ClaimedBlockObject> {
  /** Creates a block; a name that exists throws `KubeApiError` with `isAlreadyExists`. */
  create(block: T): Promise<T>;
  /** Reads a block; undefined when it does not exist. */
  get(name: string): Promise<T | undefined>;
  /** Deletes a block if its uid and resourceVersion still match (409 `Conflict` otherwise). */
  delete(name: string, uid: string, resourceVersion: string): Promise<void>;
  /** Takes a turn to claim (see {@link ClaimTurn}). */
  claimTurn(): Promise<ClaimTurn>;
}

/** Who an allocation is for, as its block object records it. */
export interface PodMeta {
  /** The pod's UID ("" when unknown). */
  uid: string;
  /** Its namespace. */
  namespace?: string;
  /** Its name. */
  name?: string;
}

/** How often a claim settles before it gives up (other nodes kept committing first). */
export const SETTLE_ATTEMPTS = 32;

/** How often a give-back re-reads the object after a Conflict. */
const DELETE_ATTEMPTS = 4;

/** The key of an owner in a node's maps. */
export const ownerKey = (o: Owner) => `${o.containerId}\n${o.ifname}`;
/** The message of anything thrown. */
export const errorText = (e: unknown) => e instanceof Error ? e.message : String(e);
/** Whether `e` is an API error that `test` accepts. */
export const isApi = (e: unknown, test: (k: KubeApiError) => boolean) =>
  e instanceof KubeApiError && test(e);

/**
 * Takes a claim turn, then creates `block` (the turn is read before the create: see
 * {@link ClaimTurn}). Undefined when the name exists (another node was first); any other failure
 * is thrown as it is.
 *
 * @example
 * ```ts
 * const claimed = await createClaimed(api, { metadata: { name }, spec });
 * if (!claimed) return tryTheNext();
 * ```
 */
export async function createClaimed<T extends ClaimedBlockObject>(
  api: Pick<ClaimApi<T>, "create" | "claimTurn">,
  block: T,
): Promise<{ obj: T; turn: ClaimTurn } | undefined> {
  try {
    const turn = await api.claimTurn();
    const obj = await api.create(block);
    return { obj, turn };
  } catch (e) {
    if (isApi(e, (k) => k.isAlreadyExists)) return undefined;
    throw e;
  }
}

/** How a claim's settling ended: committed, another block overlaps, or every commit was lost. */
export type Settled<T> =
  | { committed: true }
  | { overlap: T }
  | { contended: true };

/**
 * Settles a claim whose object exists: lists what may overlap it (`overlapping`, read from
 * storage) and commits the turn; a lost commit takes the next turn and lists again, up to
 * {@link SETTLE_ATTEMPTS} times. Says which block overlaps when one does (nothing is deleted).
 *
 * @example
 * ```ts
 * const r = await settleClaim(turn, () => api.claimTurn(), async () =>
 *   firstOverlapping(await api.list(), name, cidr));
 * if ("committed" in r) useIt();
 * ```
 */
export async function settleClaim<T>(
  first: ClaimTurn,
  nextTurn: () => Promise<ClaimTurn>,
  overlapping: () => Promise<T | undefined>,
): Promise<Settled<T>> {
  let turn = first;
  for (let attempt = 0; attempt < SETTLE_ATTEMPTS; attempt++) {
    const other = await overlapping();
    if (other) return { overlap: other };
    if (await turn.commit()) return { committed: true };
    turn = await nextTurn();
  }
  return { contended: true };
}

/**
 * Settles the claim of a block just created for use: true once it is this node's; false when
 * another block overlaps it, which is then given back ({@link yieldClaim}) before any of its
 * addresses was handed out, and `yielded` told which block won.
 *
 * @throws {CniError} 11 `cannot settle the claim of <what>` when other claims kept committing first.
 */
export async function settleNewClaim<T extends ClaimedBlockObject, O>(
  api: Pick<ClaimApi<T>, "delete" | "claimTurn">,
  created: T,
  first: ClaimTurn,
  overlapping: () => Promise<O | undefined>,
  what: string,
  yielded?: (other: O) => void,
): Promise<boolean> {
  const settled = await settleClaim(first, () => api.claimTurn(), overlapping);
  if ("committed" in settled) return true;
  if ("overlap" in settled) {
    await yieldClaim(api, created);
    yielded?.(settled.overlap);
    return false;
  }
  throw new CniError(
    CNI_ERROR.TRY_AGAIN_LATER,
    `cannot settle the claim of ${what}`,
    "other nodes kept claiming blocks meanwhile",
  );
}

/** Deletes the object of a claim that lost (uid and resourceVersion of its create); gone is fine. */
export async function yieldClaim<T extends ClaimedBlockObject>(
  api: Pick<ClaimApi<T>, "delete">,
  created: T,
): Promise<void> {
  await api.delete(
    created.metadata!.name!,
    created.metadata!.uid!,
    created.metadata!.resourceVersion!,
  )
    .catch((e) => {
      if (!isApi(e, (k) => k.isNotFound)) throw e;
    });
}

/** The first of `listed` other than `name` that shares addresses with `cidr`. */
export function firstOverlapping<T extends ClaimedBlockObject>(
  listed: T[],
  name: string,
  cidr: Cidr,
): T | undefined {
  return listed.find((b) =>
    b.metadata?.name !== name && b.spec?.cidr && cidrsOverlap(parseCidr(b.spec.cidr), cidr)
  );
}

/**
 * Gives back the object of an empty block this node holds: deleted with uid and resourceVersion
 * preconditions; a Conflict re-reads it (`held.obj` is then dropped), and one that is gone or
 * names another node is left alone. Any other failure is thrown.
 */
export async function deleteOwnObject<T extends ClaimedBlockObject>(
  api: Pick<ClaimApi<T>, "get" | "delete">,
  held: { name: string; obj?: T },
  nodeName: string,
): Promise<void> {
  for (let attempt = 0; attempt < DELETE_ATTEMPTS; attempt++) {
    const obj = held.obj ?? await api.get(held.name);
    if (!obj?.metadata?.uid || obj.spec?.node !== nodeName) break;
    try {
      await api.delete(held.name, obj.metadata.uid, obj.metadata.resourceVersion ?? "");
      break;
    } catch (e) {
      if (isApi(e, (k) => k.isNotFound)) break;
      if (!isApi(e, (k) => k.isConflict)) throw e;
      held.obj = undefined;
    }
  }
}

/**
 * A block's allocations as its object records them, by address: each names its pod from `metaOf`
 * (UID "" when unknown).
 */
export function blockAllocations(
  allocations: { ip: string; owner: Owner }[],
  metaOf: (owner: Owner) => PodMeta | undefined,
): BlockAllocation[] {
  return allocations.map(({ ip, owner }) => {
    const meta = metaOf(owner);
    const a: BlockAllocation = {
      ip,
      podUID: meta?.uid ?? "",
      containerID: owner.containerId,
      ifname: owner.ifname,
    };
    if (meta?.namespace) a.namespace = meta.namespace;
    if (meta?.name) a.name = meta.name;
    return a;
  }).sort((a, b) => a.ip.localeCompare(b.ip));
}

/**
 * Brings a block's object in line with `desired` (`base` as last read, its resourceVersion the
 * precondition; it has a spec): `same` when it already records them, `written` (`held.obj` is the new object),
 * or `conflict` / `gone` when it changed or went meanwhile (`held.obj` dropped: read it again).
 * Any other failure is thrown.
 */
export async function updateAllocations<T extends ClaimedBlockObject>(
  api: { update(block: T): Promise<T> },
  held: { obj?: T },
  base: T,
  desired: BlockAllocation[],
): Promise<"same" | "written" | "conflict" | "gone"> {
  const spec = base.spec!;
  if (sameAllocations(spec.allocations ?? [], desired)) {
    held.obj = base;
    return "same";
  }
  try {
    held.obj = await api.update({ ...base, spec: { ...spec, allocations: desired } });
    return "written";
  } catch (e) {
    if (isApi(e, (k) => k.isConflict)) {
      held.obj = undefined;
      return "conflict";
    }
    if (isApi(e, (k) => k.isNotFound)) {
      held.obj = undefined;
      return "gone";
    }
    throw e;
  }
}

/** How writing a block's object again ended (see {@link recreateObject}). */
export type Recreated<T> =
  | { mine: T }
  | { lost: string; obj?: T };

/**
 * Writes again the object of a block whose object is gone or names another node while this node
 * holds addresses in it (`block`: its object as it should be, naming this node and recording its
 * allocations): created and settled as a claim ({@link createClaimed}, {@link settleClaim}; a
 * claim whose commits kept losing is kept: nothing else overlaps it), it is `mine` again. It is
 * `lost` when another node has it (`obj` that node's object), or another block overlaps it
 * (`overlapping`, listed from storage: claimed while the object was missing; `obj` the object
 * just created, kept so that no third node claims what this node's pods still hold, and deleted
 * once the block is empty). `created` is told of a create. The caller allocates nothing more in a
 * lost block.
 *
 * @example
 * ```ts
 * const r = await recreateObject(api, desiredObject, () => overlappingOf(block));
 * if ("lost" in r) block.lost = r.lost;
 * ```
 */
export async function recreateObject<T extends ClaimedBlockObject>(
  api: Pick<ClaimApi<T>, "create" | "get" | "claimTurn">,
  block: T,
  overlapping: () => Promise<T | undefined>,
  created?: () => void,
): Promise<Recreated<T>> {
  const { cidr, node } = block.spec!;
  const claimed = await createClaimed(api, block);
  if (claimed) {
    created?.();
    const settled = await settleClaim(claimed.turn, () => api.claimTurn(), overlapping);
    if (!("overlap" in settled)) return { mine: claimed.obj };
    const o = settled.overlap.spec;
    return {
      lost: `block ${cidr} overlaps block ${o?.cidr} of node ${o?.node}, ` +
        "claimed while its object was missing",
      obj: claimed.obj,
    };
  }
  const other = await api.get(block.metadata!.name!);
  if (other?.spec?.node === node) return { mine: other };
  return { lost: `block ${cidr} now belongs to node ${other?.spec?.node}`, obj: other };
}

/** Whether two allocation lists hold the same entries. */
export function sameAllocations(a: BlockAllocation[], b: BlockAllocation[]): boolean {
  if (a.length !== b.length) return false;
  const key = (x: BlockAllocation) =>
    `${x.ip}|${x.podUID}|${x.containerID}|${x.ifname}|${x.namespace ?? ""}|${x.name ?? ""}`;
  const set = new Set(a.map(key));
  return b.every((x) => set.has(key(x)));
}

/**
 * At start, the block directories under `dir` whose `.block.json` reads and names its directory
 * (`nameOf` the record; one that throws, a CIDR that does not parse, names none): their records
 * by directory name. Any other directory is left alone and handed to `unreadable`.
 */
export async function readBlockDirectories<M>(
  dir: string,
  nameOf: (meta: M) => string | undefined,
  unreadable: (dir: string) => void,
): Promise<Map<string, M>> {
  const local = new Map<string, M>();
  for await (const entry of Deno.readDir(dir)) {
    if (!entry.isDirectory) continue;
    const meta = await Deno.readTextFile(`${dir}/${entry.name}/.block.json`)
      .then((t) => JSON.parse(t) as M).catch(() => undefined);
    let named: string | undefined;
    try {
      named = meta && nameOf(meta);
    } catch { /* reported below */ }
    if (meta && named === entry.name) local.set(entry.name, meta);
    else unreadable(`${dir}/${entry.name}`);
  }
  return local;
}

/** A pod as a block object names it, asked about by the sweep. */
export interface NamedPod {
  /** Its UID ("" when unknown). */
  uid: string;
  /** Its namespace. */
  namespace: string;
  /** Its name. */
  name: string;
}

/**
 * Releases the adopted allocations (`adopted`, owners whose addresses were taken over from a
 * block object: state lost, `spec.node` edited, an address another IPAM's pod holds) whose pod
 * is gone: `gone` asks the API about the pod the object named (`meta`). No DEL of the runtime
 * will ever release them here. `release` gives back an owner's addresses (and forgets it as
 * adopted), `released` is told each pod's; returns every address released.
 */
export async function releaseAdoptedOfGonePods(
  node: { adopted: Set<string>; meta: Map<string, PodMeta>; closed: boolean },
  gone: (pod: NamedPod) => Promise<boolean>,
  release: (owner: Owner) => Promise<string[]>,
  released: (pod: NamedPod, ips: string[]) => void,
): Promise<string[]> {
  const all: string[] = [];
  for (const key of [...node.adopted]) {
    const meta = node.meta.get(key);
    if (!meta?.namespace || !meta.name || node.closed) continue;
    const pod = { uid: meta.uid, namespace: meta.namespace, name: meta.name };
    if (!(await gone(pod))) continue;
    const [containerId, ifname] = key.split("\n");
    const ips = await release({ containerId, ifname });
    all.push(...ips);
    released(pod, ips);
  }
  return all;
}

/** How long a block's writer waits after its `failures`-th failed write in a row (ms). */
export function writeBackoffMs(failures: number): number {
  return Math.min(30_000, 250 * 2 ** Math.min(failures, 7));
}
