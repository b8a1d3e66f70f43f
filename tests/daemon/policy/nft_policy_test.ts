// The policy table's text (daemon/policy/nft_policy.ts, and the nft_*.ts and rule_counts.ts
// beside it): what nft accepts, one map entry per pod address, allowing rules that return (shared
// by the pods the same rules isolate) and each pod's own counted drop; no isolated pod, no table;
// updates in place that leave the table as a whole write would; an ADD's own operations, written
// in-process, the same as nft writes them.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { compilePolicies, ipInBlock, type PolicyView } from "../../../daemon/policy/compile.ts";
import { policyScript, policyUpdateScript } from "../../../daemon/policy/nft_scripts.ts";
import { opsScript, podAddition, withPodPart } from "../../../daemon/policy/nft_pod_addition.ts";
import { ruleCounts } from "../../../daemon/policy/rule_counts.ts";
import {
  type RenderedTable,
  renderPodParts,
  renderPolicyParts,
  renderPolicyTable,
  tableDefinition,
} from "../../../daemon/policy/nft_policy.ts";
import { nftBatch, NftNetlink } from "../../../daemon/policy/nft_netlink.ts";
import { Libc } from "../../../daemon/net/netlink/libc.ts";
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
  // The base chain's map leads db's addresses to its allowing rules; what they do not allow goes
  // on, by a second map, to db's own chain and its drop.
  const allow = text.match(/map in4 \{[^}]*10\.1\.0\.5 : jump (a[0-9a-f]+)/)?.[1];
  const own = text.match(/map ind4 \{[^}]*10\.1\.0\.5 : jump (in-[0-9a-f]+)/)?.[1];
  assert(allow && own, text);
  assert(text.includes(`fd00::5 : jump ${own}`), text);
  assert(
    new RegExp(`chain ${allow} \\{\\n(    .* return .*\\n)+    ip daddr vmap @ind4\\n`).test(text),
    text,
  );
  assert(
    new RegExp(`chain ${own} \\{\\n    counter drop comment "a/db: no ingress rule allows it"`)
      .test(text),
    text,
  );
  // The ipBlock less its except, normalised: one interval set of what it allows, one match.
  const block = text.match(
    /set (r[0-9a-f]+) \{ type ipv4_addr; flags interval; elements = \{ 10\.0\.0\.0\/16, 10\.2\.0\.0-10\.255\.255\.255 \}; \}/,
  )?.[1];
  assert(block && text.includes(`ip saddr @${block} meta l4proto udp`), text);
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
  const parts = renderPolicyParts(compilePolicies(two, two.pods, ipInBlock))!;
  const definition = tableDefinition("fp", parts);
  const declared = [...definition.matchAll(/^ {2}set (p[0-9a-f]+x*) /gm)].map((m) => m[1]);
  assertEquals(new Set(declared).size, declared.length, "each set declared once");
  // One peer (podSelector {} in namespace a) of each family, ingress and egress alike.
  assertEquals(declared.length, 2, definition);
  const v4 = [...parts.sets.values()].find((c) => c.elements.includes("10.1.0.6"))!;
  assertEquals(v4.elements, ["10.1.0.5", "10.1.0.6", "10.1.0.9"]);
  // db and db2 are isolated by the same rules: one allowing chain per direction, two pods'
  // own chains each.
  const names = [...parts.chains.keys()];
  assertEquals(names.filter((n) => n.startsWith("a")).length, 2, names.join(" "));
  assertEquals(names.filter((n) => /^(in|eg)-/.test(n)).length, 4, names.join(" "));
});

