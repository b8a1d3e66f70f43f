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
