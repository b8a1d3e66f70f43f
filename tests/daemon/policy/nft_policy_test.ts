// The policy table's text (daemon/policy/nft_policy.ts): what nft accepts, one map entry per pod
// address, allow rules that return and a default drop; no isolated pod, no table.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { compilePolicies, ipInBlock, type PolicyView } from "../../../daemon/policy/compile.ts";
import { policyScript, renderPolicyTable, ruleCounts } from "../../../daemon/policy/nft_policy.ts";
import { IS_ROOT } from "../../../daemon/dev/netns.ts";

const hasNft = await Deno.stat("/usr/sbin/nft").then(() => true, () => false);

const view: PolicyView = {
  namespaces: new Map([["a", {}]]),
  pods: [
    {
      namespace: "a",
      name: "db",
      labels: { app: "db" },
      ips: ["10.1.0.5", "fd00::5"],
      hostNetwork: false,
      done: false,
      ports: [{ name: "pg", port: 5432, protocol: "TCP" }],
    },
    {
      namespace: "a",
      name: "web",
      labels: { app: "web" },
      ips: ["10.1.0.6"],
      hostNetwork: false,
      done: false,
      ports: [],
    },
  ],
  policies: [
    {
      metadata: { namespace: "a", name: "db-in" },
      spec: {
        podSelector: { matchLabels: { app: "db" } },
        ingress: [{
          from: [{ podSelector: {} }, { ipBlock: { cidr: "10.9.0.7/8", except: ["10.1.0.0/16"] } }],
          ports: [{ port: "pg" }, { protocol: "UDP", port: 53, endPort: 60 }, { protocol: "SCTP" }],
        }],
        egress: [{ to: [{ podSelector: {} }], ports: [{ port: "pg" }] }],
      },
    },
  ],
};

Deno.test("the table maps each isolated pod's addresses to its chains, rules return, the rest is dropped", () => {
  const text = renderPolicyTable("fp", compilePolicies(view, view.pods, ipInBlock))!;
  assert(text.includes("10.1.0.5 : jump in-0"), text);
  assert(text.includes("fd00::5 : jump in-0"), text);
  assert(text.includes("ip saddr 10.0.0.0/8 ip saddr != { 10.1.0.0/16 }"), "CIDR normalised");
  assert(text.includes("meta l4proto udp th dport { 53-60 }"), text);
  assert(text.includes("meta l4proto sctp counter return"), text);
  assert(text.includes("ip daddr . meta l4proto . th dport { 10.1.0.5 . tcp . 5432 }"), text);
  assert(text.includes('counter drop comment "a/db: no ingress rule allows it"'), text);
  assert(!text.includes("10.1.0.6 :"), "web is not isolated");
  assertEquals(renderPolicyTable("fp", []), undefined);
  assertEquals(policyScript("fp", undefined), "table inet fp\ndelete table inet fp\n");
});

Deno.test({
  name: "nft accepts the table as written",
  ignore: !IS_ROOT || !hasNft,
  fn: async () => {
    const script = policyScript(
      "fp",
      renderPolicyTable("fp", compilePolicies(view, view.pods, ipInBlock)),
    );
    const child = new Deno.Command("nft", {
      args: ["-c", "-f", "-"],
      stdin: "piped",
      stderr: "piped",
    }).spawn();
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(script));
    await w.close();
    const out = await child.output();
    assertEquals(out.code, 0, new TextDecoder().decode(out.stderr) + script);
  },
});

Deno.test("the counters of the table's commented rules are read from nft's JSON", () => {
  const json = JSON.stringify({
    nftables: [
      { metainfo: { version: "1.0.6" } },
      { chain: { name: "in-0" } },
      {
        rule: {
          chain: "in-0",
          comment: "a/db-in ingress[0]",
          expr: [{ match: {} }, { counter: { packets: 7, bytes: 420 } }, { return: null }],
        },
      },
      {
        rule: {
          chain: "in-0",
          comment: "a/db: no ingress rule allows it",
          expr: [{ counter: { packets: 3, bytes: 180 } }, { drop: null }],
        },
      },
      { rule: { chain: "forward", expr: [{ match: {} }, { accept: null }] } },
    ],
  });
  assertEquals(ruleCounts(json), [
    { comment: "a/db-in ingress[0]", packets: 7 },
    { comment: "a/db: no ingress rule allows it", packets: 3 },
  ]);
});
