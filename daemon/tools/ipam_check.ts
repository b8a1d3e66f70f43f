/**
 * `deno task ipam-check [--kubeconfig FILE] [--json]`: whether any pod address of the cluster is
 * held twice, leaked or out of place. Reads IPPools, IPBlocks, Nodes and every pod (`status.podIPs`,
 * else the default entry of its `network-status`) and reports each finding of
 * {@link clusterFindings}, and the NetworkBlocks of NAD networks served natively with
 * {@link networkFindings}; exits 1 when there is any, 0 when there is none, 2 when the cluster
 * cannot be read. In the image: `deno run --allow-all daemon/tools/ipam_check.ts` (in-cluster config
 * when no kubeconfig is given; the DaemonSet's RBAC allows every read it makes).
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import type { Node, Pod } from "kubernetes-types/core/v1.d.ts";
import { KubeClient } from "../k8s/client.ts";
import { KubeApiError } from "../k8s/errors.ts";
import { inClusterConfig, loadKubeconfig } from "../k8s/kubeconfig.ts";
import {
  IPBLOCKS,
  IPPOOLS,
  NETWORKBLOCKS,
  NODES,
  PODS,
  type ResourceType,
} from "../k8s/resources.ts";
import { HttpTransport } from "../k8s/transport.ts";
import type { IpBlockObject, IpPoolObject } from "../ipam/ip_pools.ts";
import {
  type CheckedPod,
  clusterFindings,
  type ClusterState,
  type Finding,
} from "../ipam/integrity.ts";
import { NETWORK_STATUS_ANNOTATION } from "../multivif/selections.ts";
import type { NetworkBlockObject } from "../ipam/nad_blocks.ts";
import { networkFindings } from "../ipam/nad_integrity.ts";

/** The default-network addresses of a pod: `status.podIPs`, else network-status' default entry. */
export function podAddresses(pod: Pod): string[] {
  const fromStatus = pod.status?.podIPs?.map((p) => p.ip).filter((ip): ip is string => !!ip) ??
    (pod.status?.podIP ? [pod.status.podIP] : []);
  if (fromStatus.length) return fromStatus;
  const text = pod.metadata?.annotations?.[NETWORK_STATUS_ANNOTATION];
  if (!text) return [];
  try {
    const entries = JSON.parse(text) as { default?: boolean; ips?: string[] }[];
    return entries.find((e) => e.default)?.ips ?? [];
  } catch {
    return [];
  }
}

/** A pod as the check reads it. */
export function checkedPod(pod: Pod): CheckedPod {
  const phase = pod.status?.phase;
  return {
    namespace: pod.metadata?.namespace ?? "",
    name: pod.metadata?.name ?? "",
    uid: pod.metadata?.uid ?? "",
    node: pod.spec?.nodeName,
    hostNetwork: pod.spec?.hostNetwork ?? false,
    ips: podAddresses(pod),
    terminated: phase === "Succeeded" || phase === "Failed",
  };
}

/** Reads what the check needs from the API (a cluster without Ferry's CRDs has no pools). */
export async function readClusterState(client: KubeClient): Promise<ClusterState> {
  const all = async <T>(rt: ResourceType): Promise<T[]> => {
    try {
      return (await client.listAll<T>(rt, {})).items;
    } catch (e) {
      if (e instanceof KubeApiError && e.isNotFound) return [];
      throw e;
    }
  };
  const [pools, blocks, nodes, pods, networkBlocks] = await Promise.all([
    all<IpPoolObject>(IPPOOLS),
    all<IpBlockObject>(IPBLOCKS),
    all<Node>(NODES),
    all<Pod>(PODS),
    all<NetworkBlockObject>(NETWORKBLOCKS),
  ]);
  return {
    pools,
    blocks,
    networkBlocks,
    nodes: nodes.map((n) => ({
      name: n.metadata?.name ?? "",
      podCIDRs: n.spec?.podCIDRs ?? (n.spec?.podCIDR ? [n.spec.podCIDR] : []),
    })),
    pods: pods.map(checkedPod),
  };
}

/** The report as a person reads it. */
export function reportText(state: ClusterState, findings: Finding[]): string {
  const head = `ipam check: ${state.pools.length} IPPools, ${state.blocks.length} IPBlocks, ` +
    (state.networkBlocks?.length ? `${state.networkBlocks.length} NetworkBlocks, ` : "") +
    `${state.nodes.length} nodes, ${state.pods.length} pods`;
  if (!findings.length) return `${head}: no address held twice, leaked or out of place\n`;
  const counts = new Map<string, number>();
  for (const f of findings) counts.set(f.kind, (counts.get(f.kind) ?? 0) + 1);
  const summary = [...counts].map(([k, n]) => `${n} ${k}`).join(", ");
  return `${head}: ${findings.length} problems (${summary})\n` +
    findings.map((f) => `  ${f.kind}: ${f.message}\n`).join("");
}

/**
 * Runs the check on `client` and prints its report (JSON with `json`); returns the exit status:
 * 1 with findings, 0 without, 2 when the cluster cannot be read. `deno task ipam-check` and
 * `kubectl ferry ipam check` both run this.
 */
export async function runIpamCheck(client: KubeClient, json: boolean): Promise<number> {
  let state: ClusterState;
  try {
    state = await readClusterState(client);
  } catch (e) {
    console.error(`ipam-check: cannot read the cluster: ${e instanceof Error ? e.message : e}`);
    return 2;
  }
  const findings = [
    ...clusterFindings(state),
    ...networkFindings({ ...state, networkBlocks: state.networkBlocks ?? [] }),
  ];
  if (json) {
    console.log(JSON.stringify(
      {
        checked: {
          pools: state.pools.length,
          blocks: state.blocks.length,
          networkBlocks: state.networkBlocks?.length ?? 0,
          nodes: state.nodes.length,
          pods: state.pods.length,
        },
        findings,
      },
      null,
      2,
    ));
  } else {
    Deno.stdout.writeSync(new TextEncoder().encode(reportText(state, findings)));
  }
  return findings.length ? 1 : 0;
}

if (import.meta.main) {
  const flags = parseArgs(Deno.args, {
    string: ["kubeconfig"],
    boolean: ["json", "help"],
    unknown: (arg: string) => {
      console.error(`ipam-check: unknown argument ${arg}`);
      Deno.exit(2);
    },
  });
  if (flags.help) {
    console.log("usage: deno task ipam-check [--kubeconfig FILE] [--json]");
    Deno.exit(0);
  }
  let transport: HttpTransport;
  try {
    const conn = flags.kubeconfig
      ? await loadKubeconfig(flags.kubeconfig)
      : await inClusterConfig();
    transport = new HttpTransport(conn);
  } catch (e) {
    console.error(`ipam-check: cannot read the cluster: ${e instanceof Error ? e.message : e}`);
    Deno.exit(2);
  }
  const code = await runIpamCheck(new KubeClient(transport), flags.json);
  transport.close();
  Deno.exit(code);
}
