// MultiNetworkPolicy (daemon/policy/multi_policy.ts, multi_policy_enforcer.ts): the networks a
// policy is for, peers by their addresses on that network only, the per-namespace table nft
// accepts, and the enforcer putting a pod's rules in place before its ADD answers.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { ipInBlock } from "../../../daemon/policy/compile.ts";
import {
  compileMultiPolicies,
  type LocalInterface,
  type MultiPolicy,
  type NetworkedPod,
  POLICY_FOR_ANNOTATION,
  policyFor,
} from "../../../daemon/policy/multi_policy.ts";
import { MultiPolicyEnforcer } from "../../../daemon/policy/multi_policy_enforcer.ts";
import { networksOf } from "../../../daemon/policy/policy_enforcer.ts";
import { policyScript, renderInterfaceTable } from "../../../daemon/policy/nft_policy.ts";
import { CNI_ERROR, CniError } from "../../../lib/cni/errors.ts";
import { assertNftAccepts, HAS_NFT } from "./_nft.ts";
import { IS_ROOT } from "../../../daemon/dev/netns.ts";

function pod(name: string, labels: Record<string, string>, networks = {}): NetworkedPod {
  return {
    namespace: "a",
    name,
    labels,
    ips: [`10.0.0.${name.length}`],
    hostNetwork: false,
    done: false,
    ports: [{ name: "http", port: 8080, protocol: "TCP" }],
    networks,
  };
}

function mnp(name: string, network: string, spec: MultiPolicy["spec"]): MultiPolicy {
  return {
    metadata: { name, namespace: "a", annotations: { [POLICY_FOR_ANNOTATION]: network } },
    spec,
  };
}

const srv = pod("srv", { app: "srv" });
const here: LocalInterface = {
  pod: srv,
  netns: "/run/netns/srv",
  ifname: "net1",
  network: "a/blue",
  ips: ["192.168.1.10"],
};
const cli = pod("cli", { role: "client" }, {
  "a/blue": ["192.168.1.20"],
  "a/red": ["192.168.2.20"],
});
const other = pod("other", { role: "x" }, { "a/blue": ["192.168.1.30"] });
const deny = mnp("deny", "blue", {
  podSelector: { matchLabels: { app: "srv" } },
  policyTypes: ["Ingress"],
});
const fromClients = mnp("from-clients", "a/blue", {
  podSelector: { matchLabels: { app: "srv" } },
  ingress: [{
    from: [{ podSelector: { matchLabels: { role: "client" } } }],
    ports: [{ port: "http" }],
  }],
});

Deno.test("policy-for names networks as namespace/name, a bare name in the policy's namespace", () => {
  assertEquals(policyFor(mnp("p", " blue, b/red ,", { podSelector: {} })), ["a/blue", "b/red"]);
  assertEquals(policyFor({ metadata: { namespace: "a" } }), []);
});

Deno.test("network-status gives each pod's addresses per additional network, the default one left out", () => {
  const status = JSON.stringify([
    { name: "ferry", interface: "eth0", ips: ["10.0.0.5"], default: true },
    { name: "a/blue", interface: "net1", ips: ["192.168.1.5"] },
  ]);
  assertEquals(
    networksOf({ metadata: { annotations: { "k8s.v1.cni.cncf.io/network-status": status } } }),
    { "a/blue": ["192.168.1.5"] },
  );
  assertEquals(
    networksOf({ metadata: { annotations: { "k8s.v1.cni.cncf.io/network-status": "{" } } }),
    {},
  );
});

Deno.test("peers are the addresses pods have on the policy's network, never their default ones", () => {
  const namespaces = new Map([["a", {}]]);
  const [v] = compileMultiPolicies(
    { policies: [deny, fromClients], namespaces, pods: [srv, cli, other] },
    [here],
    ipInBlock,
  );
  assertEquals(v.ifname, "net1");
  assertEquals(v.ingress!.length, 1, "deny adds no rule, from-clients one");
  const rule = v.ingress![0];
  assertEquals(rule.peers, { ips: ["192.168.1.20"], blocks: [] });
  assertEquals(rule.ports, [{ protocol: "TCP", port: 8080 }], "the named port of the server");
  assertEquals(v.egress, undefined);
});

