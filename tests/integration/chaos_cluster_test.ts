// Address integrity under faults, mistakes and tenants, at the default suite's size: a simulated
// pool-IPAM cluster churning pods while daemons are killed, blocks deleted and re-pointed by hand,
// a second daemon takes a node's name, a Node at an unreachable address appears, a node is
// re-addressed, an overlapping IPPool appears and the API goes away; afterwards every node's
// standing pod reaches the next node's, and every node reports the unreachable one's block. On the
// stand-in, or in `test:real` on a real kube-apiserver. Needs root and nft. The full size is
// `deno task chaos:cluster` (bench/results/chaos_cluster.json).
import { assert } from "deno-std/assert/mod.js";
import { runClusterChaos } from "../../daemon/dev/chaos_cluster.ts";
import { REAL_KUBECONFIG } from "../daemon/k8s/_target.ts";
import { IS_ROOT } from "../../daemon/dev/netns.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);

Deno.test({
  name:
    "chaos:cluster at small size: no address on two pods, no overlapping blocks during the churn, pods of every good node reach each other, and nothing leaked once every pod is gone",
  ignore: !IS_ROOT || !hasNft,
  fn: async () => {
    const lines: string[] = [];
    const report = await runClusterChaos({
      nodes: 4,
      pods: 60,
      concurrency: 8,
      blockSize: 28,
      kills: 2,
      apiOutageSeconds: 3,
      kubeconfig: REAL_KUBECONFIG,
      log: (line) => lines.push(line),
    });
    const text = JSON.stringify(report, null, 2);
    assert(report.ok, `${text}\n${lines.join("\n")}`);
    assert(report.faults.length >= 8, `every fault was injected:\n${text}`);
    assert(
      report.reach.pairs >= 2,
      `standing pods of two nodes or more checked for reach:\n${text}`,
    );
    const moved = /(\S+) re-addressed/.exec(report.faults.map((f) => f.fault).join("\n"))?.[1];
    assert(
      moved && report.reach.nodes.includes(moved),
      `the re-addressed node's pod checked:\n${text}`,
    );
    assert(report.checks >= 2, text);
    assert(report.adds.ok >= report.options.pods * 0.9, text);
  },
});

Deno.test({
  name:
    "chaos:cluster at small size with every pod also on a NAD network served natively: no address on two pods on either network, no overlapping blocks, nothing leaked",
  ignore: !IS_ROOT || !hasNft,
  fn: async () => {
    const lines: string[] = [];
    const report = await runClusterChaos({
      nodes: 4,
      pods: 60,
      concurrency: 8,
      blockSize: 28,
      kills: 2,
      apiOutageSeconds: 3,
      kubeconfig: REAL_KUBECONFIG,
      nadNetwork: true,
      log: (line) => lines.push(line),
    });
    const text = JSON.stringify(report, null, 2);
    assert(report.ok, `${text}\n${lines.join("\n")}`);
    assert(report.faults.length >= 6, `every fault was injected:\n${text}`);
    assert(report.checks >= 2, text);
    assert(report.adds.ok >= report.options.pods * 0.9, text);
  },
});
