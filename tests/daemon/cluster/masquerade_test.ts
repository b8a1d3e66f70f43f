import { assertEquals, assertStringIncludes } from "deno-std/assert/mod.js";
import { masqueradeRuleset } from "../../../daemon/cluster/masquerade.ts";
import { IS_ROOT, run, withNetns } from "../../../daemon/dev/netns.ts";

Deno.test("the masquerade ruleset replaces the table in one transaction, per family present", () => {
  const text = masqueradeRuleset("ferry", ["10.244.1.0/24"], ["10.244.1.0/24", "10.244.2.0/24"]);
  const lines = text.split("\n");
  assertEquals(lines.slice(0, 3), [
    "table inet ferry",
    "delete table inet ferry",
    "table inet ferry {",
  ]);
  assertStringIncludes(text, "elements = { 10.244.1.0/24, 10.244.2.0/24 }");
  assertStringIncludes(text, "ip saddr @pods4 ip daddr != @cluster4 masquerade");
  assertEquals(text.includes("ip6"), false);
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
