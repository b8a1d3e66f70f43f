// How an ADD's pod gets its NetworkPolicy rules (daemon/policy/policy_enforcer.ts): the first pod
// of a combination of rules writes its whole part (allowing chains, peer sets, its own chain and
// entries) in one update of its own, whatever else is pending; a later one the same rules isolate
// is written by its ADD alone (its chains and map entries, through the in-process writer); the
// pass after finds nothing of either left to write; a failed write of its own falls back to the
// pass; an ADD's write never runs while a pass writes.
import { assert, assertEquals, assertRejects } from "deno-std/assert/mod.js";
import { CNI_ERROR, CniError } from "../../../lib/cni/errors.ts";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import { PolicyEnforcer } from "../../../daemon/policy/policy_enforcer.ts";
import type { NftOp } from "../../../daemon/policy/nft_pod_addition.ts";
import { getLogger } from "@logtape/logtape";

const policy = (name: string, app: string): NetworkPolicy => ({
  metadata: { namespace: "a", name },
  spec: {
    podSelector: { matchLabels: { app } },
    ingress: [{
      from: [{ podSelector: { matchLabels: { role: "client" } } }],
      ports: [{ port: 80 }],
    }],
  },
});

const pod = (name: string, ip: string, labels: Record<string, string>): Pod => ({
  metadata: { name, namespace: "a", labels },
  spec: { nodeName: "n1", containers: [] },
  status: { phase: "Running", podIPs: [{ ip }] },
});

/** An enforcer whose nft and writer record what they are given; `gate` holds nft's writes. */
function harness(opts: { writerFails?: boolean; addWaitMs?: number; applyMs?: number } = {}) {
  const scripts: string[] = [];
  const batches: NftOp[][] = [];
  let gate: Promise<void> | undefined;
  const e = new PolicyEnforcer({
    nodeName: "n1",
    table: "fp",
    nft: {
      apply: async (script) => {
        await gate;
        if (opts.applyMs) await new Promise((r) => setTimeout(r, opts.applyMs));
        scripts.push(script);
      },
      remove: () => Promise.resolve(),
    },
    addWaitMs: opts.addWaitMs,
    writer: {
      write: (_table, ops) => {
        if (opts.writerFails) return Promise.reject(new Error("EPERM"));
        batches.push(ops);
        return Promise.resolve();
      },
    },
    synced: () => true,
    logger: getLogger(["ferry", "test"]),
  });
  e.namespaceUpserted({ metadata: { name: "a" } });
  e.policyUpserted(policy("web-in", "web"));
  e.podUpserted(pod("client", "10.1.0.2", { role: "client" }));
  return {
    e,
    scripts,
    batches,
    hold(): () => void {
      let release!: () => void;
      gate = new Promise((r) => (release = r));
      return release;
    },
  };
}

Deno.test("the first pod of its rules writes the table with its part itself; the next one is written by its ADD alone, and the pass after has nothing of it left", async () => {
  const { e, scripts, batches } = harness();
  e.start();
  await e.idle();
  const started = scripts.length;
  await e.plugged({ namespace: "a", name: "web1", labels: { app: "web" } }, ["10.1.0.5"]);
  assertEquals(scripts.length, started + 1, "the table written before the first ADD answered");
  assert(scripts.at(-1)!.includes("10.1.0.5 : jump in-"), scripts.at(-1));
  assertEquals(batches, []);
  assertEquals(e.stats().ownWrites, 1);
  await e.idle();
  const written = scripts.length;
  assertEquals(written, started + 1, "the pass after found web1 written already");
  await e.plugged({ namespace: "a", name: "web2", labels: { app: "web" } }, ["10.1.0.6"]);
  assertEquals(scripts.length, written, "no nft process before the second ADD answered");
  assertEquals(batches.length, 1);
  const [ops] = batches;
  const chain = ops.find((op) => "chain" in op && !("rule" in op)) as { chain: string };
  assert(chain, JSON.stringify(ops));
  assert(
    ops.some((op) => "rule" in op && "drop" in op.rule && op.rule.drop.startsWith("a/web2: ")),
    "its own counted drop",
  );
  // Its address leads to the allowing rules web1 has already, and from their end to its own chain.
  const entries = ops.flatMap((op) => "entry" in op ? [op.entry] : []);
  assertEquals(entries.length, 2, JSON.stringify(entries));
  assert(
    /^a[0-9a-f]+$/.test(entries.find((e) => e.map === "in4")?.chain ?? ""),
    JSON.stringify(entries),
  );
  assertEquals(entries.find((e) => e.map === "ind4"), {
    map: "ind4",
    ip: "10.1.0.6",
    chain: chain.chain,
  });
  assertEquals(e.stats().podWrites, 1);
  await e.idle();
  assertEquals(scripts.length, written, "the pass found web2 written already");
  await e.close();
});

