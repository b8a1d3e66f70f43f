/**
 * The real whereabouts IPAM plugin (v0.9.0, built by `shared/tools/whereabouts/build.sh` into
 * `/opt/cnitest/whereabouts/bin/whereabouts`), driven through libcni (`/opt/cnitest/bin/cnirun`)
 * as a runtime drives it, against a real kube-apiserver: the peer Ferry's native serving of
 * whereabouts configs is compared with. The plugin is the network's only plugin (an IPAM plugin
 * reads the `ipam` section of its config), so an ADD allocates and answers its addresses without
 * plumbing a link: nothing receives traffic. Its objects (IPPools, reservations, its lock's
 * Lease) live in a namespace of their own, removed by {@link RealWhereabouts.close}.
 *
 * @module
 */
import { NAMESPACES } from "../k8s/resources.ts";
import type { KubeClient } from "../k8s/client.ts";
import type { KubeTransport } from "../k8s/transport.ts";

/** Where the plugin, its CRDs and the libcni driver are installed. */
export const WHEREABOUTS_TOOLS = {
  plugin: "/opt/cnitest/whereabouts/bin/whereabouts",
  crds: "/opt/cnitest/whereabouts/crds",
  cnirun: "/opt/cnitest/bin/cnirun",
};

/** What one ADD answered: its addresses (without prefix) or the plugin's error. */
export type WhereaboutsAdd = { ok: true; ips: string[] } | { ok: false; error: string };

const exists = (p: string) => Deno.stat(p).then(() => true, () => false);

/** Why the real plugin cannot run here (a missing tool or API), or undefined when it can. */
export async function whereaboutsMissing(
  kubeconfig: string | undefined,
): Promise<string | undefined> {
  if (!kubeconfig) return "no real kube-apiserver (FERRY_TEST_KUBECONFIG unset)";
  for (const p of [WHEREABOUTS_TOOLS.plugin, WHEREABOUTS_TOOLS.cnirun]) {
    if (!(await exists(p))) return `${p} is not built (see shared/tools/whereabouts/README.md)`;
  }
  return undefined;
}

