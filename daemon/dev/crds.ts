/**
 * Installs CRDs of `deploy/base/crds/` on an API (the stand-in or a real server) for the tests, the
 * simulated cluster and the demo, and waits until their resources are served.
 *
 * @module
 */
import { parse } from "deno-std/yaml/parse.js";
import type { KubeClient, KubeObject } from "../k8s/client.ts";
import { KubeApiError } from "../k8s/errors.ts";
import {
  CRDS,
  IPBLOCKS,
  IPPOOLS,
  MULTI_NETWORK_POLICIES,
  NETWORK_ATTACHMENT_DEFINITIONS,
  NETWORKBLOCKS,
  NETWORKOWNERS,
  type ResourceType,
} from "../k8s/resources.ts";

const CRD_DIR = new URL("../../deploy/base/crds/", import.meta.url);

/**
 * Creates Ferry's pool CRDs (`ippools.yaml`, `ipblocks.yaml`) unless they exist, then waits (up to
 * 30 s: a real server takes a moment to serve a new CRD) until both resources can be listed.
 *
 * @example
 * ```ts
 * await installPoolCrds(client);
 * ```
 */
export function installPoolCrds(client: KubeClient): Promise<void> {
  return installCrds(client, ["ippools.yaml", "ipblocks.yaml"], [IPPOOLS, IPBLOCKS]);
}

/**
 * Creates the NetworkBlock and NetworkOwner CRDs (NAD networks' blocks and the owners of their
 * ranges) unless they exist, and waits until both are served.
 */
export function installNetworkBlockCrd(client: KubeClient): Promise<void> {
  return installCrds(client, ["networkblocks.yaml", "networkowners.yaml"], [
    NETWORKBLOCKS,
    NETWORKOWNERS,
  ]);
}

/** Creates the NetworkAttachmentDefinition CRD unless it exists, and waits until it is served. */
export function installNadCrd(client: KubeClient): Promise<void> {
  return installCrds(client, ["network-attachment-definitions.yaml"], [
    NETWORK_ATTACHMENT_DEFINITIONS,
  ]);
}

/** Creates the MultiNetworkPolicy CRD unless it exists, and waits until it is served. */
export function installMultiPolicyCrd(client: KubeClient): Promise<void> {
  return installCrds(client, ["multi-networkpolicies.yaml"], [MULTI_NETWORK_POLICIES]);
}

async function installCrds(
  client: KubeClient,
  files: string[],
  resources: ResourceType[],
): Promise<void> {
  for (const file of files) {
    const crd = parse(await Deno.readTextFile(new URL(file, CRD_DIR))) as KubeObject & {
      spec?: unknown;
    };
    const created = await client.create(CRDS, crd).then(() => true, (e) => {
      if (!(e instanceof KubeApiError && e.isAlreadyExists)) throw e;
      return false;
    });
    if (!created) await updateIfOlder(client, crd);
  }
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      for (const rt of resources) await client.list(rt, { limit: 1 });
      return;
    } catch (e) {
      if (!(e instanceof KubeApiError && e.isNotFound) || Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 300));
    }
  }
}

/**
 * Brings an existing CRD (a shared real server's, installed by an older run) up to the file's
 * schema when the file adds to it: fields a server's schema lacks are pruned from the objects.
 */
async function updateIfOlder(
  client: KubeClient,
  crd: KubeObject & { spec?: unknown },
): Promise<void> {
  const name = crd.metadata!.name!;
  const versionsOf = (spec: unknown) =>
    JSON.stringify((spec as { versions?: { schema?: unknown }[] })?.versions?.map((v) => v.schema));
  for (let attempt = 0; attempt < 5; attempt++) {
    const now = await client.get<KubeObject & { spec?: unknown }>(CRDS, undefined, name);
    if (versionsOf(now.spec) === versionsOf(crd.spec)) return;
    try {
      await client.update(CRDS, { ...now, spec: crd.spec });
      return;
    } catch (e) {
      if (!(e instanceof KubeApiError && e.isConflict)) throw e;
    }
  }
}