Deno.test("a policy for another network, or selecting another pod, isolates nothing here", () => {
  const namespaces = new Map([["a", {}]]);
  const red = mnp("red", "red", { podSelector: {}, policyTypes: ["Ingress"] });
  const clientsOnly = mnp("c", "blue", { podSelector: { matchLabels: { role: "client" } } });
  assertEquals(
    compileMultiPolicies(
      { policies: [red, clientsOnly], namespaces, pods: [srv] },
      [here],
      ipInBlock,
    ),
    [],
  );
});

Deno.test("the pod table jumps from the interface to its chains, passes neighbour discovery, drops the rest", () => {
  const namespaces = new Map([["a", {}]]);
  const verdicts = compileMultiPolicies(
    { policies: [deny, fromClients], namespaces, pods: [srv, cli] },
    [here],
    ipInBlock,
  );
  const text = renderInterfaceTable("fp", verdicts)!;
  assert(text.includes('iifname "net1" jump in-0'), text);
  assert(!text.includes('oifname "net1"'), "egress is not isolated");
  // The peers' addresses on the network are a named set the rule matches.
  const peers = /set (p[0-9a-f]+x*) \{ type ipv4_addr; elements = \{ 192\.168\.1\.20 \}; \}/
    .exec(text)?.[1];
  assert(peers, text);
  assert(text.includes(`ip saddr @${peers} meta l4proto tcp th dport { 8080 }`), text);
  assert(text.includes('counter drop comment "a/srv net1: no ingress rule allows it"'), text);
  assert(text.includes("nd-neighbor-solicit"), text);
  assertEquals(renderInterfaceTable("fp", []), undefined);
});

Deno.test({
  name: "nft accepts the pod table as written",
  ignore: !IS_ROOT || !HAS_NFT,
  fn: async () => {
    const namespaces = new Map([["a", {}]]);
    const both = mnp("both", "blue", {
      podSelector: {},
      policyTypes: ["Ingress", "Egress"],
      ingress: [{ from: [{ ipBlock: { cidr: "192.168.0.0/16", except: ["192.168.9.0/24"] } }] }],
      egress: [{
        to: [{ podSelector: {} }],
        ports: [{ port: "http" }, { protocol: "UDP", port: 53 }],
      }],
    });
    const verdicts = compileMultiPolicies(
      { policies: [both], namespaces, pods: [srv, cli] },
      [here, { ...here, ifname: "net2", ips: ["192.168.1.11"] }],
      ipInBlock,
    );
    const script = policyScript("fp", renderInterfaceTable("fp", verdicts));
    await assertNftAccepts(script);
  },
});

/** An enforcer over fakes: what it wrote where, and whether writes fail. */
function enforcer(opts: { fail?: boolean } = {}) {
  const writes: { netns: string; script: string }[] = [];
  const e = new MultiPolicyEnforcer({
    table: "fp",
    nft: {
      applyIn: (netns, script) => {
        if (opts.fail) return Promise.reject(new Error("nft: no"));
        writes.push({ netns, script });
        return Promise.resolve();
      },
    },
    interfaces: () => [here],
    cluster: { pods: () => [srv, cli, other], namespaces: () => new Map([["a", {}]]) },
    synced: () => true,
    netnsExists: () => Promise.resolve(true),
    logger: getLogger(["ferry", "test"]),
  });
  return { e, writes };
}

Deno.test("an ADD whose interface a policy selects answers only once the pod's table is written", async () => {
  const { e, writes } = enforcer();
  e.policyUpserted(fromClients);
  await e.plugged({ namespace: "a", name: "srv" });
  const last = writes.at(-1)!;
  assertEquals(last.netns, "/run/netns/srv");
  assert(last.script.includes('iifname "net1" jump in-0'), last.script);
  // The policy gone: the table goes too.
  e.policyRemoved(fromClients);
  await e.idle();
  assertEquals(writes.at(-1)!.script, "table inet fp\ndelete table inet fp\n");
  await e.close();
});

Deno.test("an ADD whose rules cannot be written fails with code 5; one no policy selects costs no write", async () => {
  const failing = enforcer({ fail: true });
  failing.e.policyUpserted(deny);
  const err = await assertRejects(
    () => failing.e.plugged({ namespace: "a", name: "srv" }),
    CniError,
  );
  assertEquals(err.code, CNI_ERROR.IO_FAILURE);
  await failing.e.close();
  const { e, writes } = enforcer();
  e.policyUpserted(mnp("red", "red", { podSelector: {}, policyTypes: ["Ingress"] }));
  await e.plugged({ namespace: "a", name: "srv" });
  await e.idle();
  assertEquals(writes, []);
  await e.close();
});