Deno.test("a pod of new rules writes its part by an update of its own; one whose in-process write fails waits for the pass, and the table is then written whole", async () => {
  const { e, scripts, batches } = harness({ writerFails: true });
  e.policyUpserted(policy("db-in", "db"));
  e.start();
  await e.idle();
  await e.plugged({ namespace: "a", name: "web1", labels: { app: "web" } }, ["10.1.0.5"]);
  await e.idle();
  // db's rules are not in the table: no in-process write is even tried; its update of its own.
  const before = scripts.length;
  const owned = e.stats().ownWrites;
  await e.plugged({ namespace: "a", name: "db1", labels: { app: "db" } }, ["10.1.0.7"]);
  assertEquals(scripts.length, before + 1);
  assertEquals(e.stats().ownWrites, owned + 1);
  assert(scripts.at(-1)!.includes("10.1.0.7 : jump in-"), scripts.at(-1));
  assert(!scripts.at(-1)!.includes("delete table"), "an update in place");
  await e.idle();
  // web2 shares web1's rules, but its own write fails: the pass writes it, replacing the table
  // (what the kernel holds after a failed batch is not taken for known).
  await e.plugged({ namespace: "a", name: "web2", labels: { app: "web" } }, ["10.1.0.6"]);
  assertEquals(batches, []);
  assertEquals(e.stats().podWrites, 0);
  assert(scripts.at(-1)!.includes("delete table inet fp"), scripts.at(-1));
  assert(scripts.at(-1)!.includes("10.1.0.6 : jump in-"), scripts.at(-1));
  await e.close();
});

Deno.test("the first pod of new rules writes only its own part: another change pending behind the pass under way is not written before the ADD answers", async () => {
  const { e, scripts, hold } = harness();
  e.policyUpserted(policy("db-in", "db"));
  e.start();
  await e.idle();
  await e.plugged({ namespace: "a", name: "web1", labels: { app: "web" } }, ["10.1.0.5"]);
  await e.idle();
  const release = hold();
  // A pass under way (another pod of the node isolated), held inside its nft write.
  e.podUpserted(pod("web8", "10.1.0.8", { app: "web" }));
  await new Promise((r) => setTimeout(r, 20));
  // Behind it: db1's ADD (rules the table lacks), then another change pending (web9 isolated).
  let answered = false;
  const add = e.plugged({ namespace: "a", name: "db1", labels: { app: "db" } }, ["10.1.0.7"])
    .then(() => (answered = true));
  e.podUpserted(pod("web9", "10.1.0.9", { app: "web" }));
  const held = scripts.length;
  release();
  await add;
  assert(answered);
  const mine = scripts.slice(held).find((s) => s.includes("10.1.0.7 : jump in-")) ?? "";
  assert(
    mine,
    `db1's rules written before its ADD answered:\n${scripts.slice(held).join("\n---\n")}`,
  );
  assert(!mine.includes("10.1.0.9"), `db1's update carries the pending change of web9:\n${mine}`);
  assert(!mine.includes("delete table"), `an update in place:\n${mine}`);
  assertEquals(e.stats().ownWrites, 2, "web1's and db1's own writes");
  await e.idle();
  assert(scripts.at(-1)!.includes("10.1.0.9 : jump in-"), "the pass after wrote web9");
  await e.close();
});

