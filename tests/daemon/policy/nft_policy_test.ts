// The policy table's text (daemon/policy/nft_policy.ts): what nft accepts, one map entry per pod
// address, allow rules that return and a default drop; no isolated pod, no table.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import { compilePolicies, ipInBlock, type PolicyView } from "../../../daemon/policy/compile.ts";
import {
  policyScript,
  policyUpdateScript,
  renderPolicyParts,
  renderPolicyTable,
  ruleCounts,
} from "../../../daemon/policy/nft_policy.ts";
import { assertNftAccepts, HAS_NFT } from "./_nft.ts";
import { IS_ROOT, run, withNetns } from "../../../daemon/dev/netns.ts";
import { NftRunner } from "../../../daemon/cluster/masquerade.ts";

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
  ignore: !IS_ROOT || !HAS_NFT,
  fn: async () => {
    const script = policyScript(
      "fp",
      renderPolicyTable("fp", compilePolicies(view, view.pods, ipInBlock)),
    );
    await assertNftAccepts(script);
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

/** The view with a second app=web pod (10.1.0.7): a pod joining the peer of db's rules. */
const joined: PolicyView = {
  ...view,
  pods: [...view.pods, { ...view.pods[1], name: "web2", ips: ["10.1.0.7"] }],
};

Deno.test("rules with the same peer share one named set, declared once, whatever the pods selected", () => {
  const two: PolicyView = {
    ...view,
    pods: [...view.pods, { ...view.pods[0], name: "db2", ips: ["10.1.0.9"] }],
  };
  const parts = renderPolicyParts("fp", compilePolicies(two, two.pods, ipInBlock))!;
  const declared = [...parts.definition.matchAll(/^ {2}set (p[0-9a-f]+x*) /gm)].map((m) => m[1]);
  assertEquals(new Set(declared).size, declared.length, "each set declared once");
  // One peer (podSelector {} in namespace a) of each family, ingress and egress alike.
  assertEquals(declared.length, 2, parts.definition);
  const v4 = [...parts.sets.values()].find((e) => e.includes("10.1.0.6"))!;
  assertEquals(v4, ["10.1.0.5", "10.1.0.6", "10.1.0.9"]);
  assert(!parts.skeleton.includes("10.1.0.6"), "the skeleton has no set members");
});

Deno.test("a pod joining a selector changes set elements only; a new isolated pod replaces the table", () => {
  const before = renderPolicyParts("fp", compilePolicies(view, view.pods.slice(0, 1), ipInBlock))!;
  const after = renderPolicyParts(
    "fp",
    compilePolicies(joined, joined.pods.slice(0, 1), ipInBlock),
  )!;
  const script = policyUpdateScript("fp", before, after)!;
  assertEquals(script.trim().split("\n").length, 1, script);
  assert(/^add element inet fp p[0-9a-f]+x* \{ 10\.1\.0\.7 \}$/.test(script.trim()), script);
  assertEquals(policyUpdateScript("fp", after, after), "");
  // A second isolated pod needs a chain and map entries: no update, a replacement.
  const db2 = { ...view.pods[0], name: "db2", ips: ["10.1.0.9"] };
  const grown: PolicyView = { ...joined, pods: [...joined.pods, db2] };
  const more = renderPolicyParts("fp", compilePolicies(grown, [grown.pods[0], db2], ipInBlock))!;
  assertEquals(policyUpdateScript("fp", after, more), undefined);
});

Deno.test({
  name: "nft applies a set-element update to the table it wrote",
  ignore: !IS_ROOT || !HAS_NFT,
  fn: () =>
    withNetns(1, async ([ns]) => {
      const nft = new NftRunner();
      const before = renderPolicyParts(
        "fp",
        compilePolicies(view, view.pods.slice(0, 1), ipInBlock),
      )!;
      await nft.applyIn(ns.path, policyScript("fp", before.definition));
      const after = renderPolicyParts(
        "fp",
        compilePolicies(joined, joined.pods.slice(0, 1), ipInBlock),
      )!;
      await nft.applyIn(ns.path, policyUpdateScript("fp", before, after)!);
      const listed = await run(
        "ip",
        "netns",
        "exec",
        ns.name,
        "nft",
        "list",
        "table",
        "inet",
        "fp",
      );
      assert(listed.includes("10.1.0.7"), listed);
      const gone = renderPolicyParts(
        "fp",
        compilePolicies(view, view.pods.slice(0, 1), ipInBlock),
      )!;
      await nft.applyIn(ns.path, policyUpdateScript("fp", after, gone)!);
      assert(
        !(await run("ip", "netns", "exec", ns.name, "nft", "list", "table", "inet", "fp"))
          .includes("10.1.0.7"),
      );
    }),
});
