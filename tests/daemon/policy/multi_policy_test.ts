// MultiNetworkPolicy (daemon/policy/multi_policy.ts, multi_policy_enforcer.ts): the networks a
// policy is for, peers by their addresses on that network only, the per-namespace table nft
// accepts, and the enforcer putting a pod's rules in place before its ADD answers.
import { assert, assertEquals, assertRejects, assertThrows } from "deno-std/assert/mod.js";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { getLogger } from "@logtape/logtape";
import { type AllowRule, ipInBlock } from "../../../daemon/policy/compile.ts";
import {
  compileMultiPolicies,
  type InterfaceVerdict,
  type LocalInterface,
  type MultiPolicy,
  type NetworkedPod,
  POLICY_FOR_ANNOTATION,
  policyFor,
} from "../../../daemon/policy/multi_policy.ts";
import { MultiPolicyEnforcer } from "../../../daemon/policy/multi_policy_enforcer.ts";
import { networksOf, policyPodOf } from "../../../daemon/policy/policy_objects.ts";
import { policyScript } from "../../../daemon/policy/nft_scripts.ts";
import { renderInterfaceTable } from "../../../daemon/policy/nft_interface_table.ts";
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
  const scheduled = (value: string) => ({
    metadata: { namespace: "a", annotations: { "k8s.v1.cni.cncf.io/network-status": value } },
    spec: { nodeName: "n1", containers: [] },
  });
  assertEquals(networksOf(scheduled(status)), { "a/blue": ["192.168.1.5"] });
  assertEquals(networksOf(scheduled("{")), {});
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

// Issue #42, item 1: tenant prb3b forges a network-status naming prb3a's network, its "address"
// nftables text that would open prb3a's isolated pod.
const INJECTION =
  "192.168.77.99 }; }\n  chain in-0 { accept; }\n  set pzz { type ipv4_addr; elements = { 192.168.77.98";

/** A pod object as the API has it, with a network-status and optionally a node. */
function apiPod(
  namespace: string,
  name: string,
  labels: Record<string, string>,
  status: unknown[],
  nodeName?: string,
): Pod {
  return {
    metadata: {
      namespace,
      name,
      labels,
      annotations: { "k8s.v1.cni.cncf.io/network-status": JSON.stringify(status) },
    },
    spec: { containers: [], ...(nodeName ? { nodeName } : {}) },
    status: { phase: nodeName ? "Running" : "Pending", podIPs: [] },
  };
}

const victim: LocalInterface = {
  pod: { ...pod("v1", { app: "v" }), namespace: "prb3a" },
  netns: "/run/netns/v1",
  ifname: "net1",
  network: "prb3a/vnet",
  ips: ["192.168.77.10"],
};
const clientsOnly: MultiPolicy = {
  metadata: {
    namespace: "prb3a",
    name: "clients-only",
    annotations: { [POLICY_FOR_ANNOTATION]: "vnet" },
  },
  spec: {
    podSelector: { matchLabels: { app: "v" } },
    policyTypes: ["Ingress", "Egress"],
    ingress: [{ from: [{ podSelector: { matchLabels: { role: "client" } } }] }],
    // Egress to a named port with no peers: every pod's addresses, no label match needed.
    egress: [{ ports: [{ port: "http" }] }],
  },
};
const forged = [{ name: "prb3a/vnet", ips: [INJECTION, "192.168.77.99"] }];
const attackers = [
  // prb3b's pod, never scheduled, claiming prb3a's network.
  apiPod("prb3b", "never-runs", { role: "client" }, forged),
  // prb3b's pod, scheduled, claiming prb3a's network.
  apiPod("prb3b", "runs", { role: "client" }, forged, "n2"),
  // A pod of prb3a itself whose annotation is no address: dropped as text.
  apiPod("prb3a", "odd", { role: "client" }, [{ name: "prb3a/vnet", ips: [INJECTION] }], "n2"),
  // A pod of prb3a no node runs: whoever wrote its network-status, no CNI did.
  apiPod("prb3a", "unscheduled", { role: "client" }, [{
    name: "prb3a/vnet",
    ips: ["192.168.77.96"],
  }]),
  // A pod of this node claiming an address its record does not hold.
  apiPod(
    "prb3a",
    "local",
    { role: "client" },
    [{ name: "prb3a/vnet", ips: ["192.168.77.97"] }],
    "n1",
  ),
].map((p) => ({
  ...policyPodOf(p),
  ports: [{ name: "http", port: 80, protocol: "TCP" as const }],
}));