Deno.test("an ADD's own write waits while a pass writes the table", async () => {
  const { e, scripts, batches, hold } = harness();
  e.start();
  await e.idle();
  await e.plugged({ namespace: "a", name: "web1", labels: { app: "web" } }, ["10.1.0.5"]);
  await e.idle();
  const release = hold();
  // A pass under way (a new peer), held inside its nft write.
  e.podUpserted(pod("client2", "10.1.0.3", { role: "client" }));
  await new Promise((r) => setTimeout(r, 20));
  let answered = false;
  const add = e.plugged({ namespace: "a", name: "web2", labels: { app: "web" } }, ["10.1.0.6"])
    .then(() => (answered = true));
  await new Promise((r) => setTimeout(r, 50));
  assertEquals(answered, false, "the ADD waits for the pass");
  assertEquals(batches, []);
  release();
  await add;
  assertEquals(batches.length, 1);
  assert(scripts.at(-1)!.includes("10.1.0.3"), "the pass wrote first");
  await e.idle();
  await e.close();
});

Deno.test("an update in place that fails (the table flushed behind the daemon's back) is tried again as a whole write", async () => {
  const scripts: string[] = [];
  let failNext = false;
  const e = new PolicyEnforcer({
    nodeName: "n1",
    table: "fp",
    nft: {
      apply: (script) => {
        if (failNext) {
          failNext = false;
          return Promise.reject(new Error("Error: No such file or directory"));
        }
        scripts.push(script);
        return Promise.resolve();
      },
      remove: () => Promise.resolve(),
    },
    synced: () => true,
    logger: getLogger(["ferry", "test"]),
  });
  e.namespaceUpserted({ metadata: { name: "a" } });
  e.policyUpserted(policy("web-in", "web"));
  e.podUpserted(pod("web1", "10.1.0.5", { app: "web" }));
  e.start();
  await e.idle();
  assert(scripts.at(-1)!.includes("10.1.0.5 : jump in-"), scripts.at(-1));
  failNext = true;
  e.podUpserted(pod("client", "10.1.0.2", { role: "client" }));
  await e.idle();
  assertEquals(e.stats().failures, 1);
  // The retry, a second later: the whole table, the new peer in it.
  await new Promise((r) => setTimeout(r, 1300));
  await e.idle();
  assert(scripts.at(-1)!.startsWith("table inet fp\ndelete table inet fp\n"), scripts.at(-1));
  assert(scripts.at(-1)!.includes("10.1.0.2"), scripts.at(-1));
  await e.close();
});

