/**
 * `deno task policy-explain --pod NS/NAME [--to NS/NAME|IP] [--from NS/NAME|IP] [--port P/PROTO]
 * [--kubeconfig FILE]`: which NetworkPolicies select the pod, and whether a connection to it (or
 * from it, with `--to`) would be allowed and why: the rule that allows it, or that none does.
 * Reads the cluster's policies, namespaces and pods and applies the same logic the nodes write
 * (`daemon/policy/compile.ts`). Exits 0 when allowed (or when only the selection was asked), 1
 * when denied, 2 on bad arguments or an unreadable cluster.
 *
 * @module
 */
import { parseArgs } from "deno-std/cli/parse_args.js";
import type { Namespace, Pod } from "kubernetes-types/core/v1.d.ts";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import { KubeClient } from "../k8s/client.ts";
import { inClusterConfig, loadKubeconfig } from "../k8s/kubeconfig.ts";
import { NAMESPACES, NETWORK_POLICIES, PODS } from "../k8s/resources.ts";
import { HttpTransport } from "../k8s/transport.ts";
import {
  type PolicyPod,
  policySelects,
  type PolicyView,
  type Protocol,
} from "../policy/compile.ts";
import { explain } from "../policy/explain.ts";
import { policyPodOf } from "../policy/policy_objects.ts";
import { checkedPolicy } from "../policy/policy_check.ts";

/** Reads the cluster as policies see it. */
export async function readPolicyView(client: KubeClient): Promise<PolicyView> {
  const [policies, namespaces, pods] = await Promise.all([
    client.listAll<NetworkPolicy>(NETWORK_POLICIES, {}),
    client.listAll<Namespace>(NAMESPACES, {}),
    client.listAll<Pod>(PODS, {}),
  ]);
  // The nodes' own conversion of pods and policies (an invalid one enforced closed), so the
  // explanation reads them exactly as the nodes do.
  return {
    policies: policies.items.map((p) => checkedPolicy(p).policy),
    namespaces: new Map(
      namespaces.items.map((n) => [n.metadata?.name ?? "", n.metadata?.labels ?? {}]),
    ),
    pods: pods.items.map(policyPodOf),
  };
}

/** `NS/NAME` to a pod of the view, or an address. */
function endpoint(view: PolicyView, text: string): PolicyPod | string {
  if (!text.includes("/") || /^[0-9a-f:.]+\/\d+$/i.test(text)) return text;
  const [ns, name] = text.split("/");
  const pod = view.pods.find((p) => p.namespace === ns && p.name === name);
  if (!pod) throw new Error(`no pod ${text}`);
  return pod;
}

/** What `policy explain` is asked. */
export interface ExplainQuestion {
  /** `NS/NAME` of the pod. */
  pod?: string;
  /** Where it connects to: `NS/NAME` or an address. */
  to?: string;
  /** Where a connection to it comes from: `NS/NAME` or an address. */
  from?: string;
  /** `PORT[/PROTO]`. */
  port?: string;
}

/** The usage line. */
export const POLICY_EXPLAIN_USAGE =
  "usage: policy-explain --pod NS/NAME [--to NS/NAME|IP] [--from NS/NAME|IP] [--port P/PROTO]";

/**
 * Answers `q` from the cluster `client` reads and prints the answer; returns the exit status: 0
 * when allowed (or when only the selection was asked), 1 when denied, 2 on a bad question or an
 * unreadable cluster. `deno task policy-explain` and `kubectl ferry policy explain` both run this.
 */
export async function runPolicyExplain(client: KubeClient, q: ExplainQuestion): Promise<number> {
  if (!q.pod) {
    console.error(POLICY_EXPLAIN_USAGE);
    return 2;
  }
  try {
    const view = await readPolicyView(client);
    const pod = endpoint(view, q.pod);
    if (typeof pod === "string") throw new Error("--pod names a pod: NS/NAME");
    const selecting = view.policies.filter((p) => policySelects(p, pod));
    console.log(
      selecting.length
        ? `${q.pod} is selected by: ${
          selecting.map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`).join(", ")
        }`
        : `${q.pod} is selected by no NetworkPolicy (open both ways)`,
    );
    if (!q.to && !q.from) return 0;
    const [portText, protoText] = (q.port ?? "").split("/");
    const protocol = (protoText ?? "TCP").toUpperCase() as Protocol;
    const port = portText ? Number(portText) : undefined;
    const [from, to] = q.to ? [pod, endpoint(view, q.to)] : [endpoint(view, q.from!), pod];
    const e = explain(view, from, to, protocol, port);
    if (e.egress) {
      console.log(`egress:  ${e.egress.allowed ? "allowed" : "denied"}: ${e.egress.why}`);
    }
    if (e.ingress) {
      console.log(`ingress: ${e.ingress.allowed ? "allowed" : "denied"}: ${e.ingress.why}`);
    }
    console.log(e.allowed ? "ALLOWED" : "DENIED");
    return e.allowed ? 0 : 1;
  } catch (e) {
    console.error(`policy-explain: ${e instanceof Error ? e.message : e}`);
    return 2;
  }
}

if (import.meta.main) {
  const flags = parseArgs(Deno.args, { string: ["pod", "to", "from", "port", "kubeconfig"] });
  if (!flags.pod) {
    console.error(POLICY_EXPLAIN_USAGE);
    Deno.exit(2);
  }
  try {
    const conn = flags.kubeconfig
      ? await loadKubeconfig(flags.kubeconfig)
      : await inClusterConfig();
    Deno.exit(await runPolicyExplain(new KubeClient(new HttpTransport(conn)), flags));
  } catch (e) {
    console.error(`policy-explain: ${e instanceof Error ? e.message : e}`);
    Deno.exit(2);
  }
}