Deno.test("a forged network-status address never reaches another tenant's pod table, as text or as a peer", async () => {
  const verdicts = compileMultiPolicies(
    {
      policies: [clientsOnly],
      namespaces: new Map([["prb3a", {}], ["prb3b", {}]]),
      pods: attackers,
      node: "n1",
    },
    [victim],
    ipInBlock,
  );
  assertEquals(verdicts.length, 1);
  const [v] = verdicts;
  const ingressPeers = v.ingress!.flatMap((r) => r.peers === "any" ? ["any"] : r.peers.ips);
  assertEquals(ingressPeers, [], "no forged address is a peer of prb3a's policy");
  assertEquals(
    v.egress!.flatMap((r) => r.triples ?? []).map((t) => t.ip),
    ["192.168.77.10"],
    "an egress named-port peer: the victim itself, no forged address",
  );
  const script = policyScript("fp", renderInterfaceTable("fp", verdicts));
  for (
    const text of [
      "192.168.77.99",
      "192.168.77.98",
      "192.168.77.97",
      "192.168.77.96",
      "pzz",
      "{ accept; }",
    ]
  ) {
    assert(!script.includes(text), `${JSON.stringify(text)} reached the script:\n${script}`);
  }
  if (IS_ROOT && HAS_NFT) await assertNftAccepts(script);
});

Deno.test("the pod table refuses any address, interface name or port that is not one, and quotes comments safely", () => {
  const rule = (over: Partial<AllowRule>): InterfaceVerdict[] => [{
    ...victim,
    pod: { ...victim.pod, ips: victim.ips },
    ingress: [{ policy: "prb3a/p", rule: 0, peers: "any", ports: "any", ...over }],
  }];
  assertThrows(
    () => renderInterfaceTable("fp", rule({ peers: { ips: [INJECTION], blocks: [] } })),
    Error,
    "as an address",
  );
  assertThrows(
    () =>
      renderInterfaceTable(
        "fp",
        rule({ triples: [{ ip: "192.168.77.5", protocol: "TCP", port: -1 }] }),
      ),
    Error,
    "as a port",
  );
  assertThrows(
    () => renderInterfaceTable("fp", [{ ...rule({})[0], ifname: 'n"accept' }]),
    Error,
    "interface name",
  );
  const text = renderInterfaceTable("fp", rule({ policy: 'x" accept; "' }))!;
  assert(text.includes('comment "x_ accept_ _ ingress[0]"'), text);
});

Deno.test("an invalid MultiNetworkPolicy isolates what it selects with none of its rules, said once; the others are enforced", async () => {
  const refused: string[] = [];
  const writes: string[] = [];
  const e = new MultiPolicyEnforcer({
    table: "fp",
    nft: { applyIn: (_netns, script) => (writes.push(script), Promise.resolve()) },
    interfaces: () => [here],
    cluster: { pods: () => [srv, cli, other], namespaces: () => new Map([["a", {}]]) },
    synced: () => true,
    netnsExists: () => Promise.resolve(true),
    logger: getLogger(["ferry", "test"]),
    refused: (p, message) => refused.push(`${p.kind} ${p.namespace}/${p.name}: ${message}`),
  });
  const bad = mnp("bad", "blue", {
    podSelector: {},
    ingress: [{ from: [{ ipBlock: { cidr: "not-a-cidr" } }] }],
  });
  bad.metadata!.resourceVersion = "7";
  e.policyUpserted(bad);
  e.policyUpserted(bad);
  e.policyUpserted(fromClients);
  // Invalid too, but for a network no interface of this node is on: this node says nothing.
  e.policyUpserted(
    mnp("elsewhere", "red", { podSelector: {}, ingress: [{ ports: [{ port: 0 }] }] }),
  );
  await e.plugged({ namespace: "a", name: "srv" });
  assertEquals(refused.length, 1, `one Event per version, by a node it concerns: ${refused}`);
  assert(refused[0].startsWith("MultiNetworkPolicy a/bad: "), refused[0]);
  assert(refused[0].includes('"not-a-cidr" is not a CIDR'), refused[0]);
  const script = writes.at(-1)!;
  assert(!script.includes("a/bad ingress"), `no rule of the invalid policy:\n${script}`);
  assert(script.includes("a/from-clients ingress[0]"), `the valid policy's rule:\n${script}`);
  assertEquals(e.stats().invalidPolicies, 2);
  // Fixed: enforced as written, counted no more.
  e.policyUpserted(
    mnp("bad", "blue", {
      podSelector: {},
      ingress: [{ from: [{ ipBlock: { cidr: "192.168.1.0/24" } }] }],
    }),
  );
  await e.idle();
  assert(writes.at(-1)!.includes("a/bad ingress[0]"), writes.at(-1));
  assertEquals(e.stats().invalidPolicies, 1);
  await e.close();
});

