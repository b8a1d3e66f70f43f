import { assertEquals, assertThrows } from "deno-std/assert/mod.js";
import {
  matchesSelectors,
  parseFieldSelector,
  parseLabelSelector,
  SelectorError,
} from "../../../../daemon/dev/kube_standin/selectors.ts";

const pod = {
  metadata: { name: "web-0", namespace: "default", labels: { app: "web", tier: "front" } },
  spec: { nodeName: "n1" },
  status: { phase: "Running" },
};

Deno.test("field selectors match the server's supported pod fields, with =, == and !=", () => {
  assertEquals(
    matchesSelectors(pod, parseFieldSelector("spec.nodeName=n1,status.phase==Running", "pods"), []),
    true,
  );
  assertEquals(matchesSelectors(pod, parseFieldSelector("spec.nodeName!=n1", "pods"), []), false);
  assertEquals(matchesSelectors(pod, parseFieldSelector("metadata.name=web-0", "pods"), []), true);
});

Deno.test("an unsupported field is rejected as the server does", () => {
  assertThrows(
    () => parseFieldSelector("spec.nodeName=n1", "nodes"),
    SelectorError,
    "field label not supported",
  );
  assertThrows(() => parseFieldSelector("spec.containers=x", "pods"), SelectorError);
});

Deno.test("label selectors support equality, sets and existence", () => {
  const m = (sel: string) => matchesSelectors(pod, [], parseLabelSelector(sel));
  assertEquals([
    m("app=web"),
    m("app==web"),
    m("app!=web"),
    m("app in (db,web)"),
    m("app notin (web)"),
  ], [true, true, false, true, false]);
  assertEquals([m("tier"), m("!tier"), m("missing!=x"), m("app=web,tier=back")], [
    true,
    false,
    true,
    false,
  ]);
  assertThrows(() => parseLabelSelector("a in b"), SelectorError);
});
