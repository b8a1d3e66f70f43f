/**
 * Installs CRDs of `deploy/crds/` on an API (the stand-in or a real server) for the tests, the
 * simulated cluster and the demo, and waits until their resources are served.
 *
 * @module
 */
import { parse } from "deno-std/yaml/parse.js";
import type { KubeClient, KubeObject } from "../k8s/client.ts";
import { KubeApiError } from "../k8s/errors.ts";
import { CRDS, IPBLOCKS, IPPOOLS } from "../k8s/resources.ts";

const CRD_DIR = new URL("../../deploy/crds/", import.meta.url);

/**
 * Creates Ferry's pool CRDs (`ippools.yaml`, `ipblocks.yaml`) unless they exist, then waits (up to
 * 30 s: a real server takes a moment to serve a new CRD) until both resources can be listed.
 *
 * @example
 * ```ts
 * await installPoolCrds(client);
 * ```
 */
export async function installPoolCrds(client: KubeClient): Promise<void> {
  for (const file of ["ippools.yaml", "ipblocks.yaml"]) {
    const crd = parse(await Deno.readTextFile(new URL(file, CRD_DIR))) as KubeObject;
    await client.create(CRDS, crd).catch((e) => {
      if (!(e instanceof KubeApiError && e.isAlreadyExists)) throw e;
    });
  }
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      await client.list(IPPOOLS, { limit: 1 });
      await client.list(IPBLOCKS, { limit: 1 });
      return;
    } catch (e) {
      if (!(e instanceof KubeApiError && e.isNotFound) || Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 300));
    }
  }
}