Deno.test("the stats say when the table was last written and when a write last failed, the retry's write after the failure", async () => {
  let failNext = false;
  const e = new PolicyEnforcer({
    nodeName: "n1",
    table: "fp",
    nft: {
      apply: (_script) => {
        if (!failNext) return Promise.resolve();
        failNext = false;
        return Promise.reject(new Error("Error: No such file or directory"));
      },
      remove: () => Promise.resolve(),
    },
    synced: () => true,
    logger: getLogger(["ferry", "test"]),
  });
  e.namespaceUpserted({ metadata: { name: "a" } });
  e.policyUpserted(policy("web-in", "web"));
  e.podUpserted(pod("web1", "10.1.0.5", { app: "web" }));
  const before = Date.now();
  e.start();
  await e.idle();
  const first = e.stats();
  assert(
    first.lastWriteAt && Date.parse(first.lastWriteAt) >= before,
    `lastWriteAt ${first.lastWriteAt}`,
  );
  assertEquals(first.lastFailureAt, undefined, "no write failed yet");
  failNext = true;
  e.podUpserted(pod("client", "10.1.0.2", { role: "client" }));
  await e.idle();
  const failed = e.stats();
  assertEquals(failed.failures, 1);
  assert(
    failed.lastFailureAt && Date.parse(failed.lastFailureAt) >= Date.parse(first.lastWriteAt!),
    `lastFailureAt ${failed.lastFailureAt} after the first write ${first.lastWriteAt}`,
  );
  assertEquals(failed.lastWriteAt, first.lastWriteAt, "the failed write is not a write");
  // The retry (a second later) writes the table: the last write is after the failure.
  for (let i = 0; i < 100 && e.stats().writes === failed.writes; i++) {
    await new Promise((r) => setTimeout(r, 50));
  }
  await e.idle();
  const retried = e.stats();
  assert(retried.writes > failed.writes, `no write after the failure: ${JSON.stringify(retried)}`);
  assert(
    Date.parse(retried.lastWriteAt!) >= Date.parse(failed.lastFailureAt!),
    `lastWriteAt ${retried.lastWriteAt} not after lastFailureAt ${failed.lastFailureAt}`,
  );
  await e.close();
});

Deno.test("a podIP that is no address is dropped and counted: never a peer, never written", async () => {
  const { e, scripts } = harness();
  e.start();
  await e.idle();
  // The API server validates podIPs; one that slipped by.
  e.podUpserted(pod("odd", "10.1.0.9 } accept", { app: "web" }));
  e.podUpserted(pod("odd", "10.1.0.9 } accept", { app: "web" }));
  await e.idle();
  assertEquals(e.stats().droppedAddresses, 1, "counted once per pod and value");
  assertEquals(e.stats().failedPasses, 0);
  assert(!scripts.some((s) => s.includes("accept }")), "the text reached no script");
  await e.close();
});

Deno.test("a NetworkPolicy pass that throws ends nothing: the ADD waiting fails with code 5, the pass is counted, the next one writes", async () => {
  const { e, scripts } = harness();
  e.start();
  await e.idle();
  const web9 = { namespace: "a", name: "web9", labels: { app: "web" } };
  // An address the renderer refuses, from the ADD path itself (a bug there): the pass throws.
  const err = await assertRejects(() => e.plugged(web9, ["10.1.0.9 } accept"]), CniError);
  assertEquals(err.code, CNI_ERROR.IO_FAILURE, err.message);
  assertEquals(e.stats().failedPasses, 1);
  assert(!scripts.some((s) => s.includes("accept }")), "the text reached no script");
  e.unplugged(web9);
  await e.plugged(web9, ["10.1.0.9"]);
  assert(scripts.at(-1)!.includes("10.1.0.9 : jump in-"), scripts.at(-1));
  await e.close();
});

Deno.test("an invalid NetworkPolicy isolates what it selects with none of its rules, and is said once", async () => {
  const refused: string[] = [];
  const { e, scripts } = harness();
  const bad: NetworkPolicy = {
    metadata: { namespace: "a", name: "bad", resourceVersion: "3" },
    spec: {
      podSelector: { matchLabels: { app: "db" } },
      ingress: [{ from: [{ ipBlock: { cidr: "not-a-cidr" } }] }],
    },
  };
  const withEvents = new PolicyEnforcer({
    nodeName: "n1",
    table: "fp",
    nft: { apply: (s) => (scripts.push(s), Promise.resolve()), remove: () => Promise.resolve() },
    synced: () => true,
    logger: getLogger(["ferry", "test"]),
    invalid: (p, message) => refused.push(`${p.kind} ${p.namespace}/${p.name}: ${message}`),
  });
  await e.close();
  withEvents.namespaceUpserted({ metadata: { name: "a" } });
  withEvents.policyUpserted(bad);
  withEvents.policyUpserted(bad);
  withEvents.podUpserted(pod("db1", "10.1.0.7", { app: "db" }));
  withEvents.start();
  await withEvents.idle();
  assertEquals(refused.length, 1, refused.join("\n"));
  assert(refused[0].startsWith("NetworkPolicy a/bad: "), refused[0]);
  assertEquals(withEvents.stats().invalidPolicies, 1);
  assertEquals(withEvents.stats().failedPasses, 0);
  const table = scripts.at(-1)!;
  assert(table.includes("10.1.0.7 : jump in-"), `db1 isolated:\n${table}`);
  assert(!table.includes("a/bad ingress"), `no rule of the invalid policy:\n${table}`);
  await withEvents.close();
});

