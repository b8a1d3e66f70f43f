// `kubectl ferry sysdump` leaks no credential a tenant's NAD carries: a pod attached through a
// NAD with whereabouts' etcd credentials and a plugin `apiKey` (its attachment record holds the
// NAD's config) is dumped, and no file of the extracted archive holds any of the secret values,
// byte for byte, while the record itself and the non-secret keys are still there.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { type SimCluster, withSimCluster } from "../../daemon/dev/cluster_sim.ts";
import { installNetworkBlockCrd } from "../../daemon/dev/crds.ts";
import { IS_ROOT, withTempDir } from "../../daemon/dev/netns.ts";
import { CONFIGMAPS, DAEMONSETS } from "../../daemon/k8s/resources.ts";
import { ferry as run } from "./_cli_deps.ts";
import { withNads } from "../integration/_nads.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import {
  createFerryPods,
  removeFerryPods,
  scopeFlags,
  SimExec,
  TEST_FERRY_NAMESPACE,
} from "./_sim_exec.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);

/** The values that must not leave the node. */
const SECRETS = {
  etcd_password: "etcd-PW-4b1d9e",
  etcd_username: "etcd-user-7c3a",
  apiKey: "api-KEY-9f2e61",
  etcd_key_file: "/etc/whereabouts/etcd-KEYFILE-5d0c.pem",
  token: "tok-1e8b77",
};

/** Every file below `dir`, as bytes, by path. */
async function filesUnder(dir: string): Promise<Map<string, Uint8Array>> {
  const out = new Map<string, Uint8Array>();
  const walk = async (d: string) => {
    for await (const e of Deno.readDir(d)) {
      if (e.isDirectory) await walk(`${d}/${e.name}`);
      else out.set(`${d}/${e.name}`.slice(dir.length + 1), await Deno.readFile(`${d}/${e.name}`));
    }
  };
  await walk(dir);
  return out;
}

/** Whether `haystack` holds `needle`'s UTF-8 bytes anywhere. */
function holds(haystack: Uint8Array, needle: string): boolean {
  const n = new TextEncoder().encode(needle);
  outer: for (let i = 0; i + n.length <= haystack.length; i++) {
    for (let j = 0; j < n.length; j++) if (haystack[i + j] !== n[j]) continue outer;
    return true;
  }
  return false;
}

async function body(c: SimCluster, dir: string) {
  await createFerryPods(c, "2026-01-01T09:00:00Z", 0);
  await withNads(c, async ({ t, create }) => {
    await installNetworkBlockCrd(c.client);
    const nad = `creds-${t}`;
    await create(nad, {
      cniVersion: "0.3.1",
      type: "macvlan",
      master: "eth0",
      mode: "bridge",
      apiKey: SECRETS.apiKey,
      ipam: {
        type: "whereabouts",
        range: "192.168.88.0/28",
        network_name: `space-${nad}`,
        datastore: "etcd",
        etcd_host: "https://etcd.invalid:2379",
        etcd_username: SECRETS.etcd_username,
        etcd_password: SECRETS.etcd_password,
        etcd_key_file: SECRETS.etcd_key_file,
        kubernetes: { kubeconfig: "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig" },
        auth: { token: SECRETS.token },
      },
    });
    await c.addPod(c.nodes[0], "creds-0", 0, {
      annotations: { "k8s.v1.cni.cncf.io/networks": nad },
    });
    const archive = `${dir}/dump.tar.gz`;
    const r = await run(
      ["sysdump", "--kubeconfig", c.kubeconfig, ...scopeFlags(c), "--file", archive],
      new SimExec(c),
      { now: () => Date.parse("2026-01-01T12:00:00Z") },
    );
    assertEquals(r.code, 0, `a whole sysdump:\n${r.err}`);
    const out = `${dir}/out`;
    await Deno.mkdir(out);
    const tar = await new Deno.Command("tar", { args: ["-xzf", archive, "-C", out] }).output();
    assertEquals(tar.code, 0, "tar -xzf");
    const files = await filesUnder(out);
    // The record of the NAD's attachment is there, its harmless keys too: the test can fail.
    const records = [...files].filter(([p, b]) =>
      p.includes("/attachments/") && holds(b, "creds-0") && holds(b, "etcd.invalid")
    );
    assertEquals(records.length, 1, `the NAD attachment's record: ${[...files.keys()]}`);
    const record = new TextDecoder().decode(records[0][1]);
    assert(record.includes("etcd_password"), "the secret key's name stays (only its value goes)");
    for (const [path, bytes] of files) {
      for (const [key, secret] of Object.entries(SECRETS)) {
        assert(!holds(bytes, secret), `${path} holds the NAD's ${key} (${secret})`);
      }
    }
  });
}

Deno.test({
  name:
    "sysdump redacts a NAD's credentials (whereabouts' etcd password, username and key file, a plugin's apiKey) in every file of the archive",
  ignore: !IS_ROOT || !hasNft,
  fn: () =>
    withSimCluster({
      nodes: 1,
      kubeconfig: REAL_KUBECONFIG,
      config: { multiNetwork: { whereaboutsIpam: "native" } },
    }, async (c) => {
      try {
        await withTempDir((dir) => body(c, dir));
      } finally {
        await removeFerryPods(c);
        await c.client.delete(CONFIGMAPS, TEST_FERRY_NAMESPACE, "ferry-config").catch(() => {});
        await c.client.delete(DAEMONSETS, TEST_FERRY_NAMESPACE, "ferry").catch(() => {});
      }
    }),
});
