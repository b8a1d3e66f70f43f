// A pod's allowed-source-prefixes annotation: honoured only when the operator allows it, each
// entry a CIDR (normalised), anything else refused or invalid with a sentence naming why.
import { assert, assertEquals } from "deno-std/assert/mod.js";
import {
  ALLOWED_SOURCES_ANNOTATION,
  allowedSources,
} from "../../../daemon/portsec/allowed_sources.ts";

Deno.test("no annotation asks for nothing, allowed or not", () => {
  assertEquals(allowedSources({}, false), { prefixes: [] });
  assertEquals(allowedSources(undefined, true), { prefixes: [] });
});

Deno.test("an honoured annotation gives its prefixes, normalised, each once", () => {
  assertEquals(
    allowedSources(
      { [ALLOWED_SOURCES_ANNOTATION]: "10.8.0.7/24, fd00:ab::1/64,10.8.0.0/24" },
      true,
    ),
    { prefixes: ["10.8.0.0/24", "fd00:ab::/64"] },
  );
});

Deno.test("an annotation the operator does not allow is refused, naming the setting", () => {
  const r = allowedSources({ [ALLOWED_SOURCES_ANNOTATION]: "10.8.0.0/24" }, false);
  assert("refused" in r && r.refused.includes("allowSourcePrefixesAnnotation"), JSON.stringify(r));
});

Deno.test("an honoured annotation with an entry that is no prefix is invalid, naming the entry", () => {
  const r = allowedSources({ [ALLOWED_SOURCES_ANNOTATION]: "10.8.0.0/24,10.9.0.1" }, true);
  assertEquals(r, { invalid: `${ALLOWED_SOURCES_ANNOTATION}: "10.9.0.1" is not a CIDR prefix` });
});

Deno.test("an honoured annotation naming a prefix that overlaps a pod range, or addresses no pod sends from, is invalid, naming what it overlaps", () => {
  const ranges = ["10.244.0.0/24", "10.244.1.0/24", "fd00:10:244::/64"];
  for (
    const [entry, what] of [
      ["10.244.1.0/24", "10.244.1.0/24"],
      ["10.244.0.128/25", "10.244.0.0/24"],
      ["10.0.0.0/8", "10.244.0.0/24"],
      ["fd00:10:244::/48", "fd00:10:244::/64"],
      ["0.0.0.0/0", "10.244.0.0/24"],
      ["169.254.0.0/16", "link-local"],
      ["fe80::/64", "link-local"],
      ["224.0.0.0/24", "multicast"],
      ["ff02::/16", "multicast"],
      ["127.0.0.1/32", "loopback"],
      ["::1/128", "loopback"],
      ["::/128", "unspecified"],
      ["255.255.255.255/32", "broadcast"],
    ]
  ) {
    const r = allowedSources(
      { [ALLOWED_SOURCES_ANNOTATION]: `198.51.100.0/24,${entry}` },
      true,
      ranges,
    );
    assert("invalid" in r && r.invalid.includes(what), `${entry}: ${JSON.stringify(r)}`);
  }
  assertEquals(
    allowedSources({ [ALLOWED_SOURCES_ANNOTATION]: "198.51.100.0/24" }, true, ranges),
    { prefixes: ["198.51.100.0/24"] },
  );
});