/** Polls `check` until it holds, for up to `ms`; fails saying `what` otherwise. */
async function until(check: () => boolean, what: string, ms = 5000) {
  for (const start = Date.now(); !check();) {
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

Deno.test("a counter read that never returns is not joined by another: later ticks are skipped until it is given up", async () => {
  const reads: AbortSignal[] = [];
  const e = new PolicyEnforcer({
    nodeName: "n1",
    table: "fp",
    nft: {
      apply: () => Promise.resolve(),
      remove: () => Promise.resolve(),
      // Never answers by itself: only its signal (the timeout) ends it.
      listJson: (_table, signal) => {
        reads.push(signal!);
        return new Promise((_, reject) =>
          signal!.addEventListener("abort", () => reject(signal!.reason))
        );
      },
    },
    synced: () => true,
    logger: getLogger(["ferry", "test"]),
    countTimeoutMs: 300,
  });
  e.namespaceUpserted({ metadata: { name: "a" } });
  e.policyUpserted(policy("web-in", "web"));
  e.podUpserted(pod("web1", "10.1.0.5", { app: "web" }));
  e.start(10);
  await e.idle();
  await until(() => e.stats().countsSkipped >= 5, "five ticks while the first read runs");
  assertEquals(reads.length, 1, "a second read started while the first still ran");
  await until(() => reads[0].aborted, "the first read's timeout");
  await until(() => reads.length === 2, "a read after the first was given up");
  await e.close();
});

Deno.test("a policy over the size limits isolates its pods without what it allows, is told once, and is enforced once it fits", async () => {
  const scripts: string[] = [];
  const told: string[] = [];
  const e = new PolicyEnforcer({
    nodeName: "n1",
    table: "fp",
    nft: {
      apply: (script) => (scripts.push(script), Promise.resolve()),
      remove: () => Promise.resolve(),
    },
    synced: () => true,
    logger: getLogger(["ferry", "test"]),
    limits: { policyEntries: 50, namespaceEntries: 500 },
    refused: (p, reason) => told.push(`${p.metadata?.name}: ${reason}`),
  });
  const huge: NetworkPolicy = {
    metadata: { namespace: "a", name: "huge", resourceVersion: "1" },
    spec: {
      podSelector: { matchLabels: { app: "web" } },
      ingress: [{
        from: [{ ipBlock: { cidr: "10.0.0.0/8", except: [] } }],
        ports: Array.from({ length: 60 }, (_, i) => ({ port: 1000 + i })),
      }],
    },
  };
  e.namespaceUpserted({ metadata: { name: "a" } });
  e.policyUpserted(huge);
  // Refused too, but it selects only a pod of another node: that node says so, not this one.
  e.policyUpserted({
    ...huge,
    metadata: { namespace: "a", name: "far", resourceVersion: "1" },
    spec: { ...huge.spec!, podSelector: { matchLabels: { app: "far" } } },
  });
  e.podUpserted({
    ...pod("far1", "10.1.0.9", { app: "far" }),
    spec: { nodeName: "n2", containers: [] },
  });
  e.podUpserted(pod("web1", "10.1.0.5", { app: "web" }));
  e.start();
  await e.idle();
  const table = scripts.at(-1)!;
  assert(table.includes("10.1.0.5 : jump in-"), `web1 isolated straight to its drop: ${table}`);
  assert(!table.includes("a/huge ingress[0]"), `no rule of the refused policy: ${table}`);
  assertEquals(told.length, 1, told.join("\n"));
  assert(told[0].startsWith("huge: ") && told[0].includes("policy.limits.policyEntries"), told[0]);
  assertEquals(e.stats().refusedPolicies, 2);
  assertEquals(e.refused(), ["a/far", "a/huge"]);
  // Other changes (a pod, another policy) recompile, but the refusal is not told again.
  e.podUpserted(pod("client", "10.1.0.2", { role: "client" }));
  e.policyUpserted(policy("other", "db"));
  await e.idle();
  assertEquals(told.length, 1, "told again without a change of the policy");
  // Shrunk under the limit: enforced with its rules.
  e.policyUpserted({
    ...huge,
    metadata: { ...huge.metadata, resourceVersion: "2" },
    spec: { ...huge.spec!, ingress: [{ ...huge.spec!.ingress![0], ports: [{ port: 80 }] }] },
  });
  await e.idle();
  assert(scripts.at(-1)!.includes("a/huge ingress[0]"), scripts.at(-1));
  assertEquals(e.refused(), ["a/far"]);
  assertEquals(e.stats().refusedPolicies, 1);
  assertEquals(told.length, 1, told.join("\n"));
  await e.close();
});

Deno.test("an ADD behind a pass that never ends answers code 11 within its budget, whether its rules are new or written by itself", async () => {
  const { e, batches, hold } = harness({ addWaitMs: 300 });
  e.start();
  await e.idle();
  await e.plugged({ namespace: "a", name: "web1", labels: { app: "web" } }, ["10.1.0.5"]);
  await e.idle();
  // Another tenant's huge table: a pass that does not end.
  const release = hold();
  e.podUpserted(pod("client2", "10.1.0.3", { role: "client" }));
  await new Promise((r) => setTimeout(r, 20));
  for (
    const [name, app, ip] of [["web2", "web", "10.1.0.6"], ["db1", "db", "10.1.0.7"]] as const
  ) {
    if (app === "db") e.policyUpserted(policy("db-in", "db"));
    const error = await e.plugged({ namespace: "a", name, labels: { app } }, [ip]).then(
      () => undefined,
      (err) => err,
    );
    assert(
      error instanceof CniError,
      `${name}: ${error ?? "answered as if its rules were in place"}`,
    );
    assertEquals(error.code, CNI_ERROR.TRY_AGAIN_LATER, `${name}: ${error.message}`);
  }
  assertEquals(batches, [], "nothing written while the pass holds the table");
  assertEquals(e.stats().addsTimedOut, 2);
  release();
  await e.idle();
  await e.close();
});

Deno.test("an ADD waits for the pass that writes its pod, not for every pass that changes keep starting", async () => {
  const { e, scripts } = harness({ applyMs: 20, addWaitMs: 30_000 });
  e.start();
  await e.idle();
  // Pod churn elsewhere: a pass is always due, for up to 1000 changes 5 ms apart.
  let stop = false;
  let churnEnded = false;
  const churn = (async () => {
    for (let i = 0; !stop && i < 1000; i++) {
      e.podUpserted(pod(`c${i}`, `10.2.${i >> 8}.${i & 255}`, { role: "client" }));
      await new Promise((r) => setTimeout(r, 5));
    }
    churnEnded = true;
  })();
  let answeredWhileChurning = false;
  try {
    await e.plugged({ namespace: "a", name: "web1", labels: { app: "web" } }, ["10.1.0.5"]);
    answeredWhileChurning = !churnEnded;
  } finally {
    stop = true;
    await churn;
  }
  assert(answeredWhileChurning, "the ADD answered only once the churn stopped");
  assert(scripts.some((s) => s.includes("10.1.0.5 : jump in-")), "web1's rules were written");
  await e.idle();
  await e.close();
});

Deno.test("with an in-process counter reader, the rules' counters are read through it and no nft process is started", async () => {
  let lists = 0;
  let reads = 0;
  const e = new PolicyEnforcer({
    nodeName: "n1",
    table: "fp",
    nft: {
      apply: () => Promise.resolve(),
      remove: () => Promise.resolve(),
      listJson: () => (lists++, Promise.resolve(undefined)),
    },
    counter: {
      ruleCounts: (table) => (reads++, [{ comment: `${table} a/web-in ingress[0]`, packets: 4 }]),
    },
    synced: () => true,
    logger: getLogger(["ferry", "test"]),
  });
  e.namespaceUpserted({ metadata: { name: "a" } });
  e.policyUpserted(policy("web-in", "web"));
  e.podUpserted(pod("web1", "10.1.0.5", { app: "web" }));
  e.start(10);
  await e.idle();
  await until(() => reads >= 3, "three reads through the counter reader");
  assertEquals(e.ruleCounts(), [{ comment: "fp a/web-in ingress[0]", packets: 4 }]);
  assertEquals(lists, 0, "nft -j list was started");
  await e.close();
});

Deno.test("a policy table deleted behind the daemon's back is written again whole at the next read of its counters, through nft or netlink", async () => {
  for (const through of ["nft", "netlink"] as const) {
    const scripts: string[] = [];
    let gone = false;
    const e = new PolicyEnforcer({
      nodeName: "n1",
      table: "fp",
      nft: {
        apply: (script) => {
          scripts.push(script);
          gone = false;
          return Promise.resolve();
        },
        remove: () => Promise.resolve(),
        listJson: () => Promise.resolve(gone ? undefined : '{"nftables": []}'),
      },
      ...(through === "netlink"
        ? {
          counter: {
            ruleCounts: () =>
              gone ? [] : [{ comment: "a/web1: no ingress rule allows it", packets: 0 }],
          },
        }
        : {}),
      synced: () => true,
      logger: getLogger(["ferry", "test"]),
    });
    e.namespaceUpserted({ metadata: { name: "a" } });
    e.policyUpserted(policy("web-in", "web"));
    e.podUpserted(pod("web1", "10.1.0.5", { app: "web" }));
    e.start(10);
    await e.idle();
    const written = scripts.length;
    assert(written >= 1, "the table written");
    await new Promise((r) => setTimeout(r, 50));
    assertEquals(scripts.length, written, `${through}: a table in place is not written again`);
    gone = true;
    await until(() => scripts.length > written, `${through}: the table written again`);
    assert(scripts.at(-1)!.startsWith("table inet fp\ndelete table inet fp\n"), scripts.at(-1));
    assert(scripts.at(-1)!.includes("10.1.0.5 : jump in-"), scripts.at(-1));
    await e.close();
  }
});

Deno.test("a write whose nft is killed as the daemon stops is neither reported as a failure nor tried again", async () => {
  let fail!: (e: Error) => void;
  let applies = 0;
  const e = new PolicyEnforcer({
    nodeName: "n1",
    table: "fp",
    nft: {
      apply: () => (applies++, new Promise((_, reject) => (fail = reject))),
      remove: () => Promise.resolve(),
    },
    synced: () => true,
    logger: getLogger(["ferry", "test"]),
  });
  e.namespaceUpserted({ metadata: { name: "a" } });
  e.policyUpserted(policy("web-in", "web"));
  e.podUpserted(pod("web1", "10.1.0.5", { app: "web" }));
  e.start();
  await until(() => applies === 1, "the first write under way");
  const closing = e.close();
  fail(new Error("nft -f: killed (its owner is closed)"));
  await closing;
  assertEquals(e.stats().failures, 0);
  // Past the retry delay: no second write.
  await new Promise((r) => setTimeout(r, 1200));
  assertEquals(applies, 1);
});
