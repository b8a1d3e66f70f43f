import { assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { createRouter, type RouterDeps } from "../../daemon/router.ts";
import { CniError } from "../../lib/cni/errors.ts";
import type { CniRequest } from "../../lib/envelope.ts";

const REQ: CniRequest = {
  command: "ADD",
  containerId: "c1",
  netns: "/var/run/netns/p",
  ifname: "eth0",
  args: {},
  path: [],
  config: { cniVersion: "1.0.0", name: "ferry", type: "ferry" },
};

function router(over: Partial<RouterDeps> = {}) {
  return createRouter({
    handle: () => Promise.resolve({ cniVersion: "1.1.0", ips: [{ address: "10.0.0.2/32" }] }),
    isHealthy: () => true,
    isReady: () => false,
    stats: () => ({ cniRequests: { ADD: 1 } }),
    maxRequestBytes: 4096,
    logger: getLogger(["ferry", "test"]),
    ...over,
  });
}

const post = (body: string) => new Request("http://ferry/v1/cni", { method: "POST", body });

Deno.test("a valid request gets the handler's result", async () => {
  const res = await router()(post(JSON.stringify(REQ)));
  assertEquals(res.status, 200);
  assertEquals(await res.json(), {
    result: { cniVersion: "1.1.0", ips: [{ address: "10.0.0.2/32" }] },
  });
});

Deno.test("a body that is not JSON is CNI error 6, an unknown command 4, a bad config 7", async () => {
  const bad = await router()(post("{nope"));
  assertEquals([bad.status, (await bad.json()).error.code], [400, 6]);
  const invalid = await router()(post(JSON.stringify({ ...REQ, command: "FROB" })));
  assertEquals([invalid.status, (await invalid.json()).error.code], [400, 4]);
  const conf = await router()(
    post(JSON.stringify({ ...REQ, config: { ...REQ.config, name: "a b" } })),
  );
  assertEquals([conf.status, (await conf.json()).error.code], [400, 7]);
});

Deno.test("names that would reach files, links or batch lines are refused with code 4 before any handler runs", async () => {
  let handled = 0;
  const r = router({
    handle: () => {
      handled++;
      return Promise.resolve(undefined);
    },
  });
  for (
    const bad of [
      { containerId: "../../etc/x" },
      { ifname: "eth0\nlink del lo" },
      { ifname: ".." },
      { ifname: "a:b" },
      { netns: "relative/ns" },
      { netns: "/var/run/netns/p type dummy" },
      { netns: "/var/run/netns/p\n" },
      { containerId: "a".repeat(201) },
    ]
  ) {
    const res = await r(post(JSON.stringify({ ...REQ, ...bad })));
    assertEquals([res.status, (await res.json()).error.code], [400, 4], JSON.stringify(bad));
  }
  assertEquals(handled, 0);
});

Deno.test("a body over the limit is refused with CNI error 6 before it is parsed", async () => {
  let called = false;
  const res = await router({ handle: () => (called = true, Promise.resolve(undefined)) })(
    post("x".repeat(5000)),
  );
  assertEquals((await res.json()).error.code, 6);
  assertEquals(called, false);
});

Deno.test("a handler's CniError keeps its code; anything else is an internal error", async () => {
  const typed = await router({ handle: () => Promise.reject(new CniError(11, "later")) })(
    post(JSON.stringify(REQ)),
  );
  assertEquals([typed.status, (await typed.json()).error], [503, { code: 11, msg: "later" }]);
  const crash = await router({ handle: () => Promise.reject(new TypeError("oops")) })(
    post(JSON.stringify(REQ)),
  );
  assertEquals([crash.status, (await crash.json()).error.code], [500, 999]);
});

Deno.test("health and readiness report their state; unknown routes are 404/405", async () => {
  const r = router();
  assertEquals(await (await r(new Request("http://ferry/v1/stats"))).json(), {
    cniRequests: { ADD: 1 },
  });
  assertEquals((await r(new Request("http://ferry/healthz"))).status, 200);
  assertEquals((await r(new Request("http://ferry/readyz"))).status, 503);
  const unknown = await r(new Request("http://ferry/nope"));
  assertEquals(unknown.status, 404);
  await unknown.body?.cancel();
  const wrongMethod = await r(new Request("http://ferry/v1/cni"));
  assertEquals(wrongMethod.status, 405);
  await wrongMethod.body?.cancel();
});
