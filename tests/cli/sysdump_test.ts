import { assert, assertEquals, assertMatch } from "deno-std/assert/mod.js";
import { type SimCluster, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { withTempDir } from "../../daemon/dev/netns.ts";
import { CONFIGMAPS, DAEMONSETS } from "../../daemon/k8s/resources.ts";
import { ferry as run } from "./_cli_deps.ts";
import type { SysdumpManifest } from "../../cli/sysdump.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import {
  createFerryPods,
  removeFerryPods,
  scopeFlags,
  SimExec,
  TEST_FERRY_NAMESPACE,
} from "./_sim_exec.ts";

const NOW = Date.parse("2026-01-01T12:00:00Z");
const TOP = "ferry-sysdump-20260101-120000";

const ferry = (args: string[], exec: SimExec) => run(args, exec, { now: () => NOW });

/** Extracts the archive with the system's tar; returns every file's text by path. */
async function extract(archive: string, dir: string): Promise<Map<string, string>> {
  const out = await new Deno.Command("tar", { args: ["-xzf", archive, "-C", dir], stderr: "piped" })
    .output();
  assertEquals(out.code, 0, `tar -xzf: ${new TextDecoder().decode(out.stderr)}`);
  const files = new Map<string, string>();
  const walk = async (d: string, rel: string) => {
    for await (const e of Deno.readDir(d)) {
      if (e.isDirectory) await walk(`${d}/${e.name}`, `${rel}${e.name}/`);
      else files.set(`${rel}${e.name}`, await Deno.readTextFile(`${d}/${e.name}`));
    }
  };
  await walk(`${dir}/${TOP}`, "");
  return files;
}

Deno.test("sysdump archives every node's part through its Ferry pod, the API's, a manifest, and no secret", async () => {
  await withSimCluster({ nodes: 2, kubeconfig: REAL_KUBECONFIG }, async (c) => {
    try {
      await body(c);
    } finally {
      await removeFerryPods(c);
      await c.client.delete(CONFIGMAPS, TEST_FERRY_NAMESPACE, "ferry-config").catch(() => {});
      await c.client.delete(DAEMONSETS, TEST_FERRY_NAMESPACE, "ferry").catch(() => {});
    }
  });
});

async function body(c: SimCluster) {
  {
    await createFerryPods(c, "2026-01-01T09:00:00Z", 0);
    await c.client.create(CONFIGMAPS, {
      metadata: { name: "ferry-config", namespace: TEST_FERRY_NAMESPACE },
      data: { "config.json": "{}" },
    });
    const labels = { "app.kubernetes.io/name": "ferry-sysdump-test" };
    await c.client.create(DAEMONSETS, {
      metadata: { name: "ferry", namespace: TEST_FERRY_NAMESPACE },
      spec: {
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            containers: [{
              name: "ferry",
              image: "registry.invalid/ferry:test",
              env: [{ name: "REGISTRY_TOKEN", value: "s3cr3t-in-env" }],
            }],
          },
        },
      },
    });
    await c.addPod(c.nodes[0], "web-0");
    const apiToken = /token: "?([^"\s}]+)/.exec(await Deno.readTextFile(c.kubeconfig))?.[1] ?? "";
    assert(apiToken && apiToken.length > 8, "the simulation's API token");
    const exec = new SimExec(c);
    const [n1, n2] = c.nodes;

    await withTempDir(async (dir) => {
      const archive = `${dir}/dump.tar.gz`;
      const r = await ferry([
        "sysdump",
        "--kubeconfig",
        c.kubeconfig,
        ...scopeFlags(c),
        "--file",
        archive,
      ], exec);
      assertEquals(r.code, 0, `a whole sysdump:\n${r.err}`);
      assertEquals(r.out, `${archive}\n`);
      assertMatch(r.err, new RegExp(`sysdump: ${n1.name} done`));
      const files = await extract(archive, dir);
      const manifest = JSON.parse(files.get("manifest.json")!) as SysdumpManifest;
      assertEquals(manifest.failed, [], "nothing failed");
      assertEquals(manifest.nodes, [n1.name, n2.name].sort());
      assertEquals(
        manifest.collected,
        [...files.keys()].filter((f) => f !== "manifest.json").sort(),
      );
      for (const n of c.nodes) {
        const other = c.nodes.find((o) => o !== n)!;
        const part = (f: string): string => {
          const text = files.get(`nodes/${n.name}/${f}`);
          assert(text !== undefined, `nodes/${n.name}/${f} in the archive: ${[...files.keys()]}`);
          return text!;
        };
        assert("cniRequests" in JSON.parse(part("stats.json")), "the daemon's /v1/stats");
        assertEquals(JSON.parse(part("config.json")).nodeName, n.name, "its config");
        assertMatch(part("nft-ferry.txt"), /table inet ferry \{/, "the masquerade table");
        assertMatch(part("links.txt"), /ferry0/, "the bridge");
        assertMatch(part("routes.txt"), new RegExp(other.podCIDR.replace(/\./g, "\\.")));
        assert(part("ferry.log").length > 0, "the daemon's log");
        part("addresses.txt");
        part("neighbours.txt");
        part("fdb.txt");
      }
      const records = [...files.keys()].filter((f) =>
        f.startsWith(`nodes/${n1.name}/attachments/`)
      );
      assertEquals(records.length, 1, `web-0's attachment record: ${records}`);
      assert(files.get(records[0])!.includes("web-0"));
      for (const f of ["api/daemonset.json", "api/ferry-pods.json", "api/nodes.json"]) {
        assert(files.has(f), `${f} in the archive`);
      }
      assert(
        files.has("api/ippools.json") !== manifest.absent.includes("api/ippools.json"),
        "IPPools collected, or named absent where their CRD is not installed",
      );
      for (const [path, text] of files) {
        assert(!text.includes(apiToken), `${path} holds the API token`);
        assert(!text.includes("s3cr3t-in-env"), `${path} holds the DaemonSet's secret env value`);
        assert(!/PRIVATE KEY|kind: Config/.test(text), `${path} holds a key or a kubeconfig`);
      }
    });

    await c.killDaemon(n2);
    await withTempDir(async (dir) => {
      const archive = `${dir}/dump.tar.gz`;
      const r = await ferry([
        "sysdump",
        "--kubeconfig",
        c.kubeconfig,
        ...scopeFlags(c),
        "--file",
        archive,
      ], exec);
      assertEquals(r.code, 1, `a node's daemon stopped: the dump is written, naming what failed`);
      const files = await extract(archive, dir);
      const manifest = JSON.parse(files.get("manifest.json")!) as SysdumpManifest;
      assertEquals(manifest.failed.map((f) => f.part), [`nodes/${n2.name}/stats.json`]);
      assertMatch(manifest.failed[0].why, /nothing is listening/);
      assertMatch(r.err, new RegExp(`not collected: nodes/${n2.name}/stats.json`));
      assert(files.has(`nodes/${n2.name}/nft-ferry.txt`), "the rest of the stopped node's part");
      assert(files.has(`nodes/${n1.name}/stats.json`), "the healthy node's whole part");
    });
  }
}