async function run(
  cmd: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<{ ok: boolean; out: string; err: string }> {
  const o = await new Deno.Command(cmd, { args, env, stdout: "piped", stderr: "piped" }).output();
  const d = new TextDecoder();
  return { ok: o.success, out: d.decode(o.stdout), err: d.decode(o.stderr) };
}

/** The real plugin in a namespace of its own on the API of `kubeconfig`. */
export class RealWhereabouts {
  #n = 0;
  private constructor(
    private readonly dir: string,
    private readonly namespace: string,
    private readonly kubeconfig: string,
    private readonly adminKubeconfig: string,
    private readonly client: KubeClient,
    private readonly transport: KubeTransport,
  ) {}

  /**
   * Prepares the plugin's files (a CNI_PATH holding it, a kubeconfig whose context namespace is
   * `namespace`, the flat config file v0.9.0 insists on), creates the namespace and installs
   * whereabouts' CRDs when they are missing (left installed: other runs may use them).
   */
  static async open(
    client: KubeClient,
    transport: KubeTransport,
    adminKubeconfig: string,
    namespace: string,
  ): Promise<RealWhereabouts> {
    const dir = await Deno.makeTempDir({ prefix: "ferry-wab-" });
    await Deno.mkdir(`${dir}/bin`);
    await Deno.copyFile(WHEREABOUTS_TOOLS.plugin, `${dir}/bin/whereabouts`);
    await Deno.chmod(`${dir}/bin/whereabouts`, 0o755);
    const view = await run("kubectl", [
      "config",
      "view",
      "--raw",
      "--minify",
      "--flatten",
      "-o",
      "json",
      "--kubeconfig",
      adminKubeconfig,
    ]);
    if (!view.ok) throw new Error(`kubectl config view: ${view.err}`);
    const kc = JSON.parse(view.out);
    kc.contexts[0].context.namespace = namespace;
    const kubeconfig = `${dir}/kubeconfig`;
    await Deno.writeTextFile(kubeconfig, JSON.stringify(kc), { mode: 0o600 });
    await Deno.writeTextFile(
      `${dir}/whereabouts.conf`,
      JSON.stringify({ datastore: "kubernetes", kubernetes: { kubeconfig } }),
    );
    for (const kind of ["ippools", "overlappingrangeipreservations", "nodeslicepools"]) {
      const crd = `crd/${kind}.whereabouts.cni.cncf.io`;
      const got = await run("kubectl", ["--kubeconfig", adminKubeconfig, "get", crd]);
      if (got.ok) continue;
      const made = await run("kubectl", [
        "--kubeconfig",
        adminKubeconfig,
        "create",
        "-f",
        `${WHEREABOUTS_TOOLS.crds}/whereabouts.cni.cncf.io_${kind}.yaml`,
      ]);
      if (!made.ok && !made.err.includes("AlreadyExists")) {
        throw new Error(`installing ${crd}: ${made.err}`);
      }
      await run("kubectl", [
        "--kubeconfig",
        adminKubeconfig,
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        crd,
      ]);
    }
    await client.create(NAMESPACES, { metadata: { name: namespace } });
    return new RealWhereabouts(dir, namespace, kubeconfig, adminKubeconfig, client, transport);
  }

  /** The config file of a network whose only plugin is whereabouts with `ipam`'s keys. */
  async #conflist(ipam: Record<string, unknown>): Promise<string> {
    const path = `${this.dir}/net-${this.#n++}.conflist`;
    await Deno.writeTextFile(
      path,
      JSON.stringify({
        cniVersion: "0.4.0",
        name: "wabcompat",
        plugins: [{
          type: "whereabouts",
          ipam: {
            type: "whereabouts",
            ...ipam,
            configuration_path: `${this.dir}/whereabouts.conf`,
            kubernetes: { kubeconfig: this.kubeconfig },
          },
        }],
      }),
    );
    return path;
  }

  #env(pod: string): Record<string, string> {
    return {
      CNI_PATH: `${this.dir}/bin`,
      CNI_CACHE_DIR: `${this.dir}/cache`,
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${this.namespace};K8S_POD_NAME=${pod}`,
      PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
    };
  }

  /**
   * ADD of pod `pod` (container ID `wab-<pod>`) on the network whose IPAM is `ipam` (a
   * whereabouts config as a NAD holds it; the plugin's own machinery keys are added).
   */
  async add(ipam: Record<string, unknown>, pod: string): Promise<WhereaboutsAdd> {
    const conf = await this.#conflist(ipam);
    const r = await run(
      WHEREABOUTS_TOOLS.cnirun,
      ["add", conf, `/var/run/netns/wab-${pod}`, `wab-${pod}`, "net1"],
      this.#env(pod),
    );
    if (!r.ok) return { ok: false, error: (r.err || r.out).trim() };
    const result = JSON.parse(r.out.trim().split("\n").pop()!);
    return {
      ok: true,
      ips: (result.ips ?? []).map((i: { address: string }) => i.address.split("/")[0]),
    };
  }

  /** DEL of pod `pod` on that network. */
  async del(ipam: Record<string, unknown>, pod: string): Promise<void> {
    const conf = await this.#conflist(ipam);
    const r = await run(
      WHEREABOUTS_TOOLS.cnirun,
      ["del", conf, `/var/run/netns/wab-${pod}`, `wab-${pod}`, "net1"],
      this.#env(pod),
    );
    if (!r.ok) throw new Error(`whereabouts DEL of ${pod}: ${r.err}`);
  }

  /** Removes the namespace with every object the plugin made in it, and the files. */
  async close(): Promise<void> {
    const kinds = [
      "ippools.whereabouts.cni.cncf.io",
      "overlappingrangeipreservations.whereabouts.cni.cncf.io",
      "leases.coordination.k8s.io",
    ];
    await run("kubectl", [
      "--kubeconfig",
      this.adminKubeconfig,
      "-n",
      this.namespace,
      "delete",
      kinds.join(","),
      "--all",
      "--wait=false",
    ]);
    await this.client.delete(NAMESPACES, undefined, this.namespace).catch(() => {});
    // No namespace controller runs beside a bare kube-apiserver: finish the deletion.
    const path = `/api/v1/namespaces/${this.namespace}`;
    const ns = await this.transport.json<Record<string, unknown>>({ method: "GET", path })
      .catch(() => undefined);
    if (ns) {
      await this.transport.json({
        method: "PUT",
        path: `${path}/finalize`,
        body: { ...ns, spec: { finalizers: [] } },
      }).catch(() => {});
    }
    await Deno.remove(this.dir, { recursive: true }).catch(() => {});
  }
}
