import { assertEquals } from "deno-std/assert/mod.js";
import { getLogger } from "@logtape/logtape";
import { createRouter, type RouterDeps } from "../../../daemon/server/router.ts";
import type { SocketRequest } from "../../../daemon/server/http1.ts";
import { CniError } from "../../../lib/cni/errors.ts";
import type { CniRequest } from "../../../lib/envelope.ts";

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

/** A request as the socket hands it over. */
const request = (method: string, path: string, body = ""): SocketRequest => ({
  method,
  path,
  headers: new Map(),
  body: new TextEncoder().encode(body),
  signal: new AbortController().signal,
  whenUndelivered: () => {},
});
const post = (body: string) => request("POST", "/v1/cni", body);
const get = (path: string) => request("GET", path);

Deno.test("a valid request gets the handler's result", async () => {
  const res = await router()(post(JSON.stringify(REQ)));
  assertEquals(res.status, 200);
  assertEquals(JSON.parse(res.body), {
    result: { cniVersion: "1.1.0", ips: [{ address: "10.0.0.2/32" }] },
  });
});

Deno.test("a body that is not JSON is CNI error 6, an unknown command 4, a bad config 7", async () => {
  const bad = await router()(post("{nope"));
  assertEquals([bad.status, JSON.parse(bad.body).error.code], [400, 6]);
  const invalid = await router()(post(JSON.stringify({ ...REQ, command: "FROB" })));
  assertEquals([invalid.status, JSON.parse(invalid.body).error.code], [400, 4]);
  const conf = await router()(
    post(JSON.stringify({ ...REQ, config: { ...REQ.config, name: "a b" } })),
  );
  assertEquals([conf.status, JSON.parse(conf.body).error.code], [400, 7]);
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
    assertEquals([res.status, JSON.parse(res.body).error.code], [400, 4], JSON.stringify(bad));
  }
  assertEquals(handled, 0);
});

Deno.test("a body over the limit is refused with CNI error 6 before it is parsed", async () => {
  let called = false;
  const res = await router({ handle: () => (called = true, Promise.resolve(undefined)) })(
    post("x".repeat(5000)),
  );
  assertEquals(JSON.parse(res.body).error.code, 6);
  assertEquals(called, false);
});

Deno.test("a handler's CniError keeps its code; anything else is an internal error", async () => {
  const typed = await router({ handle: () => Promise.reject(new CniError(11, "later")) })(
    post(JSON.stringify(REQ)),
  );
  assertEquals([typed.status, JSON.parse(typed.body).error], [503, { code: 11, msg: "later" }]);
  const crash = await router({ handle: () => Promise.reject(new TypeError("oops")) })(
    post(JSON.stringify(REQ)),
  );
  assertEquals([crash.status, JSON.parse(crash.body).error.code], [500, 999]);
});

Deno.test("health and readiness report their state; unknown routes are 404/405", async () => {
  const r = router();
  const stats = await r(get("/v1/stats"));
  assertEquals([stats.contentType, JSON.parse(stats.body)], [
    "application/json",
    { cniRequests: { ADD: 1 } },
  ]);
  assertEquals(await r(get("/healthz")), { status: 200, body: "ok\n" });
  assertEquals(await r(get("/readyz")), { status: 503, body: "not ok\n" });
  assertEquals((await r(get("/nope"))).status, 404);
  assertEquals((await r(get("/v1/cni"))).status, 405);
});

Deno.test("the handler gets the request's hang-up signal, and registers its undo work on the request", async () => {
  const registered: (() => Promise<void>)[] = [];
  const gone = new AbortController();
  const undo = () => Promise.resolve();
  let signal: AbortSignal | undefined;
  const r = router({
    handle: (_req, s, undelivered) => {
      signal = s;
      undelivered(undo);
      return Promise.resolve(undefined);
    },
  });
  const res = await r({
    ...post(JSON.stringify(REQ)),
    signal: gone.signal,
    whenUndelivered: (fn) => void registered.push(fn),
  });
  assertEquals([res.status, res.body], [200, "{}"]);
  assertEquals(signal, gone.signal);
  assertEquals(registered, [undo]);
});

Deno.test("a ready daemon that is degraded answers readiness 200 with the note; not ready, no note", async () => {
  const note = () => "degraded: 1 pod range(s) of other nodes cannot be routed";
  assertEquals(await router({ isReady: () => true, readyNote: note })(get("/readyz")), {
    status: 200,
    body: `ok\n${note()}\n`,
  });
  assertEquals(await router({ readyNote: note })(get("/readyz")), {
    status: 503,
    body: "not ok\n",
  });
});
