// Policy size limits (daemon/policy/limits.ts): a policy's entries are its peers, excepts and
// ports; one over the per-policy limit, or one that would bring its namespace over the
// per-namespace limit (in name order), is refused as a whole and only isolates; other
// namespaces are not touched by one's policies.
import { assertEquals } from "deno-std/assert/mod.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.d.ts";
import { limitPolicies, policyEntries } from "../../../daemon/policy/limits.ts";

/** A policy of `ns` with one ingress rule of `blocks` ipBlocks of `excepts` excepts and `ports` ports. */
function wide(
  ns: string,
  name: string,
  blocks: number,
  excepts: number,
  ports: number,
): NetworkPolicy {
  return {
    metadata: { namespace: ns, name },
    spec: {
      podSelector: {},
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

Deno.test("a policy's entries are its rules' peers, excepts and ports (a rule without either counts one)", () => {
  assertEquals(policyEntries(wide("t", "p", 40, 100, 40)), 40 + 4000 + 40);
  assertEquals(policyEntries({ metadata: { name: "deny" }, spec: { podSelector: {} } }), 0);
  assertEquals(
    policyEntries({
      spec: { podSelector: {}, ingress: [{}], egress: [{ ports: [{ port: 53 }] }] },
    }),
    2 + 2,
  );
});

Deno.test("a policy over the per-policy limit is refused and only isolates what it selected, both ways it did", () => {
  const huge = wide("t", "huge", 40, 100, 40);
  huge.spec!.egress = [{ to: [{ podSelector: {} }] }];
  const small = wide("t", "small", 1, 1, 1);
  const { policies, refused } = limitPolicies([huge, small], {
    policyEntries: 1000,
    namespaceEntries: 10_000,
  });
  assertEquals(refused.map((r) => r.key), ["t/huge"]);
  assertEquals(refused[0].reason.includes("policy.limits.policyEntries"), true, refused[0].reason);
  assertEquals(policies, [
    {
      metadata: huge.metadata,
      spec: { podSelector: {}, policyTypes: ["Ingress", "Egress"], ingress: [], egress: [] },
    },
    small,
  ]);
});

Deno.test("a namespace's policies are taken in name order up to its limit; the rest are refused, other namespaces untouched", () => {
  // 15 entries each (3 blocks, 3 excepts each, 3 ports): two fit in 30, a third does not.
  const mk = (ns: string, name: string) => wide(ns, name, 3, 3, 3);
  const all = [mk("t", "p3"), mk("t", "p1"), mk("t", "p2"), mk("u", "q1"), mk("u", "q2")];
  const { policies, refused } = limitPolicies(all, { policyEntries: 100, namespaceEntries: 30 });
  assertEquals(refused.map((r) => r.key), ["t/p3"]);
  assertEquals(
    refused[0].reason.includes("policy.limits.namespaceEntries"),
    true,
    refused[0].reason,
  );
  const allowing = policies.filter((p) => (p.spec?.ingress ?? []).length > 0);
  assertEquals(allowing.map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`), [
    "t/p1",
    "t/p2",
    "u/q1",
    "u/q2",
  ]);
});
