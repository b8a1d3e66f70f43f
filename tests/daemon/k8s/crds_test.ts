// The CRDs in deploy/base/crds install on the API under test, and their resources can then be used.
import { assertEquals } from "deno-std/assert/mod.js";
import { parse } from "deno-std/yaml/parse.js";
import type { KubeObject } from "../../../daemon/k8s/client.ts";
import { KubeApiError } from "../../../daemon/k8s/errors.ts";
import { CRDS, NETWORK_ATTACHMENT_DEFINITIONS } from "../../../daemon/k8s/resources.ts";
import { withKube } from "./_target.ts";

const CRD_DIR = new URL("../../../deploy/base/crds/", import.meta.url);

Deno.test("every CRD in deploy/base/crds installs (or is already installed)", () =>
  withKube(async ({ client }) => {
    for await (const entry of Deno.readDir(CRD_DIR)) {
      const crd = parse(await Deno.readTextFile(new URL(entry.name, CRD_DIR))) as KubeObject;
      try {
        await client.create(CRDS, crd);
      } catch (e) {
        if (!(e instanceof KubeApiError && e.isAlreadyExists)) throw e;
      }
      const got = await client.get<KubeObject>(CRDS, undefined, crd.metadata!.name!);
      assertEquals(got.metadata!.name, crd.metadata!.name);
    }
  }));

Deno.test("a NetworkAttachmentDefinition keeps its CNI config once the CRD is installed", () =>
  withKube(async ({ client, id }) => {
    const crd = parse(
      await Deno.readTextFile(new URL("network-attachment-definitions.yaml", CRD_DIR)),
    ) as KubeObject;
    await client.create(CRDS, crd).catch((e) => {
      if (!(e instanceof KubeApiError && e.isAlreadyExists)) throw e;
    });
    const name = `net-${id}`;
    const config = JSON.stringify({ cniVersion: "1.0.0", type: "macvlan", master: "eth0" });
    const nad = { metadata: { name, namespace: "default" }, spec: { config } } as KubeObject;
    // A new CRD takes a moment to be served by a real server.
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        await client.create(NETWORK_ATTACHMENT_DEFINITIONS, nad);
        break;
      } catch (e) {
        if (!(e instanceof KubeApiError && e.isNotFound) || Date.now() > deadline) throw e;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    try {
      const got = await client.get<{ spec: { config: string } }>(
        NETWORK_ATTACHMENT_DEFINITIONS,
        "default",
        name,
      );
      assertEquals(JSON.parse(got.spec.config).type, "macvlan");
    } finally {
      await client.delete(NETWORK_ATTACHMENT_DEFINITIONS, "default", name).catch(() => {});
    }
  }));
