/**
 * `deno task test:real`: the Kubernetes-facing test files, unchanged, against a real
 * kube-apiserver. The API comes from `FERRY_TEST_KUBECONFIG` (default `/opt/realk8s/kubeconfig`,
 * where `shared/tools/realk8s` builds one). Start that server with
 * `--etcd-compaction-interval=20s` so that 410 Gone can be provoked.
 *
 * @module
 */

/** The test files that talk to the Kubernetes API; the default suite runs them on the stand-in. */
export const KUBE_FACING_TESTS = [
  "tests/daemon/k8s/",
  "tests/daemon/ipam/block_ipam_test.ts",
  "tests/daemon/ipam/nad_network_ipam_test.ts",
  "tests/daemon/ipam/nad_space_owners_test.ts",
  "tests/daemon/ipam/whereabouts_compat_test.ts",
  "tests/daemon/cluster/node_identity_test.ts",
  "tests/daemon/gc/dead_node_blocks_test.ts",
  "tests/integration/kube_daemon_test.ts",
  "tests/integration/cluster_test.ts",
  "tests/integration/cluster_pool_test.ts",
  "tests/integration/gc_test.ts",
  "tests/integration/multi_network_test.ts",
  "tests/integration/nad_ipam_test.ts",
  "tests/integration/nad_ferry_ipam_test.ts",
  "tests/integration/chaos_cluster_test.ts",
  "tests/integration/network_policy_test.ts",
  "tests/integration/multi_network_policy_test.ts",
  "tests/integration/network_policy_table_test.ts",
  "tests/integration/port_security_test.ts",
  "tests/integration/port_security_nd_test.ts",
  "tests/deploy/",
  "tests/cli/status_test.ts",
  "tests/cli/sysdump_test.ts",
];

if (import.meta.main) {
  const kubeconfig = Deno.env.get("FERRY_TEST_KUBECONFIG") ?? "/opt/realk8s/kubeconfig";
  try {
    await Deno.stat(kubeconfig);
  } catch {
    console.error(
      `test:real needs a real API server: no kubeconfig at ${kubeconfig} (set FERRY_TEST_KUBECONFIG)`,
    );
    Deno.exit(2);
  }
  const repo = new URL("../../", import.meta.url).pathname;
  const status = await new Deno.Command(Deno.execPath(), {
    args: ["test", "--allow-all", "--frozen", ...Deno.args, ...KUBE_FACING_TESTS],
    cwd: repo,
    env: { FERRY_TEST_KUBECONFIG: kubeconfig },
    stdout: "inherit",
    stderr: "inherit",
  }).spawn().status;
  Deno.exit(status.code);
}