Deno.test("a pod joining a selector changes set elements only; a new pod the same rules isolate adds its own chains and entries", () => {
  const before = renderPolicyParts(compilePolicies(plain, plain.pods.slice(0, 1), ipInBlock))!;
  const grownWeb: PolicyView = { ...plain, pods: joined.pods };
  const after = renderPolicyParts(compilePolicies(grownWeb, grownWeb.pods.slice(0, 1), ipInBlock))!;
  const script = policyUpdateScript("fp", before, after);
  assertEquals(script.trim().split("\n").length, 1, script);
  assert(/^add element inet fp p[0-9a-f]+x* \{ 10\.1\.0\.7 \}$/.test(script.trim()), script);
  assertEquals(policyUpdateScript("fp", after, after), "");
  // A second isolated pod: its own chains, their rules and its map entries; no allowing chain
  // (it shares db's), no table replaced.
  const db2 = { ...view.pods[0], name: "db2", ips: ["10.1.0.9"] };
  const grown: PolicyView = { ...plain, pods: [...joined.pods, db2] };
  const more = renderPolicyParts(compilePolicies(grown, [grown.pods[0], db2], ipInBlock))!;
  const lines = policyUpdateScript("fp", after, more).trim().split("\n");
  assertEquals(lines.filter((l) => l.startsWith("add chain")).length, 2, lines.join("\n"));
  assert(lines.every((l) => !/^add chain inet fp a/.test(l)), "no allowing chain added");
  assert(lines.some((l) => /^add element inet fp ind4 \{ 10\.1\.0\.9 : jump in-/.test(l)));
  assert(!lines.some((l) => /delete|flush/.test(l)), lines.join("\n"));
});

/** The table as `nft list` shows it in namespace `ns`. */
function listed(ns: string): Promise<string> {
  return run("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "fp");
}

/**
 * The table's content in namespace `ns`, whatever the order the kernel keeps its chains, sets and
 * elements in (they are listed as created): each chain's rules in their order, each set's and
 * map's elements sorted, no handles.
 */
async function content(ns: string): Promise<string> {
  const json = await run("ip", "netns", "exec", ns, "nft", "-j", "list", "table", "inet", "fp");
  const items = (JSON.parse(json) as { nftables: Record<string, Record<string, unknown>>[] })
    .nftables;
  const chains: Record<string, unknown[]> = {};
  const sets: Record<string, unknown> = {};
  for (const item of items) {
    const [kind, body] = Object.entries(item)[0];
    if (kind === "chain") chains[body.name as string] ??= [];
    if (kind === "rule") {
      const { handle: _, ...rule } = body;
      (chains[body.chain as string] ??= []).push(rule);
    }
    if (kind === "set" || kind === "map") {
      const { handle: _, elem, ...set } = body;
      sets[body.name as string] = {
        ...set,
        elem: ((elem ?? []) as unknown[]).map((e) => JSON.stringify(e)).sort(),
      };
    }
  }
  const sorted = (o: Record<string, unknown>) => Object.keys(o).sort().map((k) => [k, o[k]]);
  return JSON.stringify({ chains: sorted(chains), sets: sorted(sets) }, null, 1);
}

/** The example's db-in policy with its ipBlock's excepts replaced (both families). */
function blockPolicy(except: string[]): PolicyView["policies"][number] {
  return {
    metadata: { namespace: "a", name: "db-in" },
    spec: {
      podSelector: { matchLabels: { app: "db" } },
      ingress: [{
        from: [
          { ipBlock: { cidr: "10.0.0.0/8", except } },
          { ipBlock: { cidr: "fd00::/64", except: ["fd00::/120", "fd00::1:0/112"] } },
        ],
        ports: [{ port: 5432 }],
      }],
    },
  };
}

/** A policy of namespace a: db isolated both ways, allowing `ports` in. */
function dbPolicy(name: string, ports: number[]): PolicyView["policies"][number] {
  return {
    metadata: { namespace: "a", name },
    spec: {
      podSelector: { matchLabels: { app: "db" } },
      policyTypes: ["Ingress", "Egress"],
      ingress: [{
        from: [{ podSelector: { matchLabels: { app: "web" } } }],
        ports: ports.map((port) => ({ port })),
      }],
    },
  };
}

Deno.test({
  name: "every in-place update leaves the table exactly as writing it whole does",
  ignore: !IS_ROOT || !HAS_NFT,
  fn: () =>
    withNetns(2, async ([inPlace, whole]) => {
      const nft = new NftRunner();
      const db2 = { ...view.pods[0], name: "db2", ips: ["10.1.0.9", "fd00::9"] };
      const web2 = { ...view.pods[1], name: "web2", ips: ["10.1.0.7"] };
      const pods = [...view.pods, db2, web2];
      const steps: { what: string; view: PolicyView; local: string[] }[] = [
        { what: "db isolated", view, local: ["db"] },
        { what: "a web pod joins the peer", view: { ...view, pods }, local: ["db"] },
        { what: "a second db pod", view: { ...view, pods }, local: ["db", "db2"] },
        {
          what: "a second policy: new allowing rules for both",
          view: { ...view, pods, policies: [...view.policies, dbPolicy("more", [7000])] },
          local: ["db", "db2"],
        },
        {
          what: "the ipBlock's excepts changed: a new interval set, the old one gone",
          view: {
            ...view,
            pods,
            policies: [blockPolicy(["10.1.0.0/16", "10.3.0.0/24"]), dbPolicy("more", [7000])],
          },
          local: ["db", "db2"],
        },
        {
          what: "the first policy gone, the second changed",
          view: { ...view, pods, policies: [dbPolicy("more", [7001, 7002])] },
          local: ["db", "db2"],
        },
        {
          what: "db gone",
          view: { ...view, pods, policies: [dbPolicy("more", [7001])] },
          local: ["db2"],
        },
      ];
      let before: RenderedTable | undefined;
      for (const step of steps) {
        const local = step.view.pods.filter((p) => step.local.includes(p.name));
        const after = renderPolicyParts(compilePolicies(step.view, local, ipInBlock))!;
        await nft.applyIn(
          inPlace.path,
          before
            ? policyUpdateScript("fp", before, after)
            : policyScript("fp", tableDefinition("fp", after)),
        );
        await nft.applyIn(whole.path, policyScript("fp", tableDefinition("fp", after)));
        assertEquals(await content(inPlace.name), await content(whole.name), step.what);
        before = after;
      }
    }),
});

/**
 * The example's cluster with a policy that names no egress port (an ADD writes its pod itself
 * only then: a named egress port resolves on every peer).
 */
const plain: PolicyView = { ...view, policies: [dbPolicy("db-in", [5432])] };

/** The verdict of pod `name` of `v` computed as an ADD does: no pod of the view read. */
function addVerdict(v: PolicyView, name: string) {
  const pod = v.pods.find((p) => p.name === name)!;
  return compilePolicies({ ...v, pods: [] }, [pod], ipInBlock)[0];
}

Deno.test("an ADD's own operations are the pod's chains and entries of the whole table, named the same", () => {
  const db2 = { ...view.pods[0], name: "db2", ips: ["10.1.0.9", "fd00::9"] };
  const grown: PolicyView = { ...plain, pods: [...plain.pods, db2] };
  const written = renderPolicyParts(compilePolicies(plain, plain.pods.slice(0, 1), ipInBlock))!;
  const addition = podAddition(written, renderPodParts(addVerdict(grown, "db2")))!;
  assert(addition, "the table holds db2's allowing chains");
  const script = opsScript("fp", addition.ops);
  assert(script.includes("add element inet fp in4 { 10.1.0.9 : jump a"), script);
  assert(script.includes("add element inet fp ind4 { 10.1.0.9 : jump in-"), script);
  assert(script.includes("add element inet fp ind6 { fd00::9 : jump in-"), script);
  // The next pass finds nothing left to do (db2 is nobody's peer here): the ADD wrote what the
  // whole table holds of it, named the same.
  const whole = renderPolicyParts(compilePolicies(grown, [grown.pods[0], db2], ipInBlock))!;
  assertEquals(policyUpdateScript("fp", addition.table, whole), "");
  // Written already: nothing to do; an address still mapped to another pod, or rules the table
  // lacks: the pass must write it.
  assertEquals(podAddition(addition.table, renderPodParts(addVerdict(grown, "db2")))!.ops, []);
  const reused = { ...grown, pods: [...grown.pods, { ...db2, name: "db3" }] };
  assertEquals(podAddition(addition.table, renderPodParts(addVerdict(reused, "db3"))), undefined);
  const other = { ...grown, policies: [dbPolicy("more", [7000])] };
  assertEquals(podAddition(addition.table, renderPodParts(addVerdict(other, "db2"))), undefined);
});

Deno.test("a batch is framed by its begin and end, one message per operation, each acknowledged", () => {
  const { bytes, seqs } = nftBatch("fp", [
    { chain: "in-1" },
    { chain: "in-1", rule: { drop: "a/b: no ingress rule allows it" } },
    { entry: { map: "in4", ip: "10.1.0.9", chain: "in-1" } },
  ], 40);
  assertEquals(seqs, [41, 42, 43]);
  const view = new DataView(bytes.buffer);
  const types: number[] = [];
  const acked: boolean[] = [];
  for (let at = 0; at < bytes.length;) {
    types.push(view.getUint16(at + 4, true));
    acked.push((view.getUint16(at + 6, true) & 0x4) !== 0);
    at += (view.getUint32(at, true) + 3) & ~3;
  }
  // BATCH_BEGIN, NEWCHAIN, NEWRULE, NEWSETELEM (subsystem 10), BATCH_END.
  assertEquals(types, [0x10, 0x0a03, 0x0a06, 0x0a0c, 0x11]);
  assertEquals(acked, [false, true, true, true, false]);
});

Deno.test({
  name:
    "an ADD's operations written in-process leave the table as nft writes them; a bad batch changes nothing",
  ignore: !IS_ROOT || !HAS_NFT,
  fn: () =>
    withNetns(2, async ([viaNetlink, viaNft]) => {
      const nft = new NftRunner();
      const db2 = { ...view.pods[0], name: "db2", ips: ["10.1.0.9", "fd00::9"] };
      const grown: PolicyView = { ...view, pods: [...view.pods, db2] };
      const log = { group: 31742, perSecond: 10 };
      const written = renderPolicyParts(
        compilePolicies(view, view.pods.slice(0, 1), ipInBlock),
        log,
      )!;
      const addition = podAddition(written, renderPodParts(addVerdict(grown, "db2"), log))!;
      for (const ns of [viaNetlink, viaNft]) {
        await nft.applyIn(ns.path, policyScript("fp", tableDefinition("fp", written)));
      }
      const libc = Libc.open();
      const home = libc.openRead("/proc/thread-self/ns/net");
      const target = libc.openRead(viaNetlink.path);
      const writer = new NftNetlink({
        netfilterSocket: (ms) => libc.inNetns(target, home, () => libc.netfilterSocket(ms)),
        send: (fd, msg) => libc.send(fd, msg),
        recv: (fd, buf) => libc.recv(fd, buf),
        tryRecv: (fd, buf) => libc.tryRecv(fd, buf),
        close: (fd) => libc.close(fd),
      });
      try {
        await writer.write("fp", addition.ops);
        await nft.applyIn(viaNft.path, opsScript("fp", addition.ops));
        const text = await listed(viaNetlink.name);
        assertEquals(await content(viaNetlink.name), await content(viaNft.name));
        assert(
          text.includes(
            'counter packets 0 bytes 0 drop comment "a/db2: no ingress rule allows it"',
          ),
          text,
        );
        assert(text.includes('log prefix "in a/db2" group 31742'), text);
        // An entry jumping to a chain that does not exist fails the whole batch.
        await assertRejects(() =>
          writer.write("fp", [
            { chain: "in-extra" },
            { entry: { map: "in4", ip: "10.1.0.99", chain: "in-missing" } },
          ])
        );
        assertEquals(await listed(viaNetlink.name), text, "nothing of the failed batch applied");
      } finally {
        writer.close();
        libc.close(target);
        libc.close(home);
      }
    }),
});

/** The policy shape: one rule of `blocks` ipBlocks of `excepts` excepts each, and `ports` ports. */
function widePolicy(name: string, blocks: number, excepts: number, ports: number) {
  return {
    metadata: { namespace: "a", name },
    spec: {
      podSelector: { matchLabels: { app: "db" } },
      ingress: [{
        from: Array.from({ length: blocks }, (_, b) => ({
          ipBlock: {
            cidr: `10.${b}.0.0/16`,
            except: Array.from({ length: excepts }, (_, e) => `10.${b}.${e}.0/24`),
          },
        })),
        ports: Array.from({ length: ports }, (_, p) => ({ port: 1000 + p })),
      }],
    },
  };
}

Deno.test("a rule of many ipBlocks with many excepts and many ports is one nft rule and one interval set per family", () => {
  const v: PolicyView = { ...view, policies: [widePolicy("wide", 40, 100, 40)] };
  const parts = renderPolicyParts(compilePolicies(v, [view.pods[0]], ipInBlock))!;
  const returns = [...parts.chains.values()].flat().filter((l) => l.includes(" return "));
  assertEquals(returns.length, 1, `one allowing rule, not one per block: ${returns.length}`);
  const intervals = [...parts.sets.values()].filter((c) => c.flags === "interval");
  assertEquals(intervals.length, 1, "one interval set of IPv4 ranges (the blocks have no IPv6)");
  // Each block less its 100 /24s at its start is one range: 40 blocks, 40 ranges.
  assertEquals(intervals[0].elements.length, 40);
});

Deno.test({
  name:
    "the rules' counters read through netlink are those nft lists: commented counted rules only, none without a table",
  ignore: !IS_ROOT || !HAS_NFT,
  fn: () =>
    withNetns(1, async ([ns]) => {
      await run("ip", "-n", ns.name, "link", "set", "lo", "up");
      await new NftRunner().applyIn(
        ns.path,
        [
          "table inet fp {",
          "  chain input {",
          "    type filter hook input priority filter; policy accept;",
          '    icmp type echo-request counter comment "a/p ingress[0]"',
          '    tcp dport 9 counter comment "a/q: no ingress rule allows it"',
          "    udp dport 9 counter",
          '    meta l4proto udp comment "no counter"',
          "  }",
          // More rules than one read of the dump holds (it comes in many).
          "  chain many {",
          ...Array.from(
            { length: 1500 },
            (_, i) => `    tcp dport ${10000 + i} counter comment "a/many ingress[${i}]"`,
          ),
          "  }",
          "}",
        ].join("\n") + "\n",
      );
      // Three pings over the namespace's own loopback.
      await run("ip", "netns", "exec", ns.name, "ping", "-c", "3", "-i", "0.2", "127.0.0.1");
      const libc = Libc.open();
      const home = libc.openRead("/proc/thread-self/ns/net");
      const target = libc.openRead(ns.path);
      const reader = new NftNetlink({
        netfilterSocket: (ms) => libc.inNetns(target, home, () => libc.netfilterSocket(ms)),
        send: (fd, msg) => libc.send(fd, msg),
        recv: (fd, buf) => libc.recv(fd, buf),
        tryRecv: (fd, buf) => libc.tryRecv(fd, buf),
        close: (fd) => libc.close(fd),
      });
      try {
        const counts = reader.ruleCounts("fp");
        const json = await run(
          "ip",
          "netns",
          "exec",
          ns.name,
          "nft",
          "-j",
          "list",
          "table",
          "inet",
          "fp",
        );
        assertEquals(counts, ruleCounts(json));
        assertEquals(counts.length, 2 + 1500);
        assertEquals(counts.slice(0, 2).map((c) => c.comment), [
          "a/p ingress[0]",
          "a/q: no ingress rule allows it",
        ]);
        assert(counts[0].packets >= 3, `pings counted: ${JSON.stringify(counts)}`);
        assertEquals(reader.ruleCounts("no-such-table"), []);
      } finally {
        reader.close();
        libc.close(target);
        libc.close(home);
      }
    }),
});

/** A policy of namespace a isolating app=web, allowing app=db in on `port`. */
function webPolicy(port: number): PolicyView["policies"][number] {
  return {
    metadata: { namespace: "a", name: "web-in" },
    spec: {
      podSelector: { matchLabels: { app: "web" } },
      ingress: [{ from: [{ podSelector: { matchLabels: { app: "db" } } }], ports: [{ port }] }],
    },
  };
}

Deno.test({
  name:
    "a pod's whole part added to the table as written: nft takes the update in place, it leaves what a whole write of both leaves, and the pass after has nothing left",
  ignore: !IS_ROOT || !HAS_NFT,
  fn: () =>
    withNetns(2, async ([inPlace, whole]) => {
      const nft = new NftRunner();
      const both: PolicyView = { ...plain, policies: [...plain.policies, webPolicy(8080)] };
      const [db, web] = both.pods;
      const written = renderPolicyParts(compilePolicies(plain, [db], ipInBlock))!;
      await nft.applyIn(inPlace.path, policyScript("fp", tableDefinition("fp", written)));
      // web alone, under the policies that select it: new allowing rules and a new peer set.
      const own = renderPolicyParts(compilePolicies({ ...both, policies: [webPolicy(8080)] }, [
        web,
      ], ipInBlock))!;
      const merged = withPodPart(written, own)!;
      assert(merged, "the parts agree");
      const update = policyUpdateScript("fp", written, merged);
      assert(!update.includes("delete"), update);
      await nft.applyIn(inPlace.path, update);
      await nft.applyIn(whole.path, policyScript("fp", tableDefinition("fp", merged)));
      assertEquals(await content(inPlace.name), await content(whole.name));
      const pass = renderPolicyParts(compilePolicies(both, [db, web], ipInBlock))!;
      assertEquals(policyUpdateScript("fp", merged, pass), "", "the pass after has work left");
    }),
});

Deno.test("a pod's part that disagrees with the table as written is left to the pass: a peer set with other members, an address mapped to another chain", () => {
  const both: PolicyView = { ...plain, policies: [...plain.policies, webPolicy(8080)] };
  const [db, web] = both.pods;
  assertEquals(
    withPodPart(undefined, renderPolicyParts(compilePolicies(both, [web], ipInBlock))!)
      ?.chains.size,
    2,
    "no table yet: the pod's part is the table",
  );
  const written = renderPolicyParts(compilePolicies(both, [db, web], ipInBlock))!;
  // db's peer set (app=web) as written holds web's address; a compile that sees another web pod
  // too disagrees: which members are right is the pass's to say.
  const web2 = { ...web, name: "web2", ips: ["10.1.0.8"] };
  const db2 = { ...db, name: "db2", ips: ["10.1.0.9"] };
  const grown: PolicyView = { ...both, pods: [...both.pods, web2, db2] };
  const own = renderPolicyParts(compilePolicies(grown, [db2], ipInBlock))!;
  assertEquals(withPodPart(written, own), undefined, "a peer set with other members");
  // An address written for db, now another pod's.
  const reused = { ...db2, ips: db.ips };
  const again = renderPolicyParts(
    compilePolicies({ ...both, policies: [dbPolicy("other", [7000])] }, [reused], ipInBlock),
  )!;
  assertEquals(withPodPart(written, again), undefined, "an address mapped to another chain");
  // Agreeing: the written table's parts are all kept.
  const same = withPodPart(written, renderPolicyParts(compilePolicies(both, [web], ipInBlock))!)!;
  assertEquals([...same.chains.keys()].sort(), [...written.chains.keys()].sort());
});