Deno.test("a MultiNetworkPolicy pass that throws ends nothing: it is logged, counted and tried again", async () => {
  let throws = 1;
  const writes: string[] = [];
  const e = new MultiPolicyEnforcer({
    table: "fp",
    nft: { applyIn: (_netns, script) => (writes.push(script), Promise.resolve()) },
    interfaces: () => [here],
    cluster: {
      pods: () => {
        if (throws-- > 0) throw new Error("the view broke");
        return [srv, cli];
      },
      namespaces: () => new Map([["a", {}]]),
    },
    synced: () => true,
    netnsExists: () => Promise.resolve(true),
    logger: getLogger(["ferry", "test"]),
  });
  e.policyUpserted(fromClients);
  const err = await assertRejects(() => e.plugged({ namespace: "a", name: "srv" }), CniError);
  assertEquals(
    err.code,
    CNI_ERROR.IO_FAILURE,
    "the ADD meanwhile fails: its rules are not in place",
  );
  assertEquals(e.stats().failedPasses, 1);
  for (const started = Date.now(); !writes.length;) {
    assert(Date.now() - started < 20_000, "the pass was not tried again within 20 s");
    await new Promise((r) => setTimeout(r, 50));
  }
  assert(writes[0].includes('iifname "net1" jump in-0'), writes[0]);
  await e.plugged({ namespace: "a", name: "srv" });
  await e.close();
});

Deno.test("an ADD behind a write that never ends answers code 11 within its budget, not never", async () => {
  const e = new MultiPolicyEnforcer({
    table: "fp",
    nft: { applyIn: () => new Promise<void>(() => {}) }, // another pod's write hangs
    interfaces: () => [here],
    cluster: { pods: () => [srv, cli, other], namespaces: () => new Map([["a", {}]]) },
    synced: () => true,
    netnsExists: () => Promise.resolve(true),
    logger: getLogger(["ferry", "test"]),
    addWaitMs: 200,
  });
  e.policyUpserted(fromClients);
  const err = await assertRejects(() => e.plugged({ namespace: "a", name: "srv" }), CniError);
  assertEquals(err.code, 11, err.message);
  assertEquals(e.stats().addsTimedOut, 1);
});

Deno.test("an ADD amid constant policy churn answers once the pass after it is written, not when the loop goes idle", async () => {
  const writes: { netns: string; script: string }[] = [];
  const e = new MultiPolicyEnforcer({
    table: "fp",
    // Each write takes a little while: the churn's kicks land during it, so passes follow each
    // other without the loop ever going idle.
    nft: {
      applyIn: (netns, script) =>
        new Promise<void>((r) => setTimeout(() => (writes.push({ netns, script }), r()), 2)),
    },
    interfaces: () => [here],
    cluster: { pods: () => [srv, cli, other], namespaces: () => new Map([["a", {}]]) },
    synced: () => true,
    netnsExists: () => Promise.resolve(true),
    logger: getLogger(["ferry", "test"]),
  });
  e.policyUpserted(fromClients);
  const CAP = 2000;
  let churning = true, rounds = 0;
  // Another tenant's changes keep starting passes: the loop is never idle while this runs.
  const churn = (async () => {
    for (; churning && rounds < CAP; rounds++) {
      e.policyUpserted(
        mnp(`churn${rounds % 3}`, "a/blue", {
          podSelector: { matchLabels: { app: "srv" } },
          ingress: [{ ports: [{ port: 1000 + rounds }] }], // the table changes every round
        }),
      );
      await new Promise((r) => setTimeout(r, 0));
    }
  })();
  try {
    await e.plugged({ namespace: "a", name: "srv" });
    assert(rounds < CAP, `the ADD answered only once the churn stopped (${rounds} rounds)`);
    assert(writes.some((w) => w.netns === "/run/netns/srv"), "the pod's table was written");
  } finally {
    churning = false;
    await churn;
    await e.close();
  }
});
