import { assert, assertEquals, assertStringIncludes } from "deno-std/assert/mod.js";
import { masqueradeRuleset, NftRunner } from "../../../daemon/cluster/masquerade.ts";
import { ChildKilledError } from "../../../daemon/runtime/child_set.ts";
import { IS_ROOT, run, withNetns } from "../../../daemon/dev/netns.ts";

Deno.test("the masquerade ruleset replaces the table in one transaction, per family present", () => {
  const text = masqueradeRuleset("ferry", ["10.244.1.0/24"], ["10.244.1.0/24", "10.244.2.0/24"]);
  const lines = text.split("\n");
  assertEquals(lines.slice(0, 3), [
    "table inet ferry",
    "delete table inet ferry",
    "table inet ferry {",
  ]);
  assertStringIncludes(
    text,
    "elements = { 10.244.1.0/24, 10.244.2.0/24, 255.255.255.255/32, 224.0.0.0/4 }",
  );
  assertStringIncludes(text, "ip saddr @pods4 ip daddr != @cluster4 masquerade");
  assertEquals(text.includes("ip6"), false);
});

Deno.test("a pod's broadcast, multicast and IPv6 link-local traffic is never masqueraded (bridged frames pass the same hook)", () => {
  const text = masqueradeRuleset("ferry", ["10.244.1.0/24", "fd00:1::/64"], []);
  const set = (name: string) => text.split("\n").find((l) => l.includes(`set ${name} `)) ?? "";
  for (const c of ["255.255.255.255/32", "224.0.0.0/4"]) assertStringIncludes(set("cluster4"), c);
  // A cloud's metadata service (169.254.169.254) is reached through the node: masqueraded.
  assertEquals(set("cluster4").includes("169.254"), false);
  for (const c of ["fe80::/10", "ff00::/8"]) assertStringIncludes(set("cluster6"), c);
});

Deno.test({
  name: "nft accepts the ruleset (dual stack, overlapping exceptions) and replaces it atomically",
  ignore: !IS_ROOT || !(await Deno.stat("/usr/sbin/nft").then(() => true, () => false)),
  fn: () =>
    withNetns(1, async ([ns]) => {
      const apply = (text: string) =>
        run("ip", "netns", "exec", ns.name, "sh", "-c", `printf '%s' '${text}' | nft -f -`);
      await apply(masqueradeRuleset("ferry", ["10.244.1.0/24", "fd00:1::/64"], [
        "10.244.1.0/24",
        "10.0.0.0/8",
        "fd00:1::/64",
      ]));
      await apply(masqueradeRuleset("ferry", ["10.244.1.0/24"], ["10.244.1.0/24"]));
      const listed = await run(
        "ip",
        "netns",
        "exec",
        ns.name,
        "nft",
        "list",
        "table",
        "inet",
        "ferry",
      );
      assertStringIncludes(listed, "masquerade");
      assertEquals(listed.includes("ip6 saddr"), false);
    }),
});

Deno.test("an nft still running when its runner closes (the daemon stops) is killed, not left an orphan", async () => {
  const dir = await Deno.makeTempDir();
  try {
    // An nft that takes forever (a huge table): it says its pid, then sleeps.
    const fake = `${dir}/nft`;
    await Deno.writeTextFile(fake, `#!/bin/sh\necho $$ > ${dir}/pid-$1\nexec sleep 60\n`);
    await Deno.chmod(fake, 0o755);
    const runner = new NftRunner({ nft: fake });
    const applying = runner.apply("table inet x {}\n");
    const listing = runner.listJson("x");
    const pids: string[] = [];
    for (const file of ["pid--f", "pid--j"]) {
      let pid = "";
      for (let i = 0; i < 500 && !pid; i++) {
        pid = await Deno.readTextFile(`${dir}/${file}`).then((t) => t.trim(), () => "");
        if (!pid) await new Promise((r) => setTimeout(r, 10));
      }
      assert(pid, `the fake nft (${file}) never started`);
      pids.push(pid);
    }
    // Both outcomes are awaited together: one rejecting while the other is awaited would be an
    // unhandled rejection.
    const outcomes = Promise.allSettled([applying, listing]);
    runner.close();
    const [applied, listed] = await outcomes;
    for (const [what, r] of [["apply", applied], ["listJson", listed]] as const) {
      assert(
        r.status === "rejected" && r.reason instanceof ChildKilledError,
        `${what} was not killed: ${r.status}`,
      );
    }
    for (const pid of pids) {
      const alive = await Deno.stat(`/proc/${pid}`).then(() => true, () => false);
      assertEquals(alive, false, `nft process ${pid} still exists after the runner closed`);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a runner with a timeout kills an nft that outlives it, and lists and removes tables of its family", async () => {
  const dir = await Deno.makeTempDir();
  try {
    // An nft that says its arguments and pid, then sleeps unless it lists or deletes.
    const fake = `${dir}/nft`;
    await Deno.writeTextFile(
      fake,
      `#!/bin/sh\necho "$*" >> ${dir}/args\necho $$ > ${dir}/pid\n` +
        `case "$1" in -f) exec sleep 60;; esac\necho '{"nftables":[]}'\n`,
    );
    await Deno.chmod(fake, 0o755);
    const runner = new NftRunner({ nft: fake, family: "bridge", timeoutMs: 300 });
    const applied = await runner.apply("table bridge x {}\n").then(() => undefined, (e) => e);
    assert(applied instanceof ChildKilledError, `apply was not given up: ${applied}`);
    const pid = (await Deno.readTextFile(`${dir}/pid`)).trim();
    const alive = await Deno.stat(`/proc/${pid}`).then(() => true, () => false);
    assertEquals(alive, false, `nft process ${pid} still exists after its timeout`);
    assertEquals(await runner.listJson("x"), '{"nftables":[]}\n');
    await runner.remove("x");
    const args = (await Deno.readTextFile(`${dir}/args`)).trim().split("\n");
    assertEquals(args, ["-f -", "-j list table bridge x", "delete table bridge x"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
